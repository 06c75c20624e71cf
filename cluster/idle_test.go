package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// offsetClock is the real clock moved forward by what a test advances. It arms real
// timers, so it drives the partitions too (Config.Clock).
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// S-IDLE-1: entities idle for their AutoDeleteOnIdle are deleted by the metadata leader,
// through the same command as an administrative delete; what counts as activity keeps
// the others: a send keeps a queue, a peek keeps a queue or a subscription, activity on a
// subscription keeps its topic, a receive that finds nothing keeps a queue, and an
// entity without AutoDeleteOnIdle stays.
func TestS_IDLE_1_AutoDeleteOnIdle(t *testing.T) {
	clock := &offsetClock{}
	cfg := testConfig(t.TempDir())
	cfg.Clock = clock
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, n)

	idle := 5 * time.Minute
	qp := func(d time.Duration) meta.QueueProperties {
		p := queueProps(2)
		p.AutoDeleteOnIdle = d
		return p
	}
	tp := func(d time.Duration) meta.TopicProperties {
		p := meta.DefaultTopicProperties()
		p.AutoDeleteOnIdle = d
		return p
	}
	sp := func(d time.Duration) meta.SubscriptionProperties {
		p := meta.DefaultSubscriptionProperties()
		p.AutoDeleteOnIdle = d
		return p
	}
	for _, c := range []meta.Command{
		&meta.CreateQueue{Name: "q-idle", Properties: qp(idle)},
		&meta.CreateQueue{Name: "q-sent", Properties: qp(idle)},
		&meta.CreateQueue{Name: "q-peeked", Properties: qp(idle)},
		&meta.CreateQueue{Name: "q-polled", Properties: qp(idle)},
		&meta.CreateQueue{Name: "q-never", Properties: qp(meta.Never)},
		&meta.CreateTopic{Name: "t-idle", Properties: tp(idle)},
		&meta.CreateSubscription{Topic: "t-idle", Name: "s", Properties: sp(meta.Never)},
		&meta.CreateTopic{Name: "t-subbusy", Properties: tp(idle)},
		&meta.CreateSubscription{Topic: "t-subbusy", Name: "s", Properties: sp(meta.Never)},
		&meta.CreateTopic{Name: "t-subs", Properties: tp(meta.Never)},
		&meta.CreateSubscription{Topic: "t-subs", Name: "idle", Properties: sp(idle)},
		&meta.CreateSubscription{Topic: "t-subs", Name: "peeked", Properties: sp(idle)},
	} {
		if err := n.Store().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() map[string]bool {
		got := map[string]bool{}
		_ = n.Store().Read(ctx, func(s *meta.State) {
			for _, q := range s.Queues() {
				got[q.Name] = true
			}
			for _, tp := range s.Topics() {
				got[tp.Name] = true
				subs, _ := s.Subscriptions(tp.Name)
				for _, sub := range subs {
					got[tp.Name+"/"+sub.Name] = true
				}
			}
		})
		return got
	}
	want := func(names ...string) {
		t.Helper()
		got := exists()
		if len(got) != len(names) {
			t.Errorf("entities %v, want %v", got, names)
		}
		for _, nm := range names {
			if !got[nm] {
				t.Errorf("%s was deleted; entities %v", nm, got)
			}
		}
	}

	clock.advance(4 * time.Minute)
	if err := n.Router().Send(ctx, "q-sent", []*fsm.Message{{Payload: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	// A receive that finds nothing is receiver activity too.
	if ms, err := n.Router().Receive(ctx, Address{Entity: "q-polled"}, "", "", fsm.PeekLock, 1, 0); err != nil || len(ms) != 0 {
		t.Fatalf("empty receive: %v %v", ms, err)
	}
	for _, a := range []Address{{Entity: "q-peeked"}, {Entity: "t-subbusy", Subscription: "s"}, {Entity: "t-subs", Subscription: "peeked"}} {
		if _, err := n.Router().Peek(ctx, a, "", 0, 10); err != nil {
			t.Fatalf("peek %v: %v", a, err)
		}
	}
	clock.advance(2 * time.Minute)
	// The leader's loop deletes q-idle on its own; a pass run here then settles the rest.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if exists()["q-idle"] {
			return fmt.Errorf("q-idle still exists")
		}
		return nil
	})
	n.steward.deleteIdle(ctx)
	want("q-sent", "q-peeked", "q-polled", "q-never", "t-subbusy", "t-subbusy/s", "t-subs", "t-subs/peeked")
	if _, err := n.Router().Peek(ctx, Address{Entity: "q-idle"}, "", 0, 1); err == nil {
		t.Error("the deleted queue still answers")
	}

	// Deleting t-subs/idle pushed a new configuration to t-subs's partitions; that is not
	// activity of t-subs/peeked, whose idle time still runs from its peek.
	clock.advance(idle)
	n.steward.deleteIdle(ctx)
	want("q-never", "t-subs")
}

// S-IDLE-1 across nodes: the metadata leader reads the activity of partitions other nodes
// lead, and a peek through a node that hosts no replica keeps its queue.
func TestS_IDLE_1_AcrossNodes(t *testing.T) {
	clock := &offsetClock{}
	nodes := startClusterWith(t, 3, 1, func(c *Config) { c.Clock = clock })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var leader, other *Node
	for _, nd := range nodes {
		if nd.meta.IsLeader() {
			leader = nd
		} else {
			other = nd
		}
	}
	if leader == nil {
		t.Fatal("no metadata leader")
	}
	p := queueProps(3) // three partitions, one replica each: spread over the nodes
	p.AutoDeleteOnIdle = 5 * time.Minute
	for _, q := range []string{"idle", "peeked"} {
		if err := other.Store().Apply(ctx, &meta.CreateQueue{Name: q, Properties: p}); err != nil {
			t.Fatal(err)
		}
	}
	// Peek only a partition that lives on another node than the metadata leader.
	e, err := other.Router().resolve("peeked")
	if err != nil {
		t.Fatal(err)
	}
	var remote *group
	for i, g := range e.parts {
		if !containsNode(g.replicas, leader.cfg.NodeID) {
			remote = &e.parts[i]
		}
	}
	if remote == nil {
		t.Fatalf("every partition of peeked is on the metadata leader")
	}
	clock.advance(4 * time.Minute)
	if _, err := other.Router().on(*remote).do(ctx, &wire.Peek{Target: fsm.Target{}, From: 0, Max: 10}); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Minute)
	waitFor(t, 20*time.Second, func() error {
		if _, err := leader.Router().resolve("idle"); err == nil {
			return fmt.Errorf("idle still exists")
		}
		return nil
	})
	leader.steward.deleteIdle(ctx)
	for _, nd := range nodes {
		if _, err := nd.Router().resolve("peeked"); err != nil {
			t.Errorf("peeked through %s: %v", nd.cfg.NodeID, err)
		}
	}
}
