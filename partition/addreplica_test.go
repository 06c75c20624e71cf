package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// A replica added to a group after its entity changed replays the group's log from the
// configuration the group was created with, and reaches the same state as the first
// replicas. Opened with the entity's current configuration instead (what the cluster did
// before placements recorded each group's creation configuration), it rebuilds a
// different state: a message enqueued before the change gets the new default TTL.
func TestReplicaAddedAfterUpdate(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fromCreation bool
		snapshot     bool // the leader compacts its log first: the new replica gets a snapshot
	}{{"FromCreationConfig", true, false}, {"FromCurrentConfigDiverges", false, false}, {"BySnapshot", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var tune func(*Config)
			if tc.snapshot {
				tune = func(c *Config) { c.TrailingLogs = 0 }
			}
			c := newCluster(t, 4, tune)
			const g = 7
			created := testQueue(g, 30*time.Second)
			c.mu.Lock()
			c.cfgs[g] = created
			c.parts[g] = make([]*Partition, 4)
			c.mu.Unlock()
			peers := c.peers()[:3]
			for i := range 3 {
				c.open(g, i, peers)
			}
			_, lp := c.leader(g, 20*time.Second)
			if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg("before", []byte("b"))}); err != nil {
				t.Fatal(err)
			}
			updated := created
			updated.Queue.DefaultTTLMs = time.Hour.Milliseconds()
			if err := lp.UpdateEntity(ctxT(t, 10*time.Second), updated); err != nil {
				t.Fatal(err)
			}
			if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg("after", []byte("a"))}); err != nil {
				t.Fatal(err)
			}
			if tc.snapshot {
				if err := lp.raft.Snapshot().Error(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				if first, err := lp.store.FirstIndex(); err != nil || first == 1 { // 0: every entry compacted away
					t.Fatalf("log not compacted after the snapshot (first index %d, %v)", first, err)
				}
			}
			// The fourth replica starts empty: it replays the whole log, or installs the
			// leader's snapshot when the log was compacted.
			if !tc.fromCreation {
				c.mu.Lock()
				c.cfgs[g] = updated
				c.mu.Unlock()
			}
			fourth := c.open(g, 3, nil)
			nd := c.nodes[3]
			if err := lp.AddNonvoter(ctxT(t, 10*time.Second), string(nd.id), nd.addr); err != nil {
				t.Fatal(err)
			}
			if err := lp.raft.Barrier(5 * time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			target := lp.AppliedIndex()
			testutil.WaitFor(t, 20*time.Second, func() error {
				if got := fourth.AppliedIndex(); got < target {
					return fmt.Errorf("the fourth replica applied %d of %d", got, target)
				}
				return nil
			})
			if got := fourth.raft.Stats()["last_snapshot_index"]; tc.snapshot && (got == "" || got == "0") {
				t.Fatalf("the added replica has no snapshot (last_snapshot_index %q): it did not catch up by one", got)
			}
			same := fourth.Digest() == lp.Digest()
			if tc.fromCreation && !same {
				t.Fatal("the added replica's state differs from the leader's")
			}
			if !tc.fromCreation && same {
				t.Fatal("replaying under the current configuration rebuilt the same state: this test no longer shows the divergence it guards against")
			}
			if tc.fromCreation {
				c.checkConverged(g)
			}
		})
	}
}
