package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// seriesCount counts the series of a gather whose name starts with prefix.
func seriesCount(t *testing.T, reg *prometheus.Registry, prefix string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, m := range mf.GetMetric() {
				n += len(m.GetHistogram().GetBucket()) + 3 // buckets, +Inf, _sum, _count
			}
		default:
			n += len(mf.GetMetric())
		}
	}
	return n
}

// sample returns the value of the series name{labels} (labels as k=v pairs), or an error.
func sample(reg *prometheus.Registry, name string, labels ...string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), nil
			case m.Counter != nil:
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("no series %s%v", name, labels)
}

// TestMetricsPerEntityAndPartition: the node's registry reports a queue's counts and
// counters from its partition leader, the partition's Raft state, and every entity adds
// the same fixed number of series (the cardinality docs/observability.md states).
func TestMetricsPerEntityAndPartition(t *testing.T) {
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { closeNode(t, n) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := n.Registry()
	base := seriesCount(t, reg, "quorumbus_entity_") + seriesCount(t, reg, "quorumbus_partition_")

	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "Metered", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	one := seriesCount(t, reg, "quorumbus_entity_") + seriesCount(t, reg, "quorumbus_partition_")
	for i := range 4 {
		if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: fmt.Sprintf("more-%d", i), Properties: queueProps(1)}); err != nil {
			t.Fatal(err)
		}
	}
	five := seriesCount(t, reg, "quorumbus_entity_") + seriesCount(t, reg, "quorumbus_partition_")
	per := one - base
	if per != 26 || five-base != 5*per {
		t.Errorf("series: %d with no queue, %d with one, %d with five: want 26 more per single-partition queue", base, one, five)
	}

	for i := range 3 {
		if err := n.Router().Send(ctx, "metered", []*fsm.Message{{Payload: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"quorumbus_entity_active_messages", 3},
		{"quorumbus_entity_incoming_messages_total", 3},
		{"quorumbus_entity_dead_letter_messages", 0},
		{"quorumbus_partition_is_leader", 1},
	} {
		got, err := sample(reg, c.name, "entity", "Metered", "partition", "0")
		if err != nil || got != c.want {
			t.Errorf("%s = %v (%v), want %v", c.name, got, err, c.want)
		}
	}
	if age, err := sample(reg, "quorumbus_entity_oldest_message_age_seconds", "entity", "Metered"); err != nil || age < 0 || age > 60 {
		t.Errorf("oldest message age %v (%v)", age, err)
	}
	if v, err := sample(reg, "quorumbus_partition_proposals_total", "entity", "Metered"); err != nil || v < 3 {
		t.Errorf("proposals %v (%v), want >= 3", v, err)
	}
	if v, err := sample(reg, "quorumbus_node_ready"); err != nil || v != 1 {
		t.Errorf("ready %v (%v)", v, err)
	}
	if v, err := sample(reg, "quorumbus_rebalance_moves_in_progress"); err != nil || v != 0 {
		t.Errorf("rebalance moves %v (%v), want 0 on a single node", v, err)
	}
	if v, err := sample(reg, "quorumbus_cluster_members", "state", "alive"); err != nil || v != 1 {
		t.Errorf("alive members %v (%v)", v, err)
	}
	if seriesCount(t, reg, "go_goroutines") != 1 || seriesCount(t, reg, "quorumbus_partition_batch_commands") == 0 {
		t.Error("Go runtime or batch histogram missing")
	}

	// A second node in the same process has its own registry: nothing collides.
	n2 := startNode(t, t.TempDir())
	t.Cleanup(func() { closeNode(t, n2) })
	if n2.Registry() == reg {
		t.Fatal("two nodes share a registry")
	}
	if _, err := sample(n2.Registry(), "quorumbus_entity_active_messages", "entity", "Metered"); err == nil {
		t.Error("the second node reports the first node's queue")
	}
}

// histogramCount is the _count of the histogram series name{labels}.
func histogramCount(reg *prometheus.Registry, name string, labels ...string) uint64 {
	mfs, _ := reg.Gather()
	var total uint64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			total += m.GetHistogram().GetSampleCount()
		}
	}
	return total
}

// TestHealthCaughtUpAsksTheLeaders: on two nodes replicating a queue, CaughtUp (what
// /readyz answers) holds on both once the follower has applied the leader's log, and the
// follower got there by asking the leader's node for its log index (one GroupStatus
// call, visible in the RPC latency histogram).
func TestHealthCaughtUpAsksTheLeaders(t *testing.T) {
	nodes := startCluster(t, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "replicated", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := nodes[0].Router().Send(ctx, "replicated", []*fsm.Message{{Payload: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, func() error { return n.CaughtUp(ctx) })
	}
	asked := 0
	for _, n := range nodes {
		if histogramCount(n.Registry(), "quorumbus_cluster_rpc_duration_seconds", "method", "GroupStatus", "result", "ok") > 0 {
			asked++
		}
	}
	if asked == 0 {
		t.Error("no node asked a leader for its log index")
	}
}

// TestHealthDefaultLag: a lone node, which follows nobody, is caught up as soon as it
// is ready, with the default lag bound.
func TestHealthDefaultLag(t *testing.T) {
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { closeNode(t, n) })
	if n.cfg.ReadyMaxLag != DefaultReadyMaxLag {
		t.Errorf("ReadyMaxLag %d, want the default %d", n.cfg.ReadyMaxLag, DefaultReadyMaxLag)
	}
	if err := n.CaughtUp(context.Background()); err != nil {
		t.Errorf("a single node is not caught up: %v", err)
	}
}
