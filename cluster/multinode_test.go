package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// freeAddr returns a loopback address whose TCP and UDP ports are free now.
func freeAddr(t testing.TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
}

// startCluster starts n in-process nodes that form one cluster (bootstrap-expect n),
// each joining all the others, with replicas partition replicas per partition.
func startCluster(t testing.TB, n, replicas int) []*Node {
	t.Helper()
	return startClusterWith(t, n, replicas, nil)
}

// startClusterWith is startCluster with each node's config changed by edit (nil: none).
func startClusterWith(t testing.TB, n, replicas int, edit func(*Config)) []*Node {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	nodes := make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := testConfig(t.TempDir())
			c.NodeID = fmt.Sprintf("n%d", i+1)
			c.ClusterAddr = addrs[i]
			c.Join = addrs
			c.BootstrapExpect = n
			c.Replicas = replicas
			if edit != nil {
				edit(&c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			nodes[i], errs[i] = Start(ctx, c)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, nd := range nodes {
				if nd != nil {
					nd.Close()
				}
			}
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.Close()
		}
	})
	return nodes
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
		if !nd.meta.isLeader() {
			follower = nd
		}
	}
	if err := follower.Apply(ctx, &meta.CreateQueue{Name: "orders", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	var pl meta.Placement
	follower.meta.read(func(s *meta.State) { pl, _ = s.Placement("orders") }) // read-your-writes
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
		if err := outsider.Send(ctx, "orders", []*fsm.Message{m}); err != nil {
			t.Fatalf("send through %s: %v", outsider.cfg.NodeID, err)
		}
	}
	got := map[string]bool{}
	for len(got) < count {
		msgs, err := outsider.Receive(ctx, Address{Entity: "orders"}, "", "", fsm.PeekLock, 8, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var toks []fsm.LockToken
		for _, m := range msgs {
			got[m.MessageID] = true
			toks = append(toks, m.LockToken)
		}
		settler := nodes[(len(got))%3]
		for i, err := range settler.Settle(ctx, Settlement{Address: Address{Entity: "orders"}, Tokens: toks, Disposition: fsm.Complete}) {
			if err != nil {
				t.Fatalf("complete %d through %s: %v", i, settler.cfg.NodeID, err)
			}
		}
	}
	for _, nd := range nodes {
		rc, err := nd.Runtime(ctx, adminEntity("orders"))
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
		nd.meta.read(func(s *meta.State) {
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
