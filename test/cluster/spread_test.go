package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// evenSpread returns nil when each of the nodes leads within 20 % of an even share of the
// partition groups (leads: node -> groups it leads).
func evenSpread(leads map[string]int, nodes []string) error {
	total := 0
	for _, k := range leads {
		total += k
	}
	even := float64(total) / float64(len(nodes))
	for _, id := range nodes {
		if k := float64(leads[id]); k < 0.8*even || k > 1.2*even {
			return fmt.Errorf("leaders %v: %s leads %d of %d groups, want within 20%% of %.1f", leads, id, leads[id], total, even)
		}
	}
	return nil
}

// A node removed (qbctl node remove), wiped and rejoined with the same ID leads its share
// again: within a minute of having its replicas back, every live node leads within 20 %
// of an even share of the groups; and a manual transfer of one group to it holds (it
// was undone within 20 s by the balancing, which moved leadership back to each group's
// first replica: the rejoined node, appended to every group, was first in none, and led
// none for good).
func TestLeadershipSpreadsAfterNodeReplaced(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	createQueue(t, c.Nodes[0], "spread", &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	createQueue(t, c.Nodes[0], "spread-a", nil)
	createQueue(t, c.Nodes[0], "spread-b", nil)
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, "", 3) })

	var st status
	if err := qbctlJSON(t, c.Nodes[0], &st, "cluster", "status"); err != nil {
		t.Fatal(err)
	}
	var gone, via *harness.Node
	for _, n := range c.Nodes {
		if n.ID != st.MetadataLeader && gone == nil {
			gone = n
		} else {
			via = n
		}
	}
	if out, err := via.Qbctl(t, "node", "remove", gone.ID); err != nil {
		t.Fatalf("node remove %s: %v\n%s", gone.ID, err, out)
	}
	gone.WipeAndRestart()
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	c.WaitFor(t, 90*time.Second, func() error { return serving(t, c, "", 3) })
	t.Logf("%s removed, wiped and back with its replicas; leaders: %v", gone.ID, leadersOf(t, c, ""))

	ids := []string{"n1", "n2", "n3"}
	c.WaitFor(t, 60*time.Second, func() error { return evenSpread(leadersOf(t, c, ""), ids) })

	// A manual transfer to the returned node holds.
	ps, err := partitionsOf(t, via, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var moved partition
	for _, p := range ps {
		if p.Leader != gone.ID {
			moved = p
			break
		}
	}
	if out, err := via.Qbctl(t, "partition", "transfer-leader", fmt.Sprint(moved.Group), "--to", gone.ID); err != nil {
		t.Fatalf("transfer-leader %d --to %s: %v\n%s", moved.Group, gone.ID, err, out)
	}
	leaderOf := func() string {
		ps, err := partitionsOf(t, via, moved.Entity, false)
		if err != nil {
			return "(" + err.Error() + ")"
		}
		for _, p := range ps {
			if p.Group == moved.Group {
				return p.Leader
			}
		}
		return "(no group)"
	}
	c.WaitFor(t, 10*time.Second, func() error {
		if l := leaderOf(); l != gone.ID {
			return fmt.Errorf("group %d led by %s after its transfer to %s", moved.Group, l, gone.ID)
		}
		return nil
	})
	// Leader balancing runs every 5 s: the transfer must outlast a few of its rounds.
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) { // watching that nothing changes
		if l := leaderOf(); l != gone.ID {
			t.Fatalf("group %d transferred to %s is led by %s again", moved.Group, gone.ID, l)
		}
	}
}
