package cluster

import (
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/quorumbus/quorumbus/partition"
)

// logEngine is the node's shared Raft log engine (partition.Engine, Config.Storage.LogStore
// "shared", the default): opened once in Start, handed to every partition replica,
// closed after them. A node configured for bolt or wal still opens it when one exists on
// disk, so that replicas created on it before the change keep their logs. It holds only
// what it needs of the node's configuration; the reconciler uses it to open and delete
// replicas, Close to close it.
type logEngine struct {
	dataDir string
	store   string // Config.Storage.LogStore; "" is shared
	noSync  bool
	// engine is nil when not open; set by open in Start, cleared by close in Close,
	// read by the reconciler in between.
	engine *partition.Engine
}

func newLogEngine(cfg Config) *logEngine {
	return &logEngine{dataDir: cfg.DataDir, store: cfg.Storage.LogStore, noSync: cfg.Storage.NoSync}
}

// logStore is the log store new replicas of this node are created on.
func (l *logEngine) logStore() string {
	if l.store == "" {
		return partition.LogStoreShared
	}
	return l.store
}

// open opens the engine when new replicas use it or old ones may.
func (l *logEngine) open(logger hclog.Logger) error {
	dir := partition.EngineDir(l.dataDir)
	if l.logStore() != partition.LogStoreShared {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	e, err := partition.OpenEngine(partition.EngineConfig{
		Dir: dir, DataDir: l.dataDir, NoSync: l.noSync, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	l.engine = e
	return nil
}

// close closes the engine; every replica must be closed.
func (l *logEngine) close() error {
	if l.engine == nil {
		return nil
	}
	err := l.engine.Close()
	l.engine = nil
	return err
}

// removeReplicaData deletes a closed replica's directory and its log in the engine.
func (l *logEngine) removeReplicaData(r *replica) error {
	return partition.RemoveDir(partition.Dir(l.dataDir, r.entity, r.index), l.engine)
}
