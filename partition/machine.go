package partition

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// machine adapts *fsm.FSM to raft.BatchingFSM. Raft's FSM goroutine calls Apply,
// ApplyBatch, Snapshot and Restore; the partition's API and tests read the fsm under mu.
type machine struct {
	mu sync.Mutex // guards f (lock order: mu is a leaf)
	f  *fsm.FSM   // owner: raft's FSM goroutine, under mu
	// slab packs the payloads of applied messages (owner: raft's FSM goroutine, under mu).
	slab fsm.Slab
	// sp spills bodies to disk past the node's memory budget (nil: none); memBytes is
	// what this fsm last added to the node's count of bodies in memory (under mu).
	sp       *spiller
	memBytes int64

	now  atomic.Int64 // f.Now() after the last apply: the proposer's time floor
	next atomic.Int64 // f.NextDeadline() after the last apply: the leader timer's target
	txns atomic.Int64 // f.TxnRecords() after the last apply: whether TxnState has anything

	// applied is called after every batch, outside mu, on raft's FSM goroutine: wake says
	// a receive or session waiter may now succeed.
	applied func(wake bool)

	// ctr and clock measure snapshots (set once by Open, before raft starts; nil in
	// tests that build a machine alone).
	ctr   *counters
	clock Clock
}

var _ raft.BatchingFSM = (*machine)(nil)

func newMachine(cfg fsm.Config, applied func(bool)) *machine {
	m := &machine{f: fsm.New(cfg), applied: applied}
	m.now.Store(m.f.Now())
	m.next.Store(m.f.NextDeadline())
	m.txns.Store(int64(m.f.TxnRecords()))
	return m
}

// Apply implements raft.FSM for a single log.
func (m *machine) Apply(l *raft.Log) any {
	return m.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. The response for a command entry is
// []fsm.Result (one per command) or an error if the entry cannot be decoded, which only
// a bug or corruption can cause: every replica then fails the same way.
func (m *machine) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	wake := false
	m.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := fsm.DecodeEntryPacked(l.Data, &m.slab)
		if err != nil {
			out[i] = fmt.Errorf("partition: entry %d: %w", l.Index, err)
			continue
		}
		out[i] = m.f.Apply(e)
		wake = wake || wakes(e)
	}
	m.now.Store(m.f.Now())
	m.next.Store(m.f.NextDeadline())
	m.txns.Store(int64(m.f.TxnRecords()))
	m.syncBodies()
	m.mu.Unlock()
	if m.applied != nil {
		m.applied(wake)
	}
	return out
}

// wakes reports whether an entry may make messages or sessions available to a waiting
// receive or accept.
func wakes(e *fsm.Entry) bool {
	for _, c := range e.Cmds {
		switch c.(type) {
		case *fsm.Enqueue, *fsm.Schedule, *fsm.EnqueueUploaded, *fsm.Settle, *fsm.Tick, *fsm.ReleaseSession,
			*fsm.UpdateEntity, *fsm.Txn, *fsm.TxnCommit, *fsm.TxnAbort:
			return true
		}
	}
	return false
}

// Snapshot freezes the fsm while Apply is paused (raft calls it on the FSM goroutine), so
// Persist, which runs concurrently with later applies, writes a point-in-time image.
// Freezing copies each message's fixed-size record and shares payloads and strings,
// which the fsm never writes into: far less memory, and less time under mu, than
// encoding the whole state here (BenchmarkSnapshot; docs/partition.md).
func (m *machine) Snapshot() (raft.FSMSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &snapshot{v: m.f.Freeze(), ctr: m.ctr, clock: m.clock}
	if m.clock != nil {
		s.start = m.clock.Now()
	}
	return s, nil
}

// Restore replaces the fsm with a snapshot (on start, and when a leader installs one).
func (m *machine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m.mu.Lock()
	err := m.f.Restore(rc)
	if err == nil {
		m.now.Store(m.f.Now())
		m.next.Store(m.f.NextDeadline())
		m.txns.Store(int64(m.f.TxnRecords()))
	}
	m.syncBodies()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	if m.applied != nil {
		m.applied(true)
	}
	return nil
}

// read runs fn on the fsm under the lock.
func (m *machine) read(fn func(f *fsm.FSM)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(m.f)
}

// snapshot is a frozen fsm that Persist encodes straight into raft's sink.
type snapshot struct {
	v     *fsm.Frozen
	ctr   *counters // nil: not measured
	clock Clock
	start time.Time // when Snapshot froze the fsm
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	n, err := s.v.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("partition: snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.ctr != nil && s.clock != nil {
		s.ctr.snapshots.Add(1)
		s.ctr.snapshotNanos.Add(int64(s.clock.Now().Sub(s.start)))
		s.ctr.snapshotBytes.Store(n)
	}
	return nil
}

func (s *snapshot) Release() { s.v = nil }
