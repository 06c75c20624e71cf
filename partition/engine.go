package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/quorumbus/quorumbus/internal/durable"
)

// Engine is one log engine per node (LogStoreShared): a pebble database holding the raft
// log and stable store of every group of the node that uses it. Groups that append at
// the same moment share one fdatasync of its write-ahead log: pebble's commit pipeline
// writes the synced batches of concurrent callers into the WAL together and syncs once
// for all of them (group commit), where a file per group costs one or two syncs per
// group and append. Log truncation after a snapshot and the removal of a group are
// range deletions: one small batch whatever the number of entries.
//
// Each group has a log id, allocated by the engine from a persisted counter and recorded
// in the group's directory (engineIDFile) before anything is written under it, so the
// log belongs to that directory: a directory removed (the group deleted from the node,
// or wiped by an operator) leaves an id no directory names, whose keys OpenEngine drops.
//
// Keys: 'L' id index (big-endian, 8 bytes each) -> the raft.Log in raft-wal's binary
// codec; 'S' id key -> a stable-store value; "Mseq" -> the last id allocated.
//
// An Engine is safe for concurrent use; Close it after every group using it is closed.
type Engine struct {
	db     *pebble.DB
	sync   *pebble.WriteOptions // pebble.Sync, or pebble.NoSync with EngineConfig.NoSync
	logger hclog.Logger

	mu  sync.Mutex // guards seq, open, dropLo and dropHi (a leaf)
	seq uint64     // last id allocated, as persisted under "Mseq"
	// open holds the ids of the stores open now: a second open of the same log (two
	// replicas of one directory) would interleave two raft instances' writes.
	open map[uint64]bool
	// dropLo..dropHi (inclusive) are the ids dropped since the compactor last ran; 0, 0
	// when none. The compactor compacts their span so that the space of a removed
	// group's log comes back without waiting for pebble to pick those files.
	dropLo, dropHi uint64

	compactKick chan struct{}      // drop -> compactor (cap 1)
	compactBusy atomic.Bool        // the compactor is compacting (for tests)
	cancel      context.CancelFunc // stops the compactor
	wg          sync.WaitGroup     // the compactor
}

// EngineConfig configures OpenEngine.
type EngineConfig struct {
	// Dir is the engine's directory, normally EngineDir(dataDir).
	Dir string
	// DataDir, when set, is the node's data directory: OpenEngine then drops the log of
	// every id that no partition directory under it records (a group removed while the
	// node was down, or between removing its directory and its log).
	DataDir string
	// NoSync commits without fsync. Unsafe: S-DUR-1 no longer holds. Tests only.
	NoSync bool
	// Logger receives pebble's messages (at Info and Error). Nil: discarded below Warn.
	Logger hclog.Logger
}

// engineIDFile, in a group's directory, holds the decimal id of its log in the node's
// Engine. It is written (fsynced, with its directory) before the log is.
const engineIDFile = "raft-log.id"

// EngineDir is where a node keeps its Engine: <dataDir>/raft-log.
func EngineDir(dataDir string) string { return filepath.Join(dataDir, "raft-log") }

var (
	keySeq = []byte("Mseq")
	// errKeyNotFound is what hashicorp/raft expects of a StableStore for a key never
	// set: it compares the error's text with "not found" (raft.go, api.go).
	errKeyNotFound = errors.New("not found")
)

