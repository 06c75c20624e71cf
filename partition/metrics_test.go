package partition

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

type countingObserver struct {
	mu                 sync.Mutex
	batches, cmds, oks int
}

func (o *countingObserver) Batched(cmds, bytes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	o.cmds += cmds
}

func (o *countingObserver) Committed(d time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok {
		o.oks++
	}
}

// TestMetricsCountProposalsAndSnapshots: Metrics reports the leader, its indexes and
// the counts of commands, entries and snapshots, and the Observer sees every entry.
func TestMetricsCountProposalsAndSnapshots(t *testing.T) {
	obs := &countingObserver{}
	c := newCluster(t, 1, func(cfg *Config) { cfg.Observer = obs })
	c.addGroup(testQueue(1, 5*time.Second))
	_, p := c.leader(1, 20*time.Second)
	before := p.Metrics()
	for range 3 {
		if _, err := p.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	m := p.Metrics()
	if !m.IsLeader || m.Term == 0 || m.AppliedIndex < before.AppliedIndex+3 || m.CommitIndex < m.AppliedIndex || m.LastIndex < m.CommitIndex {
		t.Errorf("metrics %+v (before %+v)", m, before)
	}
	if m.Proposals-before.Proposals != 3 || m.Entries-before.Entries != 3 {
		t.Errorf("proposals %d entries %d after 3 sequential sends, want 3 and 3",
			m.Proposals-before.Proposals, m.Entries-before.Entries)
	}
	if m.Snapshots != 1 || m.LastSnapshotBytes <= 0 {
		t.Errorf("snapshots %d (last %d bytes), want 1", m.Snapshots, m.LastSnapshotBytes)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { // the completer reports after answering
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if obs.oks < 3 || obs.cmds != int(m.Proposals) || obs.batches != int(m.Entries) {
			return fmt.Errorf("observer saw %d batches of %d commands, %d committed; metrics %+v", obs.batches, obs.cmds, obs.oks, m)
		}
		return nil
	})
}
