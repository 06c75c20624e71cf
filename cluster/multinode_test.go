package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// startCluster starts n in-process nodes that form one cluster (bootstrap-expect n),
// each joining all the others, with replicas partition replicas per partition.
func startCluster(t testing.TB, n, replicas int) []*Node {
	t.Helper()
	return startClusterWith(t, n, replicas, nil)
}

// startClusterWith is startCluster with each node's config changed by edit (nil: none).
func startClusterWith(t testing.TB, n, replicas int, edit func(*Config)) []*Node {
	t.Helper()
	return startNodesFrom(t, 1, n, n, replicas, nil, nil, edit)
}

// startNodes starts n nodes n1..nN with the given bootstrap-expect, each joining all of
// them and the extra join addresses, in the given zones (nil: none).
func startNodes(t testing.TB, n, expect, replicas int, extraJoin []string, zones []string) []*Node {
	t.Helper()
	return startNodesFrom(t, 1, n, expect, replicas, extraJoin, zones, nil)
}

func startNodesFrom(t testing.TB, first, n, expect, replicas int, extraJoin []string, zones []string, edit func(*Config)) []*Node {
	t.Helper()
	return testutil.StartNodes(t, n, 60*time.Second, func(ctx context.Context, i int, addrs []string) (*Node, error) {
		c := testConfig(t.TempDir())
		c.NodeID = fmt.Sprintf("n%d", first+i)
		c.ClusterAddr = addrs[i]
		c.Join = append(append([]string(nil), addrs...), extraJoin...)
		c.BootstrapExpect = expect
		c.Replicas = replicas
		if zones != nil {
			c.Zone = zones[i]
		}
		if edit != nil {
			edit(&c)
		}
		return Start(ctx, c)
	}, func(nd *Node) { nd.Close() })
}

// waitFor polls cond until it returns nil or the timeout passes, reporting its last error.
func waitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not met within %v: %v", timeout, err)
}

// leaderOf waits until a node hosts the leading replica of the entity's partition 0
// (a single-partition entity) and returns it.
func leaderOf(t testing.TB, nodes []*Node, entity string) *Node {
	t.Helper()
	var leader *Node
	waitFor(t, 20*time.Second, func() error {
		for _, nd := range nodes {
			nd.mu.RLock()
			for _, r := range nd.parts {
				if r.entity == entity && r.index == 0 && r.p.IsLeader() {
					leader = nd
				}
			}
			nd.mu.RUnlock()
		}
		if leader == nil {
			return fmt.Errorf("%s/0 has no leader yet", entity)
		}
		return nil
	})
	return leader
}

