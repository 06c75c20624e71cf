package cluster

import (
	"context"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/partition"
)

// Auto-delete on idle (S-IDLE-1). The metadata leader looks for entities whose
// AutoDeleteOnIdle has passed since their last activity and deletes them through Apply,
// the administration API's path, so the deletion replicates like any other.
//
// Activity, all of it replicated state (Unix ms, as the leaders' clocks stamped it):
//   - queue: the entity's creation and updates (metadata), and on its partitions sends,
//     schedules and cancels (fsm LastSend) and receiver activity: receives, settlements,
//     lock renewals, session operations, peeks (fsm LastReceive of the queue, its
//     dead-letter queue included). Auto-forwarding out of the queue receives from it.
//   - subscription: its creation and updates, the creation of its rules (metadata), and
//     receiver activity on it as for a queue. Sends to its topic do not count.
//   - topic: its creation and updates, sends, schedules and cancels, and the activity of
//     every subscription.
//
// Peeks are recorded at most once per partition.PeekActivityGranularity, so an entity
// is deleted once it has been idle for AutoDeleteOnIdle plus that granularity: later than
// the exact moment, never earlier.

// idleCandidate is an entity with an AutoDeleteOnIdle, and the latest activity the
// metadata shows for it.
type idleCandidate struct {
	topic, name string          // name is the queue, topic or (with topic) subscription
	kind        meta.EntityKind // KindQueue or KindTopic; a subscription has topic set
	idle        time.Duration
	last        int64 // Unix ms: latest metadata activity
}

func (c idleCandidate) String() string {
	if c.topic != "" {
		return c.topic + "/Subscriptions/" + c.name
	}
	return c.name
}

// idleCandidates lists the entities that the metadata alone would let expire by now.
func idleCandidates(s *meta.State, now int64) []idleCandidate {
	var out []idleCandidate
	expired := func(last int64, idle time.Duration) bool {
		return idle > 0 && idle < meta.Never && last+(idle+partition.PeekActivityGranularity).Milliseconds() <= now
	}
	for _, q := range s.Queues() {
		if last := max(q.CreatedAt, q.UpdatedAt); expired(last, q.Properties.AutoDeleteOnIdle) {
			out = append(out, idleCandidate{name: q.Name, kind: meta.KindQueue, idle: q.Properties.AutoDeleteOnIdle, last: last})
		}
	}
	for _, t := range s.Topics() {
		subs, _ := s.Subscriptions(t.Name)
		tlast := max(t.CreatedAt, t.UpdatedAt)
		for _, sub := range subs {
			last := max(sub.CreatedAt, sub.UpdatedAt)
			for _, r := range sub.Rules {
				last = max(last, r.CreatedAt)
			}
			tlast = max(tlast, last)
			if expired(last, sub.Properties.AutoDeleteOnIdle) {
				out = append(out, idleCandidate{topic: t.Name, name: sub.Name, kind: meta.KindTopic,
					idle: sub.Properties.AutoDeleteOnIdle, last: last})
			}
		}
		if expired(tlast, t.Properties.AutoDeleteOnIdle) {
			out = append(out, idleCandidate{name: t.Name, kind: meta.KindTopic, idle: t.Properties.AutoDeleteOnIdle,
				last: tlast})
		}
	}
	return out
}

// lastActivity adds the partitions' recorded activity to c.last. An error (a partition
// without a leader) means "unknown": the entity is kept for now.
func (st *steward) lastActivity(ctx context.Context, c idleCandidate) (int64, error) {
	n := st.n
	name := c.name
	if c.topic != "" {
		name = c.topic
	}
	e, err := n.router.resolve(name)
	if err != nil {
		return 0, err
	}
	last := c.last
	for _, g := range e.parts {
		st, err := n.router.on(g).Stats(ctx)
		if err != nil {
			return 0, err
		}
		if c.topic == "" {
			last = max(last, st.LastSend)
		}
		for _, t := range st.Targets {
			if c.topic == "" || strings.EqualFold(t.Target.Sub, c.name) {
				last = max(last, t.LastReceive)
			}
		}
	}
	return last, nil
}

// deleteIdle deletes the entities idle for their AutoDeleteOnIdle. The metadata leader
// runs it; a deletion is the administration API's delete command.
func (st *steward) deleteIdle(ctx context.Context) {
	n := st.n
	now := n.clock.Now().UnixMilli()
	var cands []idleCandidate
	n.meta.Read(func(s *meta.State) { cands = idleCandidates(s, now) })
	for _, c := range cands {
		last, err := st.lastActivity(ctx, c)
		if err != nil {
			n.log.Debug("auto-delete on idle: activity unknown, keeping the entity", "entity", c.String(), "err", err)
			continue
		}
		if last+(c.idle+partition.PeekActivityGranularity).Milliseconds() > now {
			continue
		}
		var cmd meta.Command
		switch {
		case c.topic != "":
			cmd = &meta.DeleteSubscription{Topic: c.topic, Name: c.name}
		case c.kind == meta.KindQueue:
			cmd = &meta.DeleteQueue{Name: c.name}
		default:
			cmd = &meta.DeleteTopic{Name: c.name}
		}
		if err := n.store.Apply(ctx, cmd); err != nil {
			n.log.Warn("auto-delete on idle: delete failed", "entity", c.String(), "err", err)
			continue
		}
		n.log.Info("auto-delete on idle: deleted", "entity", c.String(), "idle", c.idle,
			"last_activity", time.UnixMilli(last).UTC())
	}
}
