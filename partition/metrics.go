package partition

import (
	"sync/atomic"
	"time"
)

// Observer receives measurements of the group-commit path (Config.Observer). Its
// methods are called on the proposer and completer goroutines and must not block.
// The cluster layer feeds them into node-wide Prometheus histograms: the partition
// package itself exports nothing (it imports no metrics library).
type Observer interface {
	// Batched: one raft entry was submitted carrying cmds commands of about bytes bytes.
	Batched(cmds, bytes int)
	// Committed: an entry submitted d ago was committed on a quorum and applied here
	// (or failed, with ok false). d covers replication, the fsync on each replica of
	// the quorum and the apply: the write latency a sender sees, less queueing.
	Committed(d time.Duration, ok bool)
}

// counters are a replica's running totals (atomic: written by the proposer, the
// completer and raft's snapshot goroutine, read by Metrics).
type counters struct {
	proposals     atomic.Uint64 // commands submitted to raft (in entries)
	entries       atomic.Uint64 // raft entries submitted
	snapshots     atomic.Uint64 // snapshots persisted
	snapshotNanos atomic.Int64  // time spent freezing and persisting them
	snapshotBytes atomic.Int64  // size of the last snapshot persisted
}

// Metrics is a point-in-time view of one replica for monitoring. The counters count
// since the replica was opened (on this node, whatever its role).
type Metrics struct {
	IsLeader     bool // leader, and has caught up after its election (serves reads)
	Term         uint64
	LastIndex    uint64 // last entry in this replica's log
	CommitIndex  uint64 // last entry known committed
	AppliedIndex uint64 // last entry applied to the fsm
	// LastContact is when a follower last heard from its leader (zero on the leader,
	// and before any contact); now on a quiet follower, whose leader is watched at the
	// node level instead (Config.QuiesceAfter).
	LastContact time.Time
	Quiet       bool // the group is quiescent here (Config.QuiesceAfter)

	Proposals         uint64        // commands this replica submitted as leader
	Entries           uint64        // raft entries this replica submitted as leader
	Snapshots         uint64        // snapshots persisted
	SnapshotTime      time.Duration // total time spent taking them
	LastSnapshotBytes int64         // size of the last one (0 before the first)
}

// Metrics returns the replica's current indexes and counters. It takes no lock that
// the write path holds for long and makes no proposal.
func (p *Partition) Metrics() Metrics {
	m := Metrics{
		IsLeader:     p.IsLeader(),
		Term:         p.raft.CurrentTerm(),
		LastIndex:    p.raft.LastIndex(),
		CommitIndex:  p.raft.CommitIndex(),
		AppliedIndex: p.raft.AppliedIndex(),
		Proposals:    p.ctr.proposals.Load(),
		Entries:      p.ctr.entries.Load(),
		Snapshots:    p.ctr.snapshots.Load(),
		SnapshotTime: time.Duration(p.ctr.snapshotNanos.Load()),

		LastSnapshotBytes: p.ctr.snapshotBytes.Load(),
	}
	m.Quiet = p.raft.Quiet()
	if !m.IsLeader {
		m.LastContact = p.raft.LastContact()
		if m.Quiet {
			m.LastContact = time.Now()
		}
	}
	return m
}
