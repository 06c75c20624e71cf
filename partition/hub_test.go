package partition

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hubGoroutines counts the goroutines delivering raft's state changes for hub h,
// whether they wait for one or run a replica's leadershipChanged.
func hubGoroutines(h *LeadershipHub) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	frame := fmt.Sprintf("partition.(*LeadershipHub).deliver(%p,", h)
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, frame) {
			count++
		}
	}
	return count
}

// The replicas of a node share the hub the node built (Config.Leadership): one
// goroutine tells all of them of their leadership, it runs while one of them is open,
// and it is gone once they have closed and the hub's owner has closed it; a replica
// given no hub uses one of its own for as long as it is open.
func TestLeadershipHubIsTheNodes(t *testing.T) {
	c := newCluster(t, 1, nil)
	hub := c.nodes[0].hub
	c.addGroup(testQueue(1, time.Minute))
	c.addGroup(testQueue(2, time.Minute))
	for _, g := range []uint32{1, 2} {
		c.leader(g, 30*time.Second)
	}
	if n := hubGoroutines(hub); n != 1 {
		t.Fatalf("%d goroutines deliver for the node's hub while two of its replicas are open, want 1", n)
	}
	c.stop(1, 0)
	if n := hubGoroutines(hub); n != 1 {
		t.Fatalf("%d goroutines deliver for the hub while a replica is open, want 1", n)
	}
	c.stop(2, 0)
	hub.Close()
	if n := hubGoroutines(hub); n != 0 {
		t.Fatalf("%d goroutines deliver for the hub after its replicas and the hub closed, want 0", n)
	}

	// Reopened without a hub (Config.Leadership nil), a replica still learns it leads.
	c.tune = func(cfg *Config) { cfg.Leadership = nil }
	p := c.restart(1, 0)
	c.leader(1, 30*time.Second)
	if n := hubGoroutines(hub); n != 0 {
		t.Fatalf("a replica given no hub used the node's: %d goroutines deliver for it", n)
	}
	if n := hubGoroutines(p.hub); n != 1 {
		t.Fatalf("%d goroutines deliver for the replica's own hub, want 1", n)
	}
	c.stop(1, 0)
	if n := hubGoroutines(p.hub); n != 0 {
		t.Fatalf("%d goroutines deliver for a closed replica's own hub, want 0", n)
	}
}
