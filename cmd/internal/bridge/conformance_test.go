package bridge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/test/backendtest"
)

// TestBackendConformance runs the Backend scenarios on the real backend: this bridge
// over a single-node cluster, fsm semantics all the way down. amqp runs the same table
// on its in-memory fake (amqp/conformance_test.go), which keeps the fake, and so the
// SDK tests built on it, honest.
func TestBackendConformance(t *testing.T) {
	b, n := startBackend(t)
	seq := 0
	apply := func(t *testing.T, c meta.Command) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Store().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	backendtest.Run(t, backendtest.Env{
		Backend: b,
		NewQueue: func(t *testing.T, sessions bool) string {
			seq++
			path := fmt.Sprintf("conformance-%d", seq)
			p := meta.DefaultQueueProperties()
			p.RequiresSession = sessions
			apply(t, &meta.CreateQueue{Name: path, Properties: p})
			return path
		},
		NewTopic: func(t *testing.T, subs int) (string, []string) {
			seq++
			topic := fmt.Sprintf("conformance-%d", seq)
			apply(t, &meta.CreateTopic{Name: topic, Properties: meta.DefaultTopicProperties()})
			var paths []string
			for i := range subs {
				name := fmt.Sprintf("s%d", i)
				apply(t, &meta.CreateSubscription{Topic: topic, Name: name, Properties: meta.DefaultSubscriptionProperties()})
				paths = append(paths, topic+"/Subscriptions/"+name)
			}
			return topic, paths
		},
	})
}
