package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// qbctl node undrain gives a drained node back (it shows alive again), a replica
// whose node answers nothing (paused) shows as unreachable in qbctl cluster partitions,
// not with lag 0, and a draining node that stops answering shows as "dead, draining"
// once gossip gives it up.
func TestUndrainAndUnreachableReplica(t *testing.T) {
	c := harness.StartCluster(t, 3)
	n1, n3 := c.Nodes[0], c.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := n1.AdminClient(t).CreateQueue(ctx, "undrain", nil); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, 60*time.Second, func() error { // the group has its leader and three replicas
		var ps []partition
		if err := qbctlJSON(t, n1, &ps, "cluster", "partitions"); err != nil {
			return err
		}
		for _, p := range ps {
			if strings.EqualFold(p.Entity, "undrain") && p.Leader != "" && len(p.Replicas) == 3 {
				return nil
			}
		}
		return fmt.Errorf("undrain has no leader and three replicas yet: %+v", ps)
	})
	stateOf := func(id string) (string, error) {
		var st status
		if err := qbctlJSON(t, n1, &st, "cluster", "status"); err != nil {
			return "", err
		}
		for _, m := range st.Members {
			if m.ID == id {
				return m.State, nil
			}
		}
		return "", fmt.Errorf("%s is not a member: %+v", id, st)
	}
	if out, err := n1.Qbctl(t, "node", "drain", n3.ID); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	if s, err := stateOf(n3.ID); err != nil || s != "draining" {
		t.Fatalf("after drain, %s is %q (%v), want draining", n3.ID, s, err)
	}
	out, err := n1.Qbctl(t, "node", "undrain", n3.ID)
	if err != nil || !strings.Contains(out, "no longer draining") {
		t.Fatalf("undrain: %v\n%s", err, out)
	}
	if s, err := stateOf(n3.ID); err != nil || s != "alive" {
		t.Fatalf("after undrain, %s is %q (%v), want alive", n3.ID, s, err)
	}

	n3.Pause()
	defer n3.Resume()
	c.WaitFor(t, 60*time.Second, func() error {
		var ps []partition
		if err := qbctlJSON(t, n1, &ps, "cluster", "partitions"); err != nil {
			return err
		}
		for _, p := range ps {
			if !strings.EqualFold(p.Entity, "undrain") {
				continue
			}
			for _, r := range p.Replicas {
				if r.Node == n3.ID && r.Unreachable {
					return nil
				}
			}
			return fmt.Errorf("paused %s's replica is not unreachable: %+v", n3.ID, p)
		}
		return fmt.Errorf("no partition of undrain: %+v", ps)
	})
	out, err = n1.Qbctl(t, "cluster", "partitions")
	if err != nil || !strings.Contains(out, n3.ID+" (unreachable)") || strings.Contains(out, n3.ID+" (lag 0)") {
		t.Fatalf("cluster partitions with %s paused: %v\n%s", n3.ID, err, out)
	}

	// A draining node that stops answering shows as dead first once gossip gives it up,
	// not as a node that is up and draining.
	n3.Resume()
	if out, err := n1.Qbctl(t, "node", "drain", n3.ID); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	n3.Pause()
	c.WaitFor(t, 90*time.Second, func() error {
		s, err := stateOf(n3.ID)
		if err != nil {
			return err
		}
		if s != "dead, draining" {
			return fmt.Errorf("paused and drained, %s is %q, want \"dead, draining\"", n3.ID, s)
		}
		return nil
	})
}
