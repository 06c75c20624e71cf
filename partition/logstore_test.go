package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// storeFiles reports which log store files replica i of group g has on disk.
func storeFiles(t *testing.T, c *cluster, g uint32, i int) (bolt, wal bool) {
	t.Helper()
	dir := Dir(c.nodes[i].dir, "queue-"+strconv.Itoa(int(g)), 0)
	_, err := os.Stat(filepath.Join(dir, "raft.db"))
	bolt = err == nil
	_, err = os.Stat(filepath.Join(dir, "wal"))
	wal = err == nil
	return bolt, wal
}

// TestWALLogStoreSurvivesRestarts (S-DUR-1) on LogStoreWAL: a 3-replica group whose log
// lives in raft-wal keeps every acknowledged send through a follower's restart, a
// leader's abrupt stop and a stop of the whole group, with snapshots frequent enough that
// raft truncates the head of the WAL and the restarted follower catches up past it.
func TestWALLogStoreSurvivesRestarts(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.LogStore = LogStoreWAL
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = 200 * time.Millisecond
	})
	qc := testQueue(1, 5*time.Second)
	qc.RequiresDuplicateDetection = true // retried sends stay exactly-once (S-DUP-1)
	qc.DuplicateWindowMs = time.Hour.Milliseconds()
	c.addGroup(qc)
	for i := range c.nodes {
		if bolt, wal := storeFiles(t, c, 1, i); bolt || !wal {
			t.Fatalf("replica %d: raft.db %v, wal/ %v; want only wal/", i, bolt, wal)
		}
	}
	mk := func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), []byte("payload-"+strconv.Itoa(i))) }
	const n = 300
	enqueueAll(t, c, 1, n, 8, mk)

	// A follower stops, the others go on (and truncate their logs), it comes back.
	li, _ := c.leader(1, 20*time.Second)
	fi := (li + 1) % 3
	c.stop(1, fi)
	enqueueAll(t, c, 1, n, 8, func(i int) *fsm.Message { return mk(n + i) })
	_, lp := c.leader(1, 20*time.Second)
	if err := lp.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.restart(1, fi)
	c.checkConverged(1)

	// The leader stops abruptly; the new one takes more sends.
	li, _ = c.leader(1, 20*time.Second)
	c.stop(1, li)
	enqueueAll(t, c, 1, n, 8, func(i int) *fsm.Message { return mk(2*n + i) })
	c.restart(1, li)

	// Everything stops at once and comes back from disk on new ports.
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(1, i) }()
	}
	wg.Wait()
	for i := range c.nodes {
		c.restartNode(i)
	}
	for i := range c.nodes {
		c.restart(1, i)
	}
	got := drain(t, c, 1, fsm.Target{})
	if len(got) != 3*n {
		t.Fatalf("after the restarts received %d distinct messages, want %d", len(got), 3*n)
	}
	for i := range 3 * n {
		if id := "m" + strconv.Itoa(i); got[id] != 1 {
			t.Fatalf("%s received %d times, want once", id, got[id])
		}
	}
	c.checkConverged(1)
}

// TestLogStoreKeptOnDisk: changing Config.LogStore does not move a replica that already
// has a log: one created on bolt reopens on bolt (with its messages) when wal is
// configured, and one created on wal stays on wal when bolt is.
func TestLogStoreKeptOnDisk(t *testing.T) {
	for _, tc := range []struct{ created, later string }{
		{LogStoreBolt, LogStoreWAL},
		{LogStoreWAL, LogStoreBolt},
	} {
		t.Run(tc.created, func(t *testing.T) {
			store := tc.created
			c := newCluster(t, 1, func(cfg *Config) { cfg.LogStore = store })
			c.addGroup(testQueue(1, 30*time.Second))
			enqueueAll(t, c, 1, 5, 1, func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), []byte("x")) })
			c.stop(1, 0)
			store = tc.later
			c.restart(1, 0)
			bolt, wal := storeFiles(t, c, 1, 0)
			if bolt != (tc.created == LogStoreBolt) || wal != (tc.created == LogStoreWAL) {
				t.Fatalf("created on %s, reopened with %s: raft.db %v, wal/ %v", tc.created, tc.later, bolt, wal)
			}
			if got := drain(t, c, 1, fsm.Target{}); len(got) != 5 {
				t.Fatalf("after reopening received %d messages, want 5", len(got))
			}
		})
	}
}

