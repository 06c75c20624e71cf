package cluster

import (
	"errors"
	"fmt"
	"os"

	"github.com/quorumbus/quorumbus/partition"
)

// The node's shared Raft log engine (partition.Engine, Config.Raft.LogStore "shared",
// the default): opened once in New, handed to every partition replica, closed after
// them. A node configured for bolt or wal still opens it when one exists on disk, so
// that replicas created on it before the change keep their logs.

// logStore is the log store new replicas of this node are created on.
func (n *Node) logStore() string {
	if n.cfg.Raft.LogStore == "" {
		return partition.LogStoreShared
	}
	return n.cfg.Raft.LogStore
}

// openLogEngine opens the engine when new replicas use it or old ones may.
func (n *Node) openLogEngine() error {
	dir := partition.EngineDir(n.cfg.DataDir)
	if n.logStore() != partition.LogStoreShared {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	e, err := partition.OpenEngine(partition.EngineConfig{
		Dir: dir, DataDir: n.cfg.DataDir, NoSync: n.cfg.Raft.NoSync, Logger: n.raftLogger("raft-log"),
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.engine = e
	return nil
}

// closeLogEngine closes the engine; every replica must be closed.
func (n *Node) closeLogEngine() error {
	if n.engine == nil {
		return nil
	}
	err := n.engine.Close()
	n.engine = nil
	return err
}

// removeReplicaData deletes a closed replica's directory and its log in the engine.
func (n *Node) removeReplicaData(r *replica) error {
	return partition.RemoveDir(partition.Dir(n.cfg.DataDir, r.entity, r.index), n.engine)
}
