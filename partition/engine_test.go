package partition

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/lazyfsctl"
	"github.com/quorumbus/quorumbus/test/testutil"
)

func openTestEngine(t *testing.T, dataDir string) *Engine {
	t.Helper()
	e, err := OpenEngine(EngineConfig{Dir: EngineDir(dataDir), DataDir: dataDir, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func openEngineStore(t *testing.T, e *Engine, dir string) logStore {
	t.Helper()
	s, err := openLogStore(dir, LogStoreShared, e, false, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// entryData is what entry i of group g holds in these tests.
func entryData(g string, i, term uint64) []byte { return fmt.Appendf(nil, "%s/%d@%d", g, i, term) }

func storeEntries(t *testing.T, s logStore, g string, from, to, term uint64) {
	t.Helper()
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: entryData(g, i, term), AppendedAt: time.Unix(int64(i), 0)})
	}
	if err := s.StoreLogs(ls); err != nil {
		t.Fatal(err)
	}
}

// checkLog asserts that s holds exactly first..last of group g, entries from index
// newFrom on in term 2 and the others in term 1.
func checkLog(t *testing.T, s logStore, g string, first, last, newFrom uint64) {
	t.Helper()
	if f, err := s.FirstIndex(); err != nil || f != first {
		t.Fatalf("%s: FirstIndex %d, %v; want %d", g, f, err, first)
	}
	if l, err := s.LastIndex(); err != nil || l != last {
		t.Fatalf("%s: LastIndex %d, %v; want %d", g, l, err, last)
	}
	for i := first; i <= last && last > 0; i++ {
		term := uint64(1)
		if i >= newFrom {
			term = 2
		}
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("%s: entry %d: %v", g, i, err)
		}
		if l.Index != i || l.Term != term || string(l.Data) != string(entryData(g, i, term)) || !l.AppendedAt.Equal(time.Unix(int64(i), 0)) {
			t.Fatalf("%s: entry %d = {%d %d %q %v}", g, i, l.Index, l.Term, l.Data, l.AppendedAt)
		}
	}
	var l raft.Log
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("%s: entry %d outside %d..%d: err %v, want ErrLogNotFound", g, i, first, last, err)
		}
	}
}

// TestEngineStoreLogAndStable: the shared engine behaves as raft's LogStore and
// StableStore for each group, separately from the others, and all of it survives a
// reopen: head truncation (after a snapshot), suffix truncation (a follower's
// conflicting entries), the stable store's values and its "not found".
func TestEngineStoreLogAndStable(t *testing.T) {
	data := t.TempDir()
	e := openTestEngine(t, data)
	dirA, dirB := Dir(data, "a", 0), Dir(data, "b", 0)
	a, b := openEngineStore(t, e, dirA), openEngineStore(t, e, dirB)
	checkLog(t, a, "a", 0, 0, 0)
	if _, err := a.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of an unset key: %v; raft wants the error \"not found\"", err)
	}
	if _, err := a.Get([]byte("LastVoteCand")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of an unset key: %v; raft wants the error \"not found\"", err)
	}
	storeEntries(t, a, "a", 1, 20, 1)
	storeEntries(t, b, "b", 1, 5, 1)
	if err := a.DeleteRange(16, 20); err != nil { // conflicting suffix
		t.Fatal(err)
	}
	storeEntries(t, a, "a", 16, 25, 2)
	if err := a.DeleteRange(1, 10); err != nil { // after a snapshot
		t.Fatal(err)
	}
	if err := a.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := a.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := openLogStore(dirA, LogStoreShared, e, false, hclog.NewNullLogger()); err == nil {
		t.Fatal("opened a group's log twice")
	}
	check := func() {
		t.Helper()
		checkLog(t, a, "a", 11, 25, 16)
		checkLog(t, b, "b", 1, 5, 99)
		if v, err := a.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
			t.Fatalf("a CurrentTerm %d, %v", v, err)
		}
		if v, err := a.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
			t.Fatalf("a LastVoteCand %q, %v", v, err)
		}
		if v, err := b.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
			t.Fatalf("b CurrentTerm %d, %v", v, err)
		}
	}
	check()
	a.Close()
	b.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, data)
	defer e.Close()
	a, b = openEngineStore(t, e, dirA), openEngineStore(t, e, dirB)
	defer a.Close()
	defer b.Close()
	check()
	// Deleting the whole log (a follower installing a snapshot) leaves it empty.
	if err := b.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	checkLog(t, b, "b", 0, 0, 0)
	storeEntries(t, b, "b", 40, 41, 1)
	checkLog(t, b, "b", 40, 41, 99)
}