// Three nodes form one cluster; an entity created through one node is usable through
// every node, including one that hosts no replica of it: send there, receive through
// another, settle through the third (S-LOCK-10), and every replica converges.
func TestThreeNodesAnyNodeServes(t *testing.T) {
	nodes := startCluster(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	debugDump(nodes, stop)
	// Metadata: one leader, three members in its group, writes through a follower.
	var follower *Node
	for _, nd := range nodes {
		if !nd.meta.IsLeader() {
			follower = nd
		}
	}
	if err := follower.Store().Apply(ctx, &meta.CreateQueue{Name: "orders", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	var pl meta.Placement
	follower.meta.Read(func(s *meta.State) { pl, _ = s.Placement("orders") }) // read-your-writes
	if len(pl.Partitions) != 1 || len(pl.Partitions[0].Replicas) != 2 {
		t.Fatalf("placement %+v: want 1 partition with 2 replicas", pl)
	}
	var outsider *Node
	for _, nd := range nodes {
		if !containsNode(pl.Partitions[0].Replicas, nd.cfg.NodeID) {
			outsider = nd
		}
	}
	if outsider == nil {
		t.Fatal("every node hosts a replica")
	}
	const count = 20
	for i := 0; i < count; i++ {
		m := &fsm.Message{}
		m.MessageID = fmt.Sprintf("m%d", i)
		if err := outsider.Router().Send(ctx, "orders", []*fsm.Message{m}); err != nil {
			t.Fatalf("send through %s: %v", outsider.cfg.NodeID, err)
		}
	}
	got := map[string]bool{}
	for len(got) < count {
		msgs, err := outsider.Router().Receive(ctx, Address{Entity: "orders"}, "", "", fsm.PeekLock, 8, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var toks []fsm.LockToken
		for _, m := range msgs {
			got[m.MessageID] = true
			toks = append(toks, m.LockToken)
		}
		settler := nodes[(len(got))%3]
		for i, err := range settler.Router().Settle(ctx, Settlement{Address: Address{Entity: "orders"}, Tokens: toks, Disposition: fsm.Complete}) {
			if err != nil {
				t.Fatalf("complete %d through %s: %v", i, settler.cfg.NodeID, err)
			}
		}
	}
	for _, nd := range nodes {
		rc, err := nd.Store().Runtime(ctx, adminEntity("orders"))
		if err != nil || rc.Active != 0 {
			t.Fatalf("runtime through %s: %+v, %v", nd.cfg.NodeID, rc, err)
		}
	}
	waitFor(t, 10*time.Second, func() error { return converged(nodes) })
}

// converged reports whether every replica of every group hosted anywhere, and every
// metadata replica, has the same digest.
func converged(nodes []*Node) error {
	digests := map[uint32]map[[32]byte][]string{}
	metaDigests := map[[32]byte][]string{}
	for _, nd := range nodes {
		nd.meta.Read(func(s *meta.State) {
			d := s.Digest()
			metaDigests[d] = append(metaDigests[d], nd.cfg.NodeID)
		})
		nd.mu.RLock()
		for id, r := range nd.parts {
			if digests[id] == nil {
				digests[id] = map[[32]byte][]string{}
			}
			d := r.p.Digest()
			digests[id][d] = append(digests[id][d], nd.cfg.NodeID)
		}
		nd.mu.RUnlock()
	}
	if len(metaDigests) != 1 {
		return fmt.Errorf("metadata replicas differ: %v", metaDigests)
	}
	for id, ds := range digests {
		if len(ds) != 1 {
			return fmt.Errorf("group %d replicas differ: %v", id, ds)
		}
	}
	return nil
}

func adminEntity(name string) admin.Entity { return admin.Entity{Name: name} }

// A replica moved to another node after its entity changed (qbctl node remove) is
// rebuilt there from the group's creation configuration: the group keeps three voters,
// the removed node leaves it and deletes its copy, and every replica converges.
func TestReplicaMovedAfterUpdateConverges(t *testing.T) {
	nodes := startCluster(t, 4, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n1 := nodes[0]
	if err := n1.Store().Apply(ctx, &meta.CreateQueue{Name: "moved", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	send := func(prefix string) {
		for i := 0; i < 5; i++ {
			m := &fsm.Message{}
			m.MessageID = fmt.Sprintf("%s%d", prefix, i)
			if err := n1.Router().Send(ctx, "moved", []*fsm.Message{m}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("before")
	props := queueProps(1)
	props.DefaultMessageTimeToLive = time.Hour
	if err := n1.Store().Apply(ctx, &meta.UpdateQueue{Name: "moved", Properties: props}); err != nil {
		t.Fatal(err)
	}
	send("after")
	var pl meta.Placement
	n1.meta.Read(func(s *meta.State) { pl, _ = s.Placement("moved") })
	var victim, spare string
	leader := n1.meta.Leader()
	for _, nd := range nodes {
		id := nd.cfg.NodeID
		if !containsNode(pl.Partitions[0].Replicas, id) {
			spare = id
		} else if id != leader {
			victim = id
		}
	}
	if err := n1.Ops().RemoveNode(ctx, victim); err != nil {
		t.Fatal(err)
	}
	group := pl.Partitions[0].GroupID
	waitFor(t, 60*time.Second, func() error {
		for _, nd := range nodes {
			for _, g := range nd.localGroupStatus([]uint32{group}) {
				if !g.IsLeader {
					continue
				}
				ids := map[string]bool{}
				for _, s := range g.Servers {
					if s.Voter {
						ids[s.ID] = true
					}
				}
				if len(g.Servers) != 3 || !ids[spare] || ids[victim] {
					return fmt.Errorf("group %d servers %+v, want 3 voters with %s and without %s", group, g.Servers, spare, victim)
				}
				// The removed node, still running, is out of the metadata group
				// and no longer follows it.
				var rest []*Node
				for _, nd := range nodes {
					if nd.cfg.NodeID != victim {
						rest = append(rest, nd)
					}
				}
				return converged(rest)
			}
		}
		return fmt.Errorf("group %d has no leader", group)
	})
	for _, nd := range nodes {
		if nd.cfg.NodeID != victim {
			continue
		}
		waitFor(t, 20*time.Second, func() error {
			nd.mu.RLock()
			defer nd.mu.RUnlock()
			if nd.parts[group] != nil {
				return fmt.Errorf("%s still hosts group %d", victim, group)
			}
			return nil
		})
	}
}

// Nodes that join a formed cluster are added to the metadata group as non-voters and
// promoted once caught up, up to five voters; the metadata then reaches every node.
func TestJoinersBecomeMetadataVoters(t *testing.T) {
	first := startCluster(t, 3, 3)
	more := startNodesFrom(t, 4, 2, 1, 3, []string{first[0].adv}, nil, nil)
	nodes := append(first, more...)
	waitFor(t, 30*time.Second, func() error {
		var leader *Node
		for _, nd := range nodes {
			if nd.meta.IsLeader() {
				leader = nd
			}
		}
		if leader == nil {
			return fmt.Errorf("no metadata leader")
		}
		servers := leader.meta.Servers()
		if v := voters(servers); v != 5 || len(servers) != 5 {
			return fmt.Errorf("metadata group %v: want 5 voters", servers)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := more[1].Store().Apply(ctx, &meta.CreateQueue{Name: "late", Properties: queueProps(2)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { return converged(nodes) })
}

// Placement puts the replicas of a partition in distinct zones when there are enough,
// and spreads preferred leaders over the nodes.
func TestPlacementSpreadsZonesAndLeaders(t *testing.T) {
	nodes := startNodes(t, 4, 4, 3, nil, []string{"a", "a", "b", "c"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "zoned", Properties: queueProps(8)}); err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "c"}
	var pl meta.Placement
	nodes[0].meta.Read(func(s *meta.State) { pl, _ = s.Placement("zoned") })
	firsts := map[string]int{}
	for i, p := range pl.Partitions {
		zs := map[string]bool{}
		for _, r := range p.Replicas {
			zs[zone[r]] = true
		}
		if len(p.Replicas) != 3 || len(zs) != 3 {
			t.Fatalf("partition %d on %v: want 3 replicas in 3 zones", i, p.Replicas)
		}
		firsts[p.Replicas[0]]++
	}
	for id, n := range firsts {
		if n > 3 {
			t.Fatalf("preferred leaders %v: %s comes first in %d of 8 partitions", firsts, id, n)
		}
	}
	// The substitute for a dead node's replica comes from a zone the group lacks (n3, b,
	// in all 8 groups) before a less loaded node of a zone it has (n2, a, in 4).
	if got := nodes[0].Ops().substitute([]string{"n1"}, "n4"); got != "n3" {
		t.Errorf("substitute for n4 beside n1 (zone a): %q, want n3 (zone b)", got)
	}
}

// ClusterStatus with digests reports every member's metadata digest and applied index,
// asked of each member over RPC: equal on all once the cluster is quiet, and changed by
// a metadata write.
func TestClusterStatusMetadataDigests(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	digests := func() (map[string]admin.Member, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := nodes[1].Ops().ClusterStatus(admin.WithDigests(ctx))
		if err != nil {
			return nil, err
		}
		out := map[string]admin.Member{}
		for _, m := range st.Members {
			out[m.ID] = m
		}
		if len(out) != 3 {
			return nil, fmt.Errorf("members %+v", st.Members)
		}
		return out, nil
	}
	agreed := func() (admin.Member, error) {
		ms, err := digests()
		if err != nil {
			return admin.Member{}, err
		}
		m1 := ms["n1"]
		for id, m := range ms {
			if m.MetadataDigest == "" || m.MetadataApplied == 0 {
				return m1, fmt.Errorf("%s: no metadata digest: %+v", id, m)
			}
			if m.MetadataDigest != m1.MetadataDigest || m.MetadataApplied != m1.MetadataApplied {
				return m1, fmt.Errorf("members differ: %+v", ms)
			}
		}
		return m1, nil
	}
	var before admin.Member
	waitFor(t, 30*time.Second, func() (err error) { before, err = agreed(); return err })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nodes[2].Store().Apply(ctx, &meta.CreateQueue{Name: "digested", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		after, err := agreed()
		if err != nil {
			return err
		}
		if after.MetadataDigest == before.MetadataDigest || after.MetadataApplied <= before.MetadataApplied {
			return fmt.Errorf("digest %s at %d after a create, %s at %d before", after.MetadataDigest, after.MetadataApplied, before.MetadataDigest, before.MetadataApplied)
		}
		return nil
	})

	st, err := nodes[0].Ops().ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.MetadataDigest != "" || m.MetadataApplied != 0 {
			t.Errorf("status without digests asked reports %+v", m)
		}
	}
}

// voters counts the voters of a configuration.
func voters(servers []raft.Server) int {
	c := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
