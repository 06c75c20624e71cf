package cluster

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// A reconcile pass reads the metadata, then pushes the configuration of each group its
// node leads. A subscription created between the two (its SyncConfig applied at once on
// the topic's leader) was undone by the pass's older reading: the topic's partition ran
// without it until the next pass, and a message sent meanwhile was not copied to it.
// On a loaded 3-node cluster the SDK test that creates a session subscription and sends
// at once received only the later messages. A pass must push what the metadata says
// when it pushes (S-TOP-1: a subscription gets every message sent after it exists).
func TestSlowReconcileKeepsANewSubscription(t *testing.T) {
	// The leader's first pass after it is named is held after reading; the passes after
	// it wait at the same point until the checks are done, so none repairs what the held
	// one pushed before it is checked.
	var slowed atomic.Value
	slowed.Store("")
	var held atomic.Bool
	read, resume, next, checked := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	defer close(checked)
	nodes := startClusterWith(t, 3, 3, func(c *Config) {
		id := c.NodeID
		c.afterConfigRead = func() {
			if slowed.Load() != id {
				return
			}
			if held.CompareAndSwap(false, true) {
				read <- struct{}{}
				<-resume
				return
			}
			select {
			case next <- struct{}{}:
			default:
			}
			<-checked
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodes[0].Store().Apply(ctx, &meta.CreateTopic{Name: "orders", Properties: meta.DefaultTopicProperties()}); err != nil {
		t.Fatal(err)
	}
	lead := leaderOf(t, nodes, "orders")
	other := nodes[0]
	if other == lead {
		other = nodes[1]
	}

	// A pass on the leader reads the metadata (no subscription yet) and is held there.
	slowed.Store(lead.cfg.NodeID)
	go lead.rec.reconcile(ctx)
	<-read
	// Meanwhile a subscription is created through another node: acknowledged once the
	// topic's partition runs it.
	if err := other.Store().Apply(ctx, &meta.CreateSubscription{Topic: "orders", Name: "audit",
		Properties: meta.DefaultSubscriptionProperties()}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	// The held pass has ended once the next one reaches the hook.
	lead.rec.changed()
	<-next
	var subs []string
	lead.mu.RLock()
	for _, r := range lead.parts {
		if r.entity == "orders" {
			for _, s := range r.p.EntityConfig().Subscriptions {
				subs = append(subs, s.Name)
			}
		}
	}
	lead.mu.RUnlock()
	if !slices.Contains(subs, "audit") {
		t.Errorf("after the held pass the topic's partition runs subscriptions %v: the new one was undone", subs)
	}
	m := &fsm.Message{}
	m.MessageID = "m1"
	if err := other.Router().Send(ctx, "orders", []*fsm.Message{m}); err != nil {
		t.Fatal(err)
	}
	msgs, err := other.Router().Receive(ctx, Address{Entity: "orders", Subscription: "audit"}, "", "", fsm.ReceiveAndDelete, 1, 5*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "m1" {
		t.Fatalf("a message sent after the subscription was created: received %v, %v; want m1", msgs, err)
	}
}