// TestEngineTruncationAcrossManyGroups: 300 groups append and each truncates the head
// of its log, as raft does after a snapshot; after a reopen each has exactly its kept
// tail, and the truncated entries are gone from the engine.
func TestEngineTruncationAcrossManyGroups(t *testing.T) {
	const groups, n, keep = 300, 40, 8
	data := t.TempDir()
	e := openTestEngine(t, data)
	stores := make([]logStore, groups)
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := range groups {
		stores[g] = openEngineStore(t, e, Dir(data, "q"+strconv.Itoa(g), 0))
		wg.Go(func() {
			name := "q" + strconv.Itoa(g)
			for i := uint64(1); i <= n; i++ {
				l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(name, i, 1), AppendedAt: time.Unix(int64(i), 0)}
				if err := stores[g].StoreLog(l); err != nil {
					errs <- err
					return
				}
			}
			if err := stores[g].DeleteRange(1, n-keep); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range stores {
		s.Close()
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, data)
	defer e.Close()
	for g := range groups {
		name := "q" + strconv.Itoa(g)
		s := openEngineStore(t, e, Dir(data, name, 0))
		checkLog(t, s, name, n-keep+1, n, n+1)
		s.Close()
	}
	if live := engineKeys(t, e, 'L'); live != groups*keep {
		t.Fatalf("%d log entries in the engine, want %d", live, groups*keep)
	}
}

// engineKeys counts the keys with prefix p in e.
func engineKeys(t *testing.T, e *Engine, p byte) int {
	t.Helper()
	it, err := e.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] == p {
			n++
		}
	}
	return n
}

// TestEngineGroupRemovedWhileOthersAppend: one group's replica is removed from the node
// (RemoveDir, as the cluster does when the entity is deleted) while other groups
// append. The others lose nothing, the removed group's keys are gone, and a replica
// created again in the same directory starts with an empty log.
func TestEngineGroupRemovedWhileOthersAppend(t *testing.T) {
	const groups, n = 16, 200
	data := t.TempDir()
	e := openTestEngine(t, data)
	victimDir := Dir(data, "victim", 0)
	victim := openEngineStore(t, e, victimDir)
	storeEntries(t, victim, "victim", 1, 50, 1)
	if err := victim.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	stores := make([]logStore, groups)
	for g := range groups {
		stores[g] = openEngineStore(t, e, Dir(data, "q"+strconv.Itoa(g), 0))
	}
	var wg sync.WaitGroup
	errs := make(chan error, groups+1)
	half := make(chan struct{})
	for g := range groups {
		wg.Go(func() {
			name := "q" + strconv.Itoa(g)
			for i := uint64(1); i <= n; i++ {
				l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(name, i, 1), AppendedAt: time.Unix(int64(i), 0)}
				if err := stores[g].StoreLog(l); err != nil {
					errs <- err
					return
				}
				if g == 0 && i == n/2 {
					close(half)
				}
			}
		})
	}
	wg.Go(func() {
		<-half
		victim.Close()
		if err := RemoveDir(victimDir, e); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := os.Stat(victimDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the removed replica's directory: %v", err)
	}
	if got := engineKeys(t, e, 'L'); got != groups*n {
		t.Fatalf("%d log entries in the engine after the removal, want %d (the others' only)", got, groups*n)
	}
	if got := engineKeys(t, e, 'S'); got != 0 {
		t.Fatalf("%d stable-store keys left after the removal, want 0", got)
	}
	again := openEngineStore(t, e, victimDir)
	checkLog(t, again, "victim", 0, 0, 0)
	if _, err := again.GetUint64([]byte("CurrentTerm")); err == nil {
		t.Fatal("a replica created again in a removed directory sees the old term")
	}
	again.Close()
	for g, s := range stores {
		checkLog(t, s, "q"+strconv.Itoa(g), 1, n, n+1)
		s.Close()
	}
	e.Close()
}

// TestEngineSweepsLogsOfRemovedDirectories: a replica directory removed while its node
// was down (or between RemoveDir's two steps) leaves a log no directory names: the next
// OpenEngine drops it and keeps the others.
func TestEngineSweepsLogsOfRemovedDirectories(t *testing.T) {
	data := t.TempDir()
	e := openTestEngine(t, data)
	keep, gone := openEngineStore(t, e, Dir(data, "keep", 0)), openEngineStore(t, e, Dir(data, "gone", 0))
	storeEntries(t, keep, "keep", 1, 10, 1)
	storeEntries(t, gone, "gone", 1, 10, 1)
	keep.Close()
	gone.Close()
	e.Close()
	if err := os.RemoveAll(Dir(data, "gone", 0)); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, data)
	defer e.Close()
	if got := engineKeys(t, e, 'L'); got != 10 {
		t.Fatalf("%d log entries after reopening, want the 10 of the directory still there", got)
	}
	s := openEngineStore(t, e, Dir(data, "keep", 0))
	checkLog(t, s, "keep", 1, 10, 99)
	s.Close()
}

