package cluster_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Six nodes in three zones, two per zone, --replicas 3. The queues are created while
// only zones a and b have nodes (each group then has two replicas in one of them); the
// two nodes of zone c join later, and every group moves a replica there (add as a
// non-voter, promote, then remove). Then both nodes of one zone (the metadata leader's)
// are killed at once under SDK load: every group keeps a quorum and a leader on the
// survivors, every sender goes on after retries, the metadata group still takes writes
// (a queue is created), and every send the SDK acknowledged is received and completed
// afterwards.
func TestZoneLossKeepsEveryQuorum(t *testing.T) {
	zoneOf := func(id string) string { // n1,n2: a; n3,n4: b; n5,n6: c
		var i int
		fmt.Sscanf(id, "n%d", &i) //nolint:errcheck // node IDs are n1..n6
		return string(rune('a' + (i-1)/2))
	}
	c := harness.StartCluster(t, 4, harness.WithArgs("--replicas", "3", "--partition-count", "4"),
		harness.WithNodeArgs(func(i int) []string { return []string{"--zone", zoneOf(fmt.Sprintf("n%d", i+1))} }))
	c.WaitFor(t, 90*time.Second, func() error { return formed(t, c) })
	queues := []string{"zone-parted", "zone-one", "zone-two"}
	createQueue(t, c.Nodes[0], queues[0], &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	createQueue(t, c.Nodes[0], queues[1], &admin.QueueProperties{LockDuration: to.Ptr("PT10S")})
	createQueue(t, c.Nodes[0], queues[2], &admin.QueueProperties{LockDuration: to.Ptr("PT10S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, "", 3) })
	c.AddNode(t, "--zone", "c")
	c.AddNode(t, "--zone", "c")
	// Every group ends with three voters, one in each zone.
	c.WaitFor(t, 90*time.Second, func() error {
		ps, err := partitionsOf(t, c.Nodes[0], "", false)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := groupShape(p, 3, nil); err != nil {
				return err
			}
			zs := map[string]bool{}
			for _, r := range p.Replicas {
				zs[zoneOf(r.Node)] = true
			}
			if len(zs) != 3 {
				return fmt.Errorf("group %d of %s has replicas %+v: want one in each of 3 zones", p.Group, p.Entity, p.Replicas)
			}
		}
		return nil
	})

	var st status
	if err := qbctlJSON(t, c.Nodes[0], &st, "cluster", "status"); err != nil {
		t.Fatal(err)
	}
	lost := zoneOf(st.MetadataLeader)
	var victims, alive []*harness.Node
	for _, n := range c.Nodes {
		if zoneOf(n.ID) == lost {
			victims = append(victims, n)
		} else {
			alive = append(alive, n)
		}
	}
	t.Logf("will kill zone %s (%s, %s; %s leads the metadata); clients on the other zones", lost, victims[0].ID, victims[1].ID, st.MetadataLeader)

	var ws []*workload
	for qi, q := range queues {
		w := newWorkload(t, q)
		ws = append(ws, w)
		for i := range 2 {
			w.startSender(fmt.Sprintf("%s-s%d", q, i), alive[(qi+i)%len(alive)], 400, 25*time.Millisecond)
		}
		w.startReceiver(q+"-r", alive[(qi+2)%len(alive)])
	}
	progressed := func(since []map[string]int, k int) error {
		for i, w := range ws {
			if err := w.progressed(since[i], k, queues[i]+"-s0", queues[i]+"-s1"); err != nil {
				return fmt.Errorf("%s: %v", queues[i], err)
			}
		}
		return nil
	}
	marks := func() []map[string]int {
		var out []map[string]int
		for _, w := range ws {
			out = append(out, w.mark())
		}
		return out
	}
	start := marks()
	c.WaitFor(t, 30*time.Second, func() error { return progressed(start, 10) })

	killed := time.Now()
	var wg sync.WaitGroup
	for _, v := range victims {
		wg.Add(1)
		go func() { defer wg.Done(); v.Kill() }() // both at once; Kill waits until the process is gone
	}
	wg.Wait()
	atKill := marks()
	// Every sender, on every queue, goes on through the survivors.
	c.WaitFor(t, 30*time.Second, func() error { return progressed(atKill, 20) })
	t.Logf("every sender recovered %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Every group has a leader in a zone that survived: none lost its quorum.
	c.WaitFor(t, 30*time.Second, func() error {
		ps, err := partitionsOf(t, alive[0], "", false)
		if err != nil {
			return err
		}
		var leaderless []string
		for _, p := range ps {
			if p.Leader == "" || zoneOf(p.Leader) == lost {
				leaderless = append(leaderless, fmt.Sprintf("group %d of %s (leader %q)", p.Group, p.Entity, p.Leader))
			}
		}
		if len(leaderless) > 0 {
			return fmt.Errorf("without a live leader: %s", strings.Join(leaderless, ", "))
		}
		return nil
	})
	// The metadata group kept its quorum too: it takes a write.
	createQueue(t, alive[0], "zone-after", nil)

	for _, w := range ws {
		w.stopSenders()
	}
	for i, w := range ws {
		p := peeker(t, alive[0], queues[i])
		c.WaitFor(t, 60*time.Second, func() error { return w.drained(p) })
		w.stopReceivers()
		w.check(t)
	}
}
