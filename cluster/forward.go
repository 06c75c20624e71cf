package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// Auto-forwarding (S-FWD-1): a queue or subscription with ForwardTo moves each of its
// messages into another entity; with ForwardDeadLetteredMessagesTo, each dead-lettered
// one. A forwarder runs per forwarding source and local partition: it receives in
// peek-lock, sends a copy to the destination (durably, S-SEND-1) and only then completes
// the original, so a message is never lost and is duplicated at most when a crash falls
// between the two (at least once). A copy the destination refuses is abandoned, so after
// MaxDeliveryCount attempts it is dead-lettered at the source (S-LOCK-5). Forwarders run
// on every replica; on one that does not lead its group the receive fails and the
// forwarder waits. Session-enabled sources are not forwarded (their messages stay).

// forwardSpec is one forwarding source of one local partition.
type forwardSpec struct {
	r      *replica
	target fsm.Target
	source string // display path of the source, for DeadLetterSource
	dest   string
}

func (s forwardSpec) key() string {
	return fmt.Sprintf("%d|%s|%v|%s", s.r.cfg.GroupID, s.target.Sub, s.target.DLQ, strings.ToLower(s.dest))
}

// reconcileForwarders starts the forwarders the metadata asks for on the partitions
// hosted here and stops the others. Called with recMu held.
func (n *Node) reconcileForwarders() {
	n.mu.RLock()
	byEntity := map[string][]*replica{}
	for _, r := range n.parts {
		byEntity[r.entity] = append(byEntity[r.entity], r)
	}
	n.mu.RUnlock()
	want := map[string]forwardSpec{}
	add := func(rs []*replica, t fsm.Target, source, to string, session bool) {
		dest := meta.ForwardTarget(to)
		if dest == "" || (session && !t.DLQ) {
			return
		}
		for _, r := range rs {
			s := forwardSpec{r: r, target: t, source: source, dest: dest}
			want[s.key()] = s
		}
	}
	n.meta.read(func(s *meta.State) {
		for ent, rs := range byEntity {
			if q, ok := s.Queue(ent); ok {
				p := q.Properties
				add(rs, fsm.Target{}, q.Name, p.ForwardTo, p.RequiresSession)
				add(rs, fsm.Target{DLQ: true}, q.Name, p.ForwardDeadLetteredMessagesTo, p.RequiresSession)
				continue
			}
			subs, _ := s.Subscriptions(ent)
			for _, sub := range subs {
				p := sub.Properties
				path := sub.Topic + "/Subscriptions/" + sub.Name
				add(rs, fsm.Target{Sub: sub.Name}, path, p.ForwardTo, p.RequiresSession)
				add(rs, fsm.Target{Sub: sub.Name, DLQ: true}, path, p.ForwardDeadLetteredMessagesTo, p.RequiresSession)
			}
		}
	})
	for key, cancel := range n.fwd {
		if _, ok := want[key]; !ok {
			cancel()
			delete(n.fwd, key)
		}
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if _, running := n.fwd[key]; running {
			continue
		}
		select {
		case <-n.closing:
			return
		default:
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.fwd[key] = cancel
		n.wg.Add(1)
		go n.forward(ctx, want[key])
	}
}

// forwardBatch bounds the messages one forwarding round moves.
const forwardBatch = 64

func (n *Node) forward(ctx context.Context, s forwardSpec) {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the node closing ends a receive in progress
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case <-n.closing:
			return false
		}
	}
	for ctx.Err() == nil {
		select {
		case <-n.closing:
			return
		default:
		}
		msgs, err := s.r.p.Receive(ctx, fsm.Receive{Target: s.target, Mode: fsm.PeekLock, Max: forwardBatch}, 5*time.Second)
		if err != nil {
			if !pause(500 * time.Millisecond) { // not the leader, or closing
				return
			}
			continue
		}
		var done, failed []fsm.LockToken
		for _, m := range msgs {
			if err := n.Send(ctx, s.dest, []*fsm.Message{forwardCopy(m, s)}); err != nil {
				n.log.Warn("auto-forward failed", "from", s.source, "dead-letter", s.target.DLQ, "to", s.dest, "err", err)
				failed = append(failed, m.LockToken)
				continue
			}
			done = append(done, m.LockToken)
		}
		for _, batch := range []struct {
			toks []fsm.LockToken
			d    fsm.Disposition
		}{{done, fsm.Complete}, {failed, fsm.Abandon}} {
			if len(batch.toks) > 0 {
				if _, err := s.r.p.Settle(ctx, fsm.Settle{Target: s.target, Tokens: batch.toks, Disposition: batch.d}); err != nil {
					n.log.Warn("auto-forward settle", "from", s.source, "err", err)
				}
			}
		}
		if len(failed) > 0 && !pause(time.Second) {
			return
		}
	}
}

// forwardCopy is what the destination stores: the message as its sender wrote it, plus,
// out of a dead-letter queue, why it was dead-lettered and where (DeadLetterSource).
func forwardCopy(m *fsm.Message, s forwardSpec) *fsm.Message {
	c := &fsm.Message{Properties: m.Properties, Payload: m.Payload, Modified: m.Modified}
	c.SequenceNumber, c.EnqueuedTime, c.ScheduledEnqueueTime = 0, 0, 0
	if s.target.DLQ && m.DeadLetter != nil {
		d := *m.DeadLetter
		if d.Source == "" {
			d.Source = s.source
		}
		c.DeadLetter = &d
	}
	return c
}