// TestEngineTornTail: the engine's write-ahead log cut short at any point (a torn
// write at a power cut) reopens, and every group then holds a prefix of what it
// appended, each entry intact.
func TestEngineTornTail(t *testing.T) {
	const groups, n = 8, 60
	src := t.TempDir()
	e := openTestEngine(t, src)
	for g := range groups {
		name := "q" + strconv.Itoa(g)
		s := openEngineStore(t, e, Dir(src, name, 0))
		for i := uint64(1); i <= n; i++ {
			storeEntries(t, s, name, i, i, 1)
		}
		s.Close()
	}
	e.Close()
	wals, _ := filepath.Glob(filepath.Join(EngineDir(src), "*.log"))
	if len(wals) == 0 {
		t.Fatal("no write-ahead log in the engine")
	}
	slices.Sort(wals)
	last := wals[len(wals)-1]
	st, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int64{st.Size() - 1, st.Size() - 333, st.Size() / 2, st.Size() / 7} {
		t.Run(strconv.FormatInt(cut, 10), func(t *testing.T) {
			data := t.TempDir()
			if err := os.CopyFS(data, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(EngineDir(data), filepath.Base(last)), cut); err != nil {
				t.Fatal(err)
			}
			e := openTestEngine(t, data)
			defer e.Close()
			total := 0
			for g := range groups {
				name := "q" + strconv.Itoa(g)
				s := openEngineStore(t, e, Dir(data, name, 0))
				l, _ := s.LastIndex()
				if l > 0 {
					checkLog(t, s, name, 1, l, n+1)
				}
				total += int(l)
				s.Close()
			}
			if cut == st.Size()-1 && total < groups*n-1 {
				t.Fatalf("one byte cut off the log lost %d entries", groups*n-total)
			}
		})
	}
}

// TestEnginePowerLoss (S-DUR-1 on the shared engine): a process appends to 32 groups at
// once on test/lazyfs and reports each append the engine acknowledged; it is killed
// (-9) and every write not fsynced is thrown away, as a power cut does. Reopened, every
// group holds every entry acknowledged to it, intact, with no gap.
func TestEnginePowerLoss(t *testing.T) {
	if dir := os.Getenv("QB_ENGINE_POWERLOSS_CHILD"); dir != "" {
		enginePowerLossChild(dir)
		return
	}
	l, data := lazyfsctl.MountTemp(t, "engine-test")
	const groups = 32
	for round := range 2 { // the second round appends to the engine the first recovered
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnginePowerLoss$")
		cmd.Env = append(os.Environ(), "QB_ENGINE_POWERLOSS_CHILD="+data)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		acked := map[string]uint64{}
		sc := bufio.NewScanner(out)
		seen := 0
		for seen < 3000 && sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			i, _ := strconv.ParseUint(f[1], 10, 64)
			acked[f[0]] = max(acked[f[0]], i)
			seen++
		}
		if seen < 3000 {
			t.Fatalf("round %d: the appending process stopped after %d acknowledgements: %v", round, seen, sc.Err())
		}
		cmd.Process.Kill()
		cmd.Wait()
		killed = true
		go io.Copy(io.Discard, out)
		dropped, err := l.Crash()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d appends acknowledged to %d groups; power loss dropped %v", round, seen, len(acked), dropped)

		checkAcked(t, data, groups, round, acked)
	}
}

// checkAcked asserts that every group of the engine in data holds every entry acked to
// it, intact and without a gap. The engine is closed however it returns: its files are
// on a test/lazyfs mount, which cannot be unmounted under them.
func checkAcked(t *testing.T, data string, groups, round int, acked map[string]uint64) {
	t.Helper()
	e := openTestEngine(t, data)
	defer e.Close()
	for g := range groups {
		name := "q" + strconv.Itoa(g)
		s := openEngineStore(t, e, Dir(data, name, 0))
		defer s.Close()
		last, _ := s.LastIndex()
		if last < acked[name] {
			t.Fatalf("round %d: %s holds up to %d after the power loss, %d was acknowledged", round, name, last, acked[name])
		}
		if last > 0 {
			checkLog(t, s, name, 1, last, last+1)
		}
	}
}