// TestLogStoreBothOnDiskRefused: a directory holding both a raft.db and a wal/ (put
// there by hand) is refused rather than one of them silently ignored.
func TestLogStoreBothOnDiskRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "wal"), 0o750); err != nil {
		t.Fatal(err)
	}
	s, err := openLogStore(dir, LogStoreWAL, nil, false, hclog.NewNullLogger())
	if err == nil {
		s.Close()
		t.Fatal("opened a directory with both raft.db and wal/")
	}
	if !strings.Contains(err.Error(), "more than one raft log") {
		t.Fatalf("error %q does not name the two stores", err)
	}
}

// TestWALTailTruncationSurvivesRestart: raft deletes a suffix of a follower's log when a
// new leader's entries conflict with ones a deposed leader left there ("clearing log
// suffix"). raft-wal v0.4.0 marked the tail segment sealed without writing its index, and
// the replica could not start again ("sealed segment has no index block",
// hashicorp/raft-wal#31, fixed in v0.4.1). After the truncation, new entries, and a
// restart, the store must hold exactly the kept prefix and the new entries.
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() logStore {
		s, err := openLogStore(dir, LogStoreWAL, nil, false, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	entries := func(from, to, term uint64) []*raft.Log {
		var ls []*raft.Log
		for i := from; i <= to; i++ {
			ls = append(ls, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("%d@%d", i, term))})
		}
		return ls
	}
	s := open()
	if err := s.StoreLogs(entries(1, 20, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(16, 20); err != nil { // the conflicting suffix
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(16, 25, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	check := func(first, last uint64) {
		t.Helper()
		if f, err := s.FirstIndex(); err != nil || f != first {
			t.Fatalf("FirstIndex %d, %v; want %d", f, err, first)
		}
		if l, err := s.LastIndex(); err != nil || l != last {
			t.Fatalf("LastIndex %d, %v; want %d", l, err, last)
		}
		for i := first; i <= last; i++ {
			term := uint64(1)
			if i >= 16 {
				term = 2
			}
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("entry %d after the restart: %v", i, err)
			}
			if want := fmt.Sprintf("%d@%d", i, term); string(l.Data) != want || l.Term != term {
				t.Fatalf("entry %d = %q term %d, want %q", i, l.Data, l.Term, want)
			}
		}
	}
	check(1, 25)
	// And the head truncation raft does after a snapshot.
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	check(11, 25)
}

// TestWALRefusesAnEntryItCannotReadBack: raft-wal reads no entry above 64 MiB back (it
// calls it corrupt), so the store refuses to append one and keeps what it had.
func TestWALRefusesAnEntryItCannotReadBack(t *testing.T) {
	s, err := openLogStore(t.TempDir(), LogStoreWAL, nil, false, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StoreLog(&raft.Log{Index: 1, Term: 1, Data: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	big := &raft.Log{Index: 2, Term: 1, Data: make([]byte, 64<<20)}
	if err := s.StoreLogs([]*raft.Log{big}); err == nil || !strings.Contains(err.Error(), "above raft-wal's") {
		t.Fatalf("64 MiB entry: err = %v, want a refusal", err)
	}
	if l, err := s.LastIndex(); err != nil || l != 1 {
		t.Fatalf("LastIndex %d, %v after the refusal; want 1", l, err)
	}
	var got raft.Log
	if err := s.GetLog(1, &got); err != nil || string(got.Data) != "small" {
		t.Fatalf("entry 1 after the refusal: %q %v", got.Data, err)
	}
}
