package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Auto-forwarding (S-FWD-1): a queue or subscription with ForwardTo moves each of its
// messages into another entity; with ForwardDeadLetteredMessagesTo, each dead-lettered
// one. A forwarder runs per forwarding source and local partition: it receives in
// peek-lock, sends a copy to the destination (durably, S-SEND-1) and only then completes
// the original, so a message is never lost and is duplicated at most when a crash falls
// between the two (at least once). A copy the destination refuses is abandoned, so after
// MaxDeliveryCount attempts it is dead-lettered at the source (S-LOCK-5). Forwarders run
// on every replica; on one that does not lead its group the receive fails and the
// forwarder waits.
//
// A session-enabled source is forwarded one session at a time: the forwarder accepts the
// next available session (as a session receiver would, under its own owner name), moves
// that session's messages in sequence order and releases it. A copy the destination
// refuses is abandoned and the rest of its batch is released unsent, so a session's
// messages reach the destination in the order they were sent, keeping their SessionId.
//
// Chains: each forward adds one to the copy's hop count (ForwardHopsProperty, an
// application property the broker keeps to itself); a message that has already been
// forwarded MaxForwardHops times is dead-lettered at the source with reason
// MaxTransferHopCountExceeded instead of being forwarded again, as Service Bus does.
// Cycles are refused when an entity is created or updated (meta.State.CheckForwardLoop), so the
// hop limit only matters for chains longer than four and for a cycle two concurrent
// updates could still close.

// forwardSpec is one forwarding source of one local partition.
type forwardSpec struct {
	r       *replica
	target  fsm.Target
	source  string // display path of the source, for DeadLetterSource
	dest    string
	session bool // the source requires sessions (never for a dead-letter queue)
}

func (s forwardSpec) key() string {
	return fmt.Sprintf("%d|%s|%v|%s|%v", s.r.cfg.GroupID, s.target.Sub, s.target.DLQ, strings.ToLower(s.dest), s.session)
}

// MaxForwardHops is how many times a message may be auto-forwarded (Service Bus allows
// four); a message that would be forwarded once more is dead-lettered at its source.
const MaxForwardHops = meta.MaxForwardChain

// ForwardHopsProperty is the application property in which the broker counts a stored
// message's forwards. It lives only in the stored properties, never in the payload, and
// cmd/internal/bridge drops it from what clients see.
const ForwardHopsProperty = "x-opt-quorumbus-forward-hops"

// Dead-letter reason and description of a message over the hop limit (Service Bus's).
const (
	hopLimitReason      = "MaxTransferHopCountExceeded"
	hopLimitDescription = "The maximum number of allowed hops when forwarding between queues was exceeded. This value is set to 4."
)