// enginePowerLossChild appends to 32 groups of the engine in dataDir until killed, each
// group continuing its log, and prints "group index" for every acknowledged append.
func enginePowerLossChild(dataDir string) {
	e, err := OpenEngine(EngineConfig{Dir: EngineDir(dataDir), DataDir: dataDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for g := range 32 {
		go func() {
			name := "q" + strconv.Itoa(g)
			s, err := openLogStore(Dir(dataDir, name, 0), LogStoreShared, e, false, hclog.NewNullLogger())
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			last, _ := s.LastIndex()
			for i := last + 1; ; i++ {
				// A group commit's worth of commands: a few KiB.
				l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(name, i, 1), AppendedAt: time.Unix(int64(i), 0)}
				if err := s.StoreLogs([]*raft.Log{l}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(w, "%s %d\n", name, i)
				w.Flush()
				mu.Unlock()
			}
		}()
	}
	select {} // until killed
}

// TestSharedLogStoreGroupSurvivesRestarts runs a 3-replica group on the shared engine
// through snapshots (head truncation), a follower's restart, and a restart of every
// node with its engine, keeping every acknowledged send (S-DUR-1).
func TestSharedLogStoreGroupSurvivesRestarts(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.LogStore = LogStoreShared
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = 200 * time.Millisecond
	})
	qc := testQueue(1, 5*time.Second)
	qc.RequiresDuplicateDetection = true
	qc.DuplicateWindowMs = time.Hour.Milliseconds()
	c.addGroup(qc)
	c.addGroup(testQueue(2, 5*time.Second))
	for i := range c.nodes {
		if bolt, wal := storeFiles(t, c, 1, i); bolt || wal {
			t.Fatalf("replica %d: raft.db %v, wal/ %v; want neither", i, bolt, wal)
		}
		if _, err := os.Stat(filepath.Join(Dir(c.nodes[i].dir, "queue-1", 0), engineIDFile)); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	mk := func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), []byte("payload-"+strconv.Itoa(i))) }
	const n = 300
	enqueueAll(t, c, 1, n, 8, mk)
	enqueueAll(t, c, 2, 10, 2, mk)

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

	var wg sync.WaitGroup
	for i := range c.nodes {
		for g := uint32(1); g <= 2; g++ {
			wg.Add(1)
			go func() { defer wg.Done(); c.stop(g, i) }()
		}
	}
	wg.Wait()
	for i := range c.nodes {
		c.restartNode(i)
	}
	for i := range c.nodes {
		c.restart(1, i)
		c.restart(2, i)
	}
	got := drain(t, c, 1, fsm.Target{})
	if len(got) != 2*n {
		t.Fatalf("after the restarts received %d distinct messages, want %d", len(got), 2*n)
	}
	for i := range 2 * n {
		if id := "m" + strconv.Itoa(i); got[id] != 1 {
			t.Fatalf("%s received %d times, want once", id, got[id])
		}
	}
	if got := drain(t, c, 2, fsm.Target{}); len(got) != 10 {
		t.Fatalf("group 2 received %d messages after the restarts, want 10", len(got))
	}
	c.checkConverged(1)
}

// TestEngineRemovalGivesSpaceBack: removing groups frees their log's disk space (the
// engine compacts what it dropped), so creating and deleting entities does not grow the
// engine without bound.
func TestEngineRemovalGivesSpaceBack(t *testing.T) {
	const groups, entries = 100, 50
	data := t.TempDir()
	e := openTestEngine(t, data)
	defer e.Close()
	body := make([]byte, 1024)
	for g := range groups {
		s := openEngineStore(t, e, Dir(data, "q"+strconv.Itoa(g), 0))
		var logs []*raft.Log
		for i := range entries {
			b := fmt.Appendf(nil, "%d/%d/", g, i) // distinct, so nothing compresses away
			for len(b) < len(body) {
				b = strconv.AppendUint(b, uint64(len(b))*2654435761%1000003, 36)
			}
			logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Data: b})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if err := e.db.Flush(); err != nil { // the entries in sstables, as after a while
		t.Fatal(err)
	}
	full := tableBytes(e)
	for g := range groups {
		if err := RemoveDir(Dir(data, "q"+strconv.Itoa(g), 0), e); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		if e.compactionPending() {
			return errors.New("the compactor has not run")
		}
		if used := tableBytes(e); used > full/10 {
			return fmt.Errorf("%d bytes in sstables after removing every group, %d before", used, full)
		}
		return nil
	})
}

// tableBytes is the size of e's live sstables: its data, without the write-ahead log
// (whose files pebble recycles: a few memtables' worth, whatever the data).
func tableBytes(e *Engine) int64 {
	m := e.db.Metrics()
	var n int64
	for _, l := range m.Levels {
		n += l.TablesSize
	}
	return n
}

// A group's vote read after the group and the engine closed (its failover runs on a
// transport goroutine and may race the node's shutdown) answers ErrClosed; pebble
// panics on a read of a closed database.
func TestEngineStoreReadAfterClose(t *testing.T) {
	data := t.TempDir()
	e := openTestEngine(t, data)
	s := openEngineStore(t, e, Dir(data, "a", 0))
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("LastVoteCand")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after close: %v, want ErrClosed", err)
	}
	if _, err := s.GetUint64([]byte("LastVoteTerm")); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetUint64 after close: %v, want ErrClosed", err)
	}
}