// OpenEngine opens or creates the engine in cfg.Dir. With cfg.DataDir it first drops
// the logs no partition directory records (see EngineConfig.DataDir).
func OpenEngine(cfg EngineConfig) (*Engine, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raft-log", Level: hclog.Warn})
	}
	opts := &pebble.Options{
		Logger: pebbleLogger{logger},
		// The raft log is written once, read back only by followers catching up and on
		// start (raft's LogCache serves the rest), and deleted by ranges soon after.
		// Each memtable is anonymous memory a node keeps whatever it stores: 16 MiB made
		// a queued message cost 870 B beside its body instead of about 610
		// (test/bench TestNodeMemoryPerMessage; bolt: 529 B, plus 85 B of its mmap).
		MemTableSize: 4 << 20,
		CacheSize:    8 << 20,
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("partition: open log engine %s: %w", cfg.Dir, err)
	}
	e := &Engine{db: db, sync: pebble.Sync, logger: logger, open: map[uint64]bool{}, compactKick: make(chan struct{}, 1)}
	if cfg.NoSync {
		e.sync = pebble.NoSync
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Go(func() { e.runCompactor(ctx) })
	if v, closer, err := db.Get(keySeq); err == nil {
		if len(v) == 8 {
			e.seq = binary.BigEndian.Uint64(v)
		}
		closer.Close()
		if e.seq == 0 {
			e.Close()
			return nil, fmt.Errorf("partition: log engine %s: corrupt id counter", cfg.Dir)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		e.Close()
		return nil, fmt.Errorf("partition: log engine %s: %w", cfg.Dir, err)
	}
	if cfg.DataDir != "" {
		if err := e.sweep(cfg.DataDir); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// Close closes the engine. Every store opened from it must be closed first.
func (e *Engine) Close() error {
	e.cancel()
	e.wg.Wait()
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("partition: close log engine: %w", err)
	}
	return nil
}

// sweep drops the log and stable state of every id at most e.seq that no
// <dataDir>/partitions/*/*/raft-log.id names.
func (e *Engine) sweep(dataDir string) error {
	live := map[uint64]bool{}
	files, err := filepath.Glob(filepath.Join(dataDir, "partitions", "*", "*", engineIDFile))
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	for _, f := range files {
		id, ok, err := readEngineID(filepath.Dir(f))
		if err != nil {
			return err
		}
		if ok {
			live[id] = true
		}
	}
	ids, err := e.ids()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !live[id] {
			e.logger.Info("dropping the raft log of a removed replica", "log_id", id)
			if err := e.drop(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// Logs reports how many groups have a log or stable state in the engine: those of the
// node's replicas on LogStoreShared, and none of a removed one.
func (e *Engine) Logs() (int, error) {
	ids, err := e.ids()
	if err != nil {
		return 0, err
	}
	n := 0
	for i, id := range ids {
		if i == 0 || id != ids[i-1] {
			n++
		}
	}
	return n, nil
}

// ids lists the ids that have any key in the engine, in order (an id with both log
// and stable keys twice, one after the other).
func (e *Engine) ids() ([]uint64, error) {
	var ids []uint64
	defer func() { slices.Sort(ids) }()
	for _, p := range []byte{'L', 'S'} {
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
		if err != nil {
			return nil, fmt.Errorf("partition: log engine: %w", err)
		}
		for ok := it.First(); ok; {
			k := it.Key()
			if len(k) < 9 {
				ok = it.Next()
				continue
			}
			id := binary.BigEndian.Uint64(k[1:9])
			ids = append(ids, id)
			ok = it.SeekGE(idPrefix(p, id+1))
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("partition: log engine: %w", err)
		}
	}
	return ids, nil
}

// drop deletes everything stored under id, durably.
func (e *Engine) drop(id uint64) error {
	b := e.db.NewBatch()
	defer b.Close()
	for _, p := range []byte{'L', 'S'} {
		if err := b.DeleteRange(idPrefix(p, id), idPrefix(p, id+1), nil); err != nil {
			return fmt.Errorf("partition: log engine: %w", err)
		}
	}
	if err := b.Commit(e.sync); err != nil {
		return fmt.Errorf("partition: log engine: drop log %d: %w", id, err)
	}
	e.mu.Lock()
	if e.dropLo == 0 || id < e.dropLo {
		e.dropLo = id
	}
	e.dropHi = max(e.dropHi, id)
	e.mu.Unlock()
	select {
	case e.compactKick <- struct{}{}:
	default:
	}
	return nil
}

// runCompactor (one goroutine, until Close) compacts the key span of the ids dropped
// since its last run. A range deletion hides a removed group's entries at once but
// frees their space only when a compaction rewrites the files holding them, and the
// files of a deleted group are shared with live ones, so pebble's own heuristics can
// leave them for long (BenchmarkEngineDiskAfterDeletes). Drops that arrive while it
// compacts are merged into its next run.
func (e *Engine) runCompactor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.compactKick:
		}
		e.mu.Lock()
		lo, hi := e.dropLo, e.dropHi
		e.dropLo, e.dropHi = 0, 0
		e.compactBusy.Store(lo != 0)
		e.mu.Unlock()
		if lo == 0 {
			continue
		}
		err := e.db.Compact(ctx, idPrefix('L', lo), idPrefix('L', hi+1), false)
		e.compactBusy.Store(false)
		if err != nil && ctx.Err() == nil {
			e.logger.Warn("compacting the logs of removed replicas", "from_id", lo, "to_id", hi, "err", err)
		}
	}
}

// compactionPending reports whether dropped logs wait for the compactor (for tests).
func (e *Engine) compactionPending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropLo != 0 || len(e.compactKick) > 0 || e.compactBusy.Load()
}

// allocate persists and returns a new id.
func (e *Engine) allocate() (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], e.seq+1)
	if err := e.db.Set(keySeq, v[:], e.sync); err != nil {
		return 0, fmt.Errorf("partition: log engine: %w", err)
	}
	e.seq++
	return e.seq, nil
}