// reconcileForwarders starts the forwarders the metadata asks for on the partitions
// hosted here and stops the others. Called with reconciler.mu held.
func (rc *reconciler) reconcileForwarders() {
	rc.n.mu.RLock()
	byEntity := map[string][]*replica{}
	for _, r := range rc.n.parts {
		byEntity[r.entity] = append(byEntity[r.entity], r)
	}
	rc.n.mu.RUnlock()
	want := map[string]forwardSpec{}
	add := func(rs []*replica, t fsm.Target, source, to string, session bool) {
		dest := meta.ForwardTarget(to)
		if dest == "" {
			return
		}
		for _, r := range rs {
			s := forwardSpec{r: r, target: t, source: source, dest: dest, session: session && !t.DLQ}
			want[s.key()] = s
		}
	}
	rc.n.meta.Read(func(s *meta.State) {
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
	for key, cancel := range rc.fwd {
		if _, ok := want[key]; !ok {
			cancel()
			delete(rc.fwd, key)
		}
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if _, running := rc.fwd[key]; running {
			continue
		}
		select {
		case <-rc.n.closing:
			return
		default:
		}
		ctx, cancel := context.WithCancel(context.Background())
		rc.fwd[key] = cancel
		rc.n.wg.Add(1)
		go forwarder{rc.n, want[key]}.run(ctx)
	}
}

// forwardBatch bounds the messages one forwarding round moves.
const forwardBatch = 64

// forwarder moves the messages of one forwarding source of one local partition.
type forwarder struct {
	n *Node
	s forwardSpec
}

func (f forwarder) run(ctx context.Context) {
	n, s := f.n, f.s
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
	owner := "$forwarder/" + n.cfg.NodeID
	for ctx.Err() == nil {
		select {
		case <-n.closing:
			return
		default:
		}
		req := fsm.Receive{Target: s.target, Mode: fsm.PeekLock, Max: forwardBatch}
		if s.session {
			sid, _, err := s.r.p.AcceptSession(ctx, fsm.AcceptSession{Target: s.target, Owner: owner}, 5*time.Second)
			if errors.Is(err, fsm.ErrNoSessionAvailable) {
				continue // AcceptSession waited already
			}
			if err != nil {
				if !pause(500 * time.Millisecond) { // not the leader, or closing
					return
				}
				continue
			}
			req.SessionID, req.Owner = sid, owner
		}
		failed := f.moveSession(ctx, req)
		if s.session {
			// Unlocks what was received but not moved, without counting a delivery
			// (S-SES-6), so the session's order holds on the next round.
			if err := s.r.p.ReleaseSession(ctx, s.target, req.SessionID, owner); err != nil && ctx.Err() == nil {
				n.log.Warn("auto-forward release session", "from", s.source, "session", req.SessionID, "err", err)
			}
		}
		if failed && !pause(time.Second) {
			return
		}
	}
}

// moveSession moves what req receives, in order, until the source (or, for a session
// source, the session) is empty or a copy fails; it reports a failure.
func (f forwarder) moveSession(ctx context.Context, req fsm.Receive) (failed bool) {
	n, s := f.n, f.s
	for ctx.Err() == nil {
		wait := 5 * time.Second
		if req.SessionID != "" {
			wait = 0 // the session is ours: move what it has now, then release it
		}
		msgs, err := s.r.p.Receive(ctx, req, wait)
		if err != nil {
			return true // not the leader, the session lock lost, or closing: the caller pauses
		}
		if len(msgs) == 0 {
			return false
		}
		var done, dead, bad, unsent []fsm.LockToken
		for i, m := range msgs {
			// A dead-letter queue's messages are forwarded whatever their count: they
			// cannot be dead-lettered again (and loops through them are refused).
			if !s.target.DLQ && forwardHops(m) >= MaxForwardHops {
				dead = append(dead, m.LockToken)
				continue
			}
			if err := n.router.Send(ctx, s.dest, []*fsm.Message{forwardCopy(m, s)}); err != nil {
				n.log.Warn("auto-forward failed", "from", s.source, "dead-letter", s.target.DLQ, "to", s.dest, "err", err)
				bad = append(bad, m.LockToken)
				// Later messages wait behind this one, so a session keeps its order.
				for _, m := range msgs[i+1:] {
					unsent = append(unsent, m.LockToken)
				}
				break
			}
			done = append(done, m.LockToken)
		}
		for _, batch := range []struct {
			toks []fsm.LockToken
			d    fsm.Disposition
		}{{done, fsm.Complete}, {dead, fsm.DeadLetter}, {bad, fsm.Abandon}, {unsent, fsm.Release}} {
			if len(batch.toks) == 0 {
				continue
			}
			st := fsm.Settle{Target: s.target, Tokens: batch.toks, Disposition: batch.d,
				SessionID: req.SessionID, Owner: req.Owner}
			if batch.d == fsm.DeadLetter {
				st.Reason, st.Description = hopLimitReason, hopLimitDescription
			}
			if _, err := s.r.p.Settle(ctx, st); err != nil {
				n.log.Warn("auto-forward settle", "from", s.source, "err", err)
			}
		}
		if len(bad) > 0 {
			return true
		}
	}
	return false
}

// forwardHops is how many times m has been auto-forwarded.
func forwardHops(m *fsm.Message) int64 {
	v, ok := m.Get(ForwardHopsProperty)
	if !ok || v.Kind != rule.KindLong {
		return 0
	}
	return int64(v.N)
}

// forwardCopy is what the destination stores: the message as its sender wrote it, plus,
// out of a dead-letter queue, why it was dead-lettered and where (DeadLetterSource).
func forwardCopy(m *fsm.Message, s forwardSpec) *fsm.Message {
	c := &fsm.Message{Properties: m.Properties, Payload: m.Payload, Modified: m.Modified}
	c.SequenceNumber, c.EnqueuedTime, c.ScheduledEnqueueTime = 0, 0, 0
	c.Set(ForwardHopsProperty, rule.Value{Kind: rule.KindLong, N: uint64(forwardHops(m) + 1)})
	if s.target.DLQ && m.DeadLetter != nil {
		d := *m.DeadLetter
		if d.Source == "" {
			d.Source = s.source
		}
		c.DeadLetter = &d
	}
	return c
}
