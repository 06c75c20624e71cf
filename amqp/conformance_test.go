package amqp_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/test/backendtest"
)

// TestFakeBackendConformance runs the Backend scenarios on the in-memory fake that the
// SDK tests use. cmd/internal/bridge runs the same table on the real backend over a
// single-node cluster, so a scenario that fails only here means the fake has drifted
// from the broker and the SDK tests check the wrong semantics.
func TestFakeBackendConformance(t *testing.T) {
	b, add := amqp.NewFakeBackend()
	var n atomic.Int64
	backendtest.Run(t, backendtest.Env{
		Backend: b,
		NewQueue: func(t *testing.T, sessions bool) string {
			path := fmt.Sprintf("conformance-%d", n.Add(1))
			add(amqp.EntityInfo{Kind: amqp.KindQueue, Path: path, RequiresSession: sessions})
			return path
		},
		NewTopic: func(t *testing.T, subs int) (string, []string) {
			topic := fmt.Sprintf("conformance-%d", n.Add(1))
			add(amqp.EntityInfo{Kind: amqp.KindTopic, Path: topic})
			var paths []string
			for i := range subs {
				p := fmt.Sprintf("%s/Subscriptions/s%d", topic, i)
				add(amqp.EntityInfo{Kind: amqp.KindSubscription, Path: p})
				paths = append(paths, p)
			}
			return topic, paths
		},
	})
}