// openStore returns the store of the group whose directory is dir, allocating its id and
// recording it in dir when dir has none.
func (e *Engine) openStore(dir string) (*engineStore, error) {
	id, ok, err := readEngineID(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		if id, err = e.allocate(); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("partition: %w", err)
		}
		if err := durable.WriteFile(filepath.Join(dir, engineIDFile), []byte(strconv.FormatUint(id, 10)+"\n"), 0o640); err != nil {
			return nil, fmt.Errorf("partition: %w", err)
		}
	}
	e.mu.Lock()
	if e.open[id] {
		e.mu.Unlock()
		return nil, fmt.Errorf("partition: log %d of %s is already open", id, dir)
	}
	e.open[id] = true
	e.mu.Unlock()
	s := &engineStore{e: e, id: id}
	if err := s.loadBounds(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// RemoveDir removes a group's directory and then, if it recorded a log in e, that log.
// In that order a crash in between leaves a log no directory names, which the next
// OpenEngine drops, never a directory whose log is gone. e may be nil when the node
// has no engine (then a log recorded in dir stays until an engine is opened with
// EngineConfig.DataDir). The group must be closed.
func RemoveDir(dir string, e *Engine) error {
	id, ok, err := readEngineID(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	if !ok || e == nil {
		return nil
	}
	return e.drop(id)
}

// readEngineID reads dir's engineIDFile; ok is false when there is none.
func readEngineID(dir string) (id uint64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, engineIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("partition: %w", err)
	}
	id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || id == 0 {
		return 0, false, fmt.Errorf("partition: %s: %q is not a log id", filepath.Join(dir, engineIDFile), b)
	}
	return id, true, nil
}

func idPrefix(p byte, id uint64) []byte {
	k := make([]byte, 9)
	k[0] = p
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

// engineStore is one group's raft.LogStore and raft.StableStore in an Engine. Raft
// calls it from several goroutines (its main loop appends and truncates, replication
// and the fsm read), so first and last are under mu.
type engineStore struct {
	e  *Engine
	id uint64

	mu          sync.Mutex // guards first, last, closed, and is held by stable reads (a leaf)
	first, last uint64     // bounds of the log, 0, 0 when empty
	closed      bool
}

var _ logStore = (*engineStore)(nil)

func (s *engineStore) logKey(index uint64) []byte {
	k := make([]byte, 17)
	k[0] = 'L'
	binary.BigEndian.PutUint64(k[1:], s.id)
	binary.BigEndian.PutUint64(k[9:], index)
	return k
}

func (s *engineStore) stableKey(key []byte) []byte {
	return append(idPrefix('S', s.id), key...)
}

// loadBounds reads the first and last index from the engine.
func (s *engineStore) loadBounds() error {
	it, err := s.e.db.NewIter(&pebble.IterOptions{LowerBound: idPrefix('L', s.id), UpperBound: idPrefix('L', s.id+1)})
	if err != nil {
		return fmt.Errorf("partition: log engine: %w", err)
	}
	var first, last uint64
	if it.First() {
		first = binary.BigEndian.Uint64(it.Key()[9:])
		if it.Last() {
			last = binary.BigEndian.Uint64(it.Key()[9:])
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("partition: log engine: %w", err)
	}
	s.mu.Lock()
	s.first, s.last = first, last
	s.mu.Unlock()
	return nil
}

func (s *engineStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

func (s *engineStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

func (s *engineStore) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.e.db.Get(s.logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("partition: log engine: %w", err)
	}
	defer closer.Close()
	var codec wal.BinaryCodec
	if err := codec.Decode(v, l); err != nil { // Decode copies what it keeps
		return fmt.Errorf("partition: log engine: entry %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("partition: log engine: entry %d holds index %d", index, l.Index)
	}
	return nil
}

func (s *engineStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes logs in one synced batch: concurrent batches of other groups share
// its fsync.
func (s *engineStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.e.db.NewBatch()
	defer b.Close()
	var (
		codec wal.BinaryCodec
		buf   bytes.Buffer
	)
	for _, l := range logs {
		buf.Reset()
		if err := codec.Encode(l, &buf); err != nil {
			return fmt.Errorf("partition: log engine: %w", err)
		}
		if err := b.Set(s.logKey(l.Index), buf.Bytes(), nil); err != nil { // Set copies
			return fmt.Errorf("partition: log engine: %w", err)
		}
	}
	if err := b.Commit(s.e.sync); err != nil {
		return fmt.Errorf("partition: log engine: append: %w", err)
	}
	s.mu.Lock()
	if s.first == 0 || logs[0].Index < s.first {
		s.first = logs[0].Index
	}
	if n := logs[len(logs)-1].Index; n > s.last {
		s.last = n
	}
	s.mu.Unlock()
	return nil
}

// DeleteRange deletes the entries min..max inclusive: a prefix after a snapshot, or a
// conflicting suffix on a follower.
func (s *engineStore) DeleteRange(min, max uint64) error {
	if err := s.e.db.DeleteRange(s.logKey(min), s.logKey(max+1), s.e.sync); err != nil {
		return fmt.Errorf("partition: log engine: delete %d-%d: %w", min, max, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case min <= s.first && max >= s.last:
		s.first, s.last = 0, 0
	case min <= s.first:
		s.first = max + 1
	case max >= s.last:
		s.last = min - 1
	}
	return nil
}

func (s *engineStore) Set(key, val []byte) error {
	if err := s.e.db.Set(s.stableKey(key), val, s.e.sync); err != nil {
		return fmt.Errorf("partition: log engine: %w", err)
	}
	return nil
}

// Get reads a stable key. Besides raft, the group's own failover reads its vote through
// it (Partition.currentVote, on a transport goroutine) and may do so while the group
// closes: a closed store answers ErrClosed, and Close waits for a read under way, so the
// engine (closed after its stores) is never read once closed, which pebble answers with a
// panic.
func (s *engineStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	v, closer, err := s.e.db.Get(s.stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("partition: log engine: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

func (s *engineStore) SetUint64(key []byte, val uint64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], val)
	return s.Set(key, v[:])
}

func (s *engineStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("partition: log engine: stable key %q holds %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close releases the group's log (the engine stays open for the others).
func (s *engineStore) Close() error {
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	s.e.mu.Lock()
	delete(s.e.open, s.id)
	s.e.mu.Unlock()
	return nil
}

// pebbleLogger sends pebble's messages to hclog.
type pebbleLogger struct{ l hclog.Logger }

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Info(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...)) // pebble's contract: Fatalf does not return
}
