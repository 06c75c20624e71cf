//go:build long

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// TestMetricsSeriesFor1000Queues measures the figure docs/observability.md states: the
// series one node exports with 1,000 single-partition queues, each holding a message.
// Run: go test -tags long -count=1 -run TestMetricsSeriesFor1000Queues -v ./cluster/
func TestMetricsSeriesFor1000Queues(t *testing.T) {
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { closeNode(t, n) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	reg := n.Registry()
	all := func() int { return seriesCount(t, reg, "") }
	empty := all()
	const queues = 1000
	for i := range queues {
		if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: fmt.Sprintf("q%04d", i), Properties: queueProps(1)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	total := all()
	took := time.Since(start)
	entity := seriesCount(t, reg, "quorumbus_entity_")
	part := seriesCount(t, reg, "quorumbus_partition_")
	t.Logf("%d queues: %d series in all (%d with none): %d quorumbus_entity_, %d quorumbus_partition_; gather took %v",
		queues, total, empty, entity, part, took)
	if total-empty != queues*26 {
		t.Errorf("%d series for %d queues, want 26 each", total-empty, queues)
	}
}
