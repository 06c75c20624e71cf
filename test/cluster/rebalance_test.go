package cluster_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// rebalanceStatus is `qbctl cluster rebalance status -o json`.
type rebalanceStatus struct {
	Done  bool `json:"Done"`
	Moves []struct {
		GroupID uint32 `json:"GroupID"`
	} `json:"Moves"`
	Nodes []struct {
		ID       string `json:"ID"`
		State    string `json:"State"`
		Replicas int    `json:"Replicas"`
		Leading  int    `json:"Leading"`
	} `json:"Nodes"`
}

// evenShares returns nil once, as node via sees the cluster, every group has a leader
// and replicas voters (on nodes only), each of nodes holds within 20 % (at least one) of
// an even share of the replicas and leads within as much of an even share of the
// groups, and `qbctl cluster rebalance status` says it is done, listing those nodes.
func evenShares(t *testing.T, via *harness.Node, nodes []string, replicas int) error {
	t.Helper()
	ps, err := partitionsOf(t, via, "", false)
	if err != nil {
		return err
	}
	held, leads := map[string]int{}, map[string]int{}
	for _, p := range ps {
		if err := groupShape(p, replicas, nil); err != nil {
			return err
		}
		for _, r := range p.Replicas {
			if !slices.Contains(nodes, r.Node) {
				return fmt.Errorf("group %d of %s has a replica on %s, not one of %v", p.Group, p.Entity, r.Node, nodes)
			}
			held[r.Node]++
		}
		leads[p.Leader]++
	}
	within := func(what string, count map[string]int, total int) error {
		even := float64(total) / float64(len(nodes))
		slack := max(1, 0.2*even)
		for _, id := range nodes {
			if k := float64(count[id]); k < even-slack || k > even+slack {
				return fmt.Errorf("%s per node %v: %s has %d, want within %.1f of an even %.1f", what, count, id, count[id], slack, even)
			}
		}
		return nil
	}
	if err := within("replicas", held, len(ps)*replicas); err != nil {
		return err
	}
	if err := within("leaders", leads, len(ps)); err != nil {
		return err
	}
	var st rebalanceStatus
	if err := qbctlJSON(t, via, &st, "cluster", "rebalance", "status"); err != nil {
		return err
	}
	var up []string
	for _, n := range st.Nodes {
		if n.State == "up" {
			up = append(up, n.ID)
		}
	}
	sort.Strings(up)
	if !st.Done || len(st.Moves) > 0 || !slices.Equal(up, nodes) {
		return fmt.Errorf("rebalance status: done %v, %d moves, nodes up %v (want done, no move, %v): %+v", st.Done, len(st.Moves), up, nodes, st)
	}
	return nil
}

// Scale out and in under SDK load. Three nodes (--replicas 3) hold a partitioned queue
// (four groups) and two queues; two nodes join: replicas move onto them (each copied as
// a non-voter, promoted, and only then the old one removed) and leaderships follow,
// two groups at a time (quorumbus_rebalance_moves_in_progress), until every node holds
// within 20 % of an even share of both, as the partitions and `qbctl cluster rebalance
// status` show. Then two nodes are drained and removed: `qbctl
// node remove` returns only once no group counts the node, so stopping it at once keeps
// every group whole. Every send the SDK acknowledged, in both phases, is received and
// completed.
func TestScaleOutAndInUnderLoad(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3", "--partition-count", "4"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	queues := []string{"scale-parted", "scale-one"}
	createQueue(t, c.Nodes[0], queues[0], &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	createQueue(t, c.Nodes[0], queues[1], &admin.QueueProperties{LockDuration: to.Ptr("PT10S")})
	createQueue(t, c.Nodes[0], "scale-idle", nil)
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, "", 3) })
	first := c.Nodes[:3]

	// load runs two senders and a receiver per queue on the first three nodes, which
	// stay, until stop drains each queue and checks that nothing acknowledged was lost.
	load := func(phase string) (stop func()) {
		var ws []*workload
		for qi, q := range queues {
			w := newWorkload(t, q)
			ws = append(ws, w)
			for i := range 2 {
				w.startSender(fmt.Sprintf("%s-%s-s%d", q, phase, i), first[(qi+i)%3], 100_000, 25*time.Millisecond)
			}
			w.startReceiver(q+"-"+phase+"-r", first[(qi+2)%3])
		}
		marks := make([]map[string]int, len(ws))
		for i, w := range ws {
			marks[i] = w.mark()
		}
		c.WaitFor(t, 30*time.Second, func() error {
			for i, w := range ws {
				if err := w.progressed(marks[i], 5, fmt.Sprintf("%s-%s-s0", queues[i], phase), fmt.Sprintf("%s-%s-s1", queues[i], phase)); err != nil {
					return err
				}
			}
			return nil
		})
		return func() {
			for _, w := range ws {
				w.stopSenders()
			}
			for i, w := range ws {
				p := peeker(t, first[0], queues[i])
				c.WaitFor(t, 60*time.Second, func() error { return w.drained(p) })
				w.stopReceivers()
				w.check(t)
			}
		}
	}

	// 3 -> 5.
	stop := load("out")
	began := time.Now()
	c.AddNode(t)
	c.AddNode(t)
	// The metadata leader moves --rebalance-moves (2 by default) groups at a time, and
	// says so.
	c.WaitFor(t, 30*time.Second, func() error { return gauge(c.Nodes, "quorumbus_rebalance_moves_in_progress", "2") })
	five := []string{"n1", "n2", "n3", "n4", "n5"}
	c.WaitFor(t, 90*time.Second, func() error { return evenShares(t, c.Nodes[0], five, 3) })
	t.Logf("3 -> 5: replicas and leaders even %v after the nodes joined", time.Since(began).Round(time.Millisecond))
	stop()

	// 5 -> 3: drain both, then remove each and stop it as soon as the remove returns.
	stop = load("in")
	began = time.Now()
	for _, n := range c.Nodes[3:] {
		if out, err := first[0].Qbctl(t, "node", "drain", n.ID); err != nil {
			t.Fatalf("node drain %s: %v\n%s", n.ID, err, out)
		}
	}
	for _, n := range c.Nodes[3:] {
		// As docs/operations.md tells an operator: a remove that answers "run the
		// remove again" (its groups still copying after the server's wait, as on a
		// loaded machine) is run again, and the node stopped only once one succeeded.
		for attempt := 1; ; attempt++ {
			out, err := first[0].Qbctl(t, "node", "remove", n.ID)
			if err == nil {
				break
			}
			if attempt == 5 || !strings.Contains(out+err.Error(), "run the remove again") {
				t.Fatalf("node remove %s (attempt %d): %v\n%s", n.ID, attempt, err, out)
			}
			t.Logf("node remove %s (attempt %d): still copying, running it again", n.ID, attempt)
		}
		ps, err := partitionsOf(t, first[0], "", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			for _, r := range p.Replicas {
				if r.Node == n.ID {
					t.Fatalf("node remove %s returned while group %d of %s still counts it: %+v", n.ID, p.Group, p.Entity, p.Replicas)
				}
			}
		}
		if err := n.Stop(); err != nil {
			t.Logf("%s stopped: %v", n.ID, err)
		}
	}
	three := []string{"n1", "n2", "n3"}
	c.WaitFor(t, 60*time.Second, func() error { return evenShares(t, first[0], three, 3) })
	t.Logf("5 -> 3: drained, removed and stopped two nodes in %v", time.Since(began).Round(time.Millisecond))
	stop()
}
