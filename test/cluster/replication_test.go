package cluster_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Replication factor kept : an entity created while nodes are
// draining or down gets --replicas replicas as soon as enough nodes are alive, and is
// marked under-replicated (qbctl cluster partitions, the leader's metric and log) until
// then.

// underReplicated returns nil once every group of entity is marked as under wants (in
// qbctl cluster partitions as node n sees it).
func underReplicated(t *testing.T, n *harness.Node, entity string, under bool) error {
	t.Helper()
	ps, err := partitionsOf(t, n, entity, false)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.UnderReplicated != under {
			return fmt.Errorf("group %d of %s: under_replicated %v, want %v: %+v", p.Group, p.Entity, p.UnderReplicated, under, p)
		}
	}
	return nil
}

// gauge returns nil once some node in ns exports series (a metric name with its
// labels, as /metrics prints them) with value v.
func gauge(ns []*harness.Node, series, v string) error {
	var seen []string
	for _, n := range ns {
		resp, err := http.Get("http://" + n.Admin + "/metrics")
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, series+" ") {
				if strings.TrimPrefix(line, series+" ") == v {
					return nil
				}
				seen = append(seen, n.ID+": "+line)
			}
		}
	}
	return fmt.Errorf("no node exports %s %s (seen: %v)", series, v, seen)
}

// The reproduction: with n3 draining and n1 killed, a queue created through n2
// gets both live nodes at once (the draining one too), marked under-replicated; when
// n1 returns, the group grows to three voters with equal states and the mark, the
// metric and the log say so. The third replica is what keeps the queue available when
// the draining node then goes away.
func TestEntityCreatedWhileDrainingAndDownGetsItsReplicas(t *testing.T) {
	// Info level: the group's leader logs the change of its replication at info.
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3", "--log-level", "info"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]

	if out, err := n2.Qbctl(t, "node", "drain", n3.ID); err != nil {
		t.Fatalf("qbctl node drain %s: %v\n%s", n3.ID, err, out)
	}
	n1.Kill()
	c.WaitFor(t, 60*time.Second, func() error {
		for _, n := range []*harness.Node{n2, n3} {
			var st status
			if err := qbctlJSON(t, n, &st, "cluster", "status"); err != nil {
				return err
			}
			if st.MetadataLeader == "" || st.MetadataLeader == n1.ID {
				return fmt.Errorf("%s: metadata leader %q", n.ID, st.MetadataLeader)
			}
			for _, m := range st.Members {
				if m.ID == n1.ID && m.State == "alive" {
					return fmt.Errorf("%s still sees %s alive", n.ID, n1.ID)
				}
			}
		}
		return nil
	})

	const q = "replicated"
	createQueue(t, n2, q, nil)
	c.WaitFor(t, 60*time.Second, func() error {
		ps, err := partitionsOf(t, n2, q, false)
		if err != nil {
			return err
		}
		if err := groupShape(ps[0], 2, []string{n2.ID, n3.ID}); err != nil {
			return err
		}
		if err := underReplicated(t, n2, q, true); err != nil {
			return err
		}
		return gauge([]*harness.Node{n2, n3}, `quorumbus_partition_under_replicated{entity="`+q+`",partition="0"}`, "1")
	})
	ids := idRange("m", 20)
	sendIDs(t, n2, q, ids)

	n1.Restart()
	c.WaitFor(t, 90*time.Second, func() error {
		if err := converged(t, c, q, 3, []string{n1.ID, n2.ID, n3.ID}); err != nil {
			return err
		}
		if err := underReplicated(t, n2, q, false); err != nil {
			return err
		}
		return gauge(c.Nodes, `quorumbus_partition_under_replicated{entity="`+q+`",partition="0"}`, "0")
	})
	logs := n1.Log() + n2.Log() + n3.Log()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "under-replicated") || strings.Contains(line, "fully replicated") || strings.Contains(line, "raising replication") {
			t.Log(line)
		}
	}
	for _, want := range []string{"partition under-replicated", "partition fully replicated again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no node logged %q", want)
		}
	}

	// The draining node stops for good: two of three replicas keep the queue serving.
	n3.Kill()
	receiveAll(t, n2, q, ids)
}

// A rolling restart as Kubernetes runs it with the chart (each node drains itself in
// preStop, stops with SIGTERM and starts again; the next goes once it is ready, and
// nothing else is waited for): entities created while a node drains and while it is
// down end with three replicas, the returned node being ready only once it holds its
// share, so the next restart and then a kill -9 of any node leave every one of them
// serving through the SDK. Before, they were placed on the two other nodes only.
func TestEntityCreatedDuringRollingRestartSurvivesNextKill(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })

	var queues []string
	for i, n := range c.Nodes {
		other := c.Nodes[(i+1)%len(c.Nodes)]
		if out, err := n.Qbctl(t, "node", "drain", "--self"); err != nil {
			t.Fatalf("qbctl node drain --self on %s: %v\n%s", n.ID, err, out)
		}
		draining := "while-" + n.ID + "-drains"
		createQueue(t, other, draining, nil)
		if err := n.Stop(); err != nil {
			t.Errorf("%s after SIGTERM: exit status %v", n.ID, err)
		}
		down := "while-" + n.ID + "-is-down"
		createQueue(t, other, down, nil)
		queues = append(queues, draining, down)
		n.Restart() // returns once the node's /readyz answers 200
		if err := serving(t, c, "", 3); err != nil {
			t.Fatalf("%s is ready, but: %v", n.ID, err)
		}
	}
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, "", 3, nil) })

	victim := c.Nodes[1]
	victim.Kill()
	through := c.Nodes[2]
	for _, q := range queues {
		ids := idRange(q, 3)
		sendIDs(t, through, q, ids)
		receiveAll(t, through, q, ids)
	}
	// With a registered node down, each group is marked under-replicated.
	c.WaitFor(t, 60*time.Second, func() error { return underReplicated(t, through, "", true) })
}
