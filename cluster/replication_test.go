package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// A node removed with RemoveNode still runs (and gossips) until its operator stops it:
// neither placement nor the pass that raises groups to --replicas may put a replica back
// on it, although the groups it left now have fewer replicas than --replicas.
func TestRemovedNodeGetsNoReplicaBack(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var leader *Node
	for _, nd := range nodes {
		if nd.meta.IsLeader() {
			leader = nd
		}
	}
	if leader == nil {
		t.Fatal("no metadata leader")
	}
	if err := leader.Store().Apply(ctx, &meta.CreateQueue{Name: "shrunk", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	var victim string
	for _, nd := range nodes {
		if nd != leader {
			victim = nd.cfg.NodeID
		}
	}
	if err := leader.Ops().RemoveNode(ctx, victim); err != nil {
		t.Fatal(err)
	}
	replicas := func() []string {
		var pl meta.Placement
		leader.meta.Read(func(s *meta.State) { pl, _ = s.Placement("shrunk") })
		return pl.Partitions[0].Replicas
	}
	if r := replicas(); len(r) != 2 || containsNode(r, victim) {
		t.Fatalf("after removing %s: replicas %v", victim, r)
	}
	leader.steward.raiseReplicas(ctx) // as the metadata loop does every second
	if r := replicas(); len(r) != 2 || containsNode(r, victim) {
		t.Errorf("raise put a replica back on the removed %s: %v", victim, r)
	}
	for _, g := range leader.steward.place(4) {
		if containsNode(g, victim) {
			t.Errorf("a new group placed on the removed %s: %v", victim, g)
		}
	}
	// Nor may the metadata pass register it again or add it back to the metadata group
	// while gossip still sees it (it once did, and the chaos suite's add-remove fault then
	// found a metadata group that never converged).
	for i := 0; i < 3; i++ {
		leader.steward.reconcileMeta(ctx) // as the metadata loop does every second
	}
	for _, s := range leader.meta.Servers() {
		if string(s.ID) == victim {
			t.Errorf("the removed %s is back in the metadata group as %v", victim, s.Suffrage)
		}
	}
	leader.meta.Read(func(s *meta.State) {
		if _, ok := s.Node(victim); ok {
			t.Errorf("the removed %s is registered again", victim)
		}
	})
	// Cluster status, through any node, shows it removed, not alive.
	for _, nd := range nodes {
		if nd.cfg.NodeID == victim {
			continue
		}
		waitFor(t, 10*time.Second, func() error { // a follower applies the removal soon after
			st, err := nd.Ops().ClusterStatus(ctx)
			if err != nil {
				return err
			}
			for _, m := range st.Members {
				if m.ID == victim && m.State != "removed" {
					return fmt.Errorf("cluster status through %s shows the removed %s as %q, want removed", nd.cfg.NodeID, victim, m.State)
				}
			}
			return nil
		})
	}
}

// With one of three nodes draining, a new entity's groups still get three replicas
// (they once got two, and a pause of either one stopped the queue), the draining
// node never first (the preferred leader).
func TestPlaceUsesADrainingNodeWhenNeeded(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	drained := nodes[2].cfg.NodeID
	if err := nodes[0].Ops().DrainNode(ctx, drained); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "during-drain", Properties: queueProps(4)}); err != nil {
		t.Fatal(err)
	}
	var pl meta.Placement
	nodes[0].meta.Read(func(s *meta.State) { pl, _ = s.Placement("during-drain") })
	for i, p := range pl.Partitions {
		if len(p.Replicas) != 3 || p.Replicas[0] == drained {
			t.Errorf("partition %d: replicas %v, want 3 with %s not first", i, p.Replicas, drained)
		}
	}
}
