package partition

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// discardSink is a raft.SnapshotSink that counts and drops what Persist writes.
type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) Close() error                { return nil }
func (s *discardSink) ID() string                  { return "discard" }
func (s *discardSink) Cancel() error               { return nil }

var _ raft.SnapshotSink = (*discardSink)(nil)

// filledMachine is a machine holding n messages with 1 KiB bodies.
func filledMachine(tb testing.TB, n int) *machine {
	tb.Helper()
	m := newMachine(testQueue(1, 30*time.Second), nil)
	now := time.Now().UnixMilli()
	for i := 0; i < n; i += 500 {
		var batch []*fsm.Message
		for j := i; j < min(i+500, n); j++ {
			batch = append(batch, msg(fmt.Sprintf("%032x", j), make([]byte, 1024)))
		}
		m.read(func(f *fsm.FSM) { f.Apply(&fsm.Entry{Now: now, Cmds: []fsm.Command{&fsm.Enqueue{Messages: batch}}}) })
	}
	return m
}

// BenchmarkSnapshot measures what a raft snapshot of a partition costs the machine:
// held-B/msg is the heap the FSMSnapshot keeps from Snapshot until Release (while
// Persist writes it out, concurrently with applies), and held-ms how long Snapshot
// holds the machine's mutex, during which applies wait.
func BenchmarkSnapshot(b *testing.B) {
	const n = 100_000
	m := filledMachine(b, n)
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		s, err := m.Snapshot()
		held := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		sink := &discardSink{}
		if err := s.Persist(sink); err != nil {
			b.Fatal(err)
		}
		s.Release()
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "held-B/msg")
		b.ReportMetric(float64(held.Microseconds())/1000, "held-ms")
		b.ReportMetric(float64(sink.n)/n, "snapshot-B/msg")
	}
}

// A snapshot taken through the machine restores to the same state, and Persist writes
// the state as of Snapshot even when entries are applied in between.
func TestSnapshotIsPointInTime(t *testing.T) {
	m := filledMachine(t, 1000)
	var want bytes.Buffer
	m.read(func(f *fsm.FSM) {
		if err := f.Snapshot(&want); err != nil {
			t.Fatal(err)
		}
	})
	s, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	m.read(func(f *fsm.FSM) { // applied after Snapshot, before Persist
		f.Apply(&fsm.Entry{Now: time.Now().UnixMilli(), Cmds: []fsm.Command{
			&fsm.Receive{Mode: fsm.ReceiveAndDelete, Max: 10},
			&fsm.Enqueue{Messages: []*fsm.Message{msg("later", []byte("x"))}},
		}})
	})
	var got bytes.Buffer
	if err := s.Persist(&bufSink{Buffer: &got}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("persisted %d bytes differ from the state at Snapshot (%d bytes)", got.Len(), want.Len())
	}
	r := newMachine(testQueue(1, 30*time.Second), nil)
	if err := r.Restore(io.NopCloser(&got)); err != nil {
		t.Fatal(err)
	}
	var d1, d2 [32]byte
	r.read(func(f *fsm.FSM) { d1 = f.Digest() })
	f := fsm.New(testQueue(1, 30*time.Second))
	if err := f.Restore(bytes.NewReader(want.Bytes())); err != nil {
		t.Fatal(err)
	}
	d2 = f.Digest()
	if d1 != d2 {
		t.Fatal("restored state differs from the snapshot's")
	}
}

type bufSink struct{ *bytes.Buffer }

func (s *bufSink) Close() error  { return nil }
func (s *bufSink) ID() string    { return "buf" }
func (s *bufSink) Cancel() error { return nil }
