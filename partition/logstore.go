package partition

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/segment"
	"go.etcd.io/bbolt"
)

// Log stores (Config.LogStore): what keeps a group's raft log and stable store (term,
// vote) on disk. Snapshots are files either way.
const (
	// LogStoreBolt is raft-boltdb (bbolt) in <Dir>/raft.db. A bbolt commit writes the
	// data pages and then the meta page, each fdatasynced: two fsyncs per raft append.
	LogStoreBolt = "bolt"
	// LogStoreWAL is hashicorp/raft-wal in <Dir>/wal/: append-only segment files, one
	// fsync per raft append (the stable store and the segment list live in a small
	// bbolt file, written only on votes, term changes, segment rotation and truncation).
	// It needs raft-wal v0.4.1 or later: v0.4.0 could not reopen a log after a tail
	// truncation (TestWALTailTruncationSurvivesRestart) and left its bbolt file open.
	LogStoreWAL = "wal"
	// LogStoreShared is the node's Engine (engine.go): one pebble database in
	// <data>/raft-log holding the logs of all the node's groups that use it, whose
	// concurrent appends share one fsync. The group's directory holds only raft-log.id.
	LogStoreShared = "shared"
)

// walSegmentBytes is the size of one raft-wal segment file. raft-wal preallocates each
// segment in full when it creates it (its default is 64 MiB) and every group keeps one
// open, so this is disk a node reserves per partition replica; at 8 MiB a rotation (a
// bbolt commit and a new file) still comes only every few thousand 1 KiB appends.
const walSegmentBytes = 8 << 20

// logStore is a group's raft LogStore and StableStore in one.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// openLogStore opens the group's log store in dir. A directory that already holds one
// keeps it, whatever want says, so that changing Config.LogStore never hides a group's
// log (there is no migration): want chooses only for a group new on this node. A
// replica written by a release before the shared engine (raft.db) therefore stays on
// bolt. e is the node's Engine, needed for LogStoreShared.
func openLogStore(dir, want string, e *Engine, noSync bool, logger hclog.Logger) (logStore, error) {
	boltPath, walDir := filepath.Join(dir, "raft.db"), filepath.Join(dir, "wal")
	var found []string
	for kind, path := range map[string]string{LogStoreBolt: boltPath, LogStoreWAL: walDir, LogStoreShared: filepath.Join(dir, engineIDFile)} {
		ok, err := exists(path)
		if err != nil {
			return nil, err
		}
		if ok {
			found = append(found, kind)
		}
	}
	kind := want
	switch {
	case len(found) > 1:
		return nil, fmt.Errorf("partition: %s holds more than one raft log (%v): which is the group's is unknown", dir, found)
	case len(found) == 1:
		kind = found[0]
	case kind == "":
		kind = LogStoreBolt
	}
	if kind != want && want != "" {
		logger.Info("keeping the log store this replica was created with", "log_store", kind, "configured", want)
	}
	switch kind {
	case LogStoreShared:
		if e == nil {
			return nil, fmt.Errorf("partition: %s: the replica's log is in the node's log engine, which is not open (Config.Engine)", dir)
		}
		return e.openStore(dir)
	case LogStoreBolt:
		s, err := raftboltdb.New(raftboltdb.Options{
			Path:        boltPath,
			NoSync:      noSync,
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		})
		if err != nil {
			return nil, fmt.Errorf("partition: open %s: %w", boltPath, err)
		}
		return s, nil
	case LogStoreWAL:
		// raft-wal always fsyncs: NoSync does not apply.
		if err := os.MkdirAll(walDir, 0o750); err != nil {
			return nil, fmt.Errorf("partition: %w", err)
		}
		w, err := wal.Open(walDir, wal.WithSegmentSize(walSegmentBytes), wal.WithLogger(logger.Named("wal")))
		if err != nil {
			return nil, fmt.Errorf("partition: open %s: %w", walDir, err)
		}
		return walStore{w}, nil
	}
	return nil, fmt.Errorf("partition: unknown log store %q", kind)
}

// walStore refuses an entry raft-wal could not read back: v0.4.1 writes an entry of
// any size but reports one above segment.MaxEntrySize (64 MiB) as corrupt when it reads
// it, and at start-up. Group commit keeps entries near MaxBatchBytes and chunking keeps
// bodies to ChunkBytes, so only a single proposal that large (e.g. a batch send of that
// many bytes with ChunkBytes 0) can reach it; the append then fails instead.
type walStore struct{ *wal.WAL }

func (s walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s walStore) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		// The binary codec adds varints and a timestamp: well under 64 bytes.
		if n := len(l.Data) + len(l.Extensions) + 64; n > segment.MaxEntrySize {
			return fmt.Errorf("partition: raft entry %d of %d bytes is above raft-wal's %d", l.Index, n, segment.MaxEntrySize)
		}
	}
	return s.WAL.StoreLogs(logs)
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("partition: %w", err)
	}
	return true, nil
}
