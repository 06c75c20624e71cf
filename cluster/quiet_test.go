package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// Idle entities' partition groups go quiet on every node of a cluster (RaftConfig.
// QuiesceAfter): nothing the node does by itself in the background (reconciling,
// leader balancing, metrics, transaction recovery) keeps waking them.
func TestIdleClusterGroupsGoQuiet(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 4 {
		if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: fmt.Sprintf("idle-%d", i), Properties: queueProps(1)}); err != nil {
			t.Fatal(err)
		}
	}
	awake := func() error {
		n := 0
		for _, nd := range nodes {
			nd.mu.RLock()
			for _, r := range nd.parts {
				if !r.p.Quiet() {
					n++
				}
			}
			nd.mu.RUnlock()
		}
		if n > 0 {
			return fmt.Errorf("%d replicas awake", n)
		}
		return nil
	}
	testutil.WaitFor(t, 30*time.Second, awake)
	// Operators see it: quorumbus_partition_quiet is 1 for every replica.
	for _, nd := range nodes {
		for i := range 4 {
			if v, err := sample(nd.Registry(), "quorumbus_partition_quiet", "entity", fmt.Sprintf("idle-%d", i), "partition", "0"); err != nil || v != 1 {
				t.Errorf("%s: quorumbus_partition_quiet of idle-%d = %v, %v; want 1", nd.cfg.NodeID, i, v, err)
			}
		}
	}
	// And they stay quiet through several reconcile and balancing rounds.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if err := awake(); err != nil {
			t.Fatalf("an idle group woke up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
