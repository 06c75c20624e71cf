package partition

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
)

// BenchmarkEmptyReceive: a receive (no wait) on an empty queue of a 3-replica group,
// fsync on. It reports the Raft entries each one cost (entries/op, from the leader's
// applied index) besides its latency.
//
//	go test -run '^$' -bench EmptyReceive -benchtime 2000x ./partition/
func BenchmarkEmptyReceive(b *testing.B) {
	c := benchCluster(b, 1)
	_, lp := c.leader(1, 30*time.Second)
	ctx := context.Background()
	before := lp.AppliedIndex()
	b.ResetTimer()
	for range b.N {
		ms, err := lp.Receive(ctx, fsm.Receive{Mode: fsm.PeekLock, Max: 1}, 0)
		if err != nil || len(ms) != 0 {
			b.Fatalf("receive: %v %v", ms, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(lp.AppliedIndex()-before)/float64(b.N), "entries/op")
}

// lastIndex is the leader's last Raft log index and its applied index.
func lastIndex(p *Partition) (last, applied uint64) {
	return p.raft.LastIndex(), p.AppliedIndex()
}

// TestEmptyReceiveCostsNoEntry: an empty long-poll receive, and a next-available accept
// with no free session, append nothing to the Raft log beyond the one fsm.Touch per
// PeekActivityGranularity that records receive attempts as activity (S-IDLE-1); both
// still wake for a message enqueued during the wait and return it. Available and
// SessionAvailable answer the same on the leader and ErrNotLeader on a follower.
func TestEmptyReceiveCostsNoEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 30*time.Second))
	sc := testQueue(2, 30*time.Second)
	sc.Queue.RequiresSession = true
	c.addGroup(sc)
	li, lp := c.leader(1, 20*time.Second)
	_, sp := c.leader(2, 20*time.Second)

	// The first receive attempt on the new queue records its activity: one entry.
	first, _ := lastIndex(lp)
	if ms, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Max: 1}, 0); err != nil || len(ms) != 0 {
		t.Fatalf("first empty receive: %v %v", ms, err)
	}
	last0, applied0 := lastIndex(lp)
	if last0 != first+1 {
		t.Fatalf("the first empty receive moved the log from %d to %d, want one Touch", first, last0)
	}
	if ms, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Max: 1}, 300*time.Millisecond); err != nil || len(ms) != 0 {
		t.Fatalf("empty long-poll: %v %v", ms, err)
	}
	if ms, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Max: 1}, 0); err != nil || len(ms) != 0 {
		t.Fatalf("empty receive: %v %v", ms, err)
	}
	if last, applied := lastIndex(lp); last != last0 || applied != applied0 {
		t.Fatalf("empty receives moved the log from %d (applied %d) to %d (applied %d)", last0, applied0, last, applied)
	}
	if ok, err := lp.Available(fsm.Receive{Max: 1}); err != nil || ok {
		t.Fatalf("Available on an empty queue: %v %v", ok, err)
	}
	var follower *Partition
	for i, p := range c.group(1) {
		if i != li {
			follower = p
		}
	}
	if _, err := follower.Available(fsm.Receive{Max: 1}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Available on a follower: %v", err)
	}

	got := make(chan []*fsm.Message, 1)
	go func() {
		ms, err := lp.Receive(ctxT(t, 30*time.Second), fsm.Receive{Max: 5}, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- ms
	}()
	time.Sleep(200 * time.Millisecond) // let the receive try and block (not required for correctness)
	if last, _ := lastIndex(lp); last != last0 {
		t.Fatalf("a waiting receive appended %d entries", last-last0)
	}
	if _, err := lp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{msg("late", nil)}); err != nil {
		t.Fatal(err)
	}
	select {
	case ms := <-got:
		if len(ms) != 1 || ms[0].MessageID != "late" {
			t.Fatalf("woken receive got %v", ms)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the receive did not wake on the enqueue")
	}
	if last, _ := lastIndex(lp); last != last0+1 { // the enqueue, which carried the waiting receive (parked.go)
		t.Errorf("log moved by %d entries for one enqueue and the receive waiting for it, want 1", last-last0)
	}
	if ok, err := lp.Available(fsm.Receive{Max: 1}); err != nil || ok {
		t.Fatalf("Available with the only message locked: %v %v", ok, err)
	}

	// Next-available accept: no proposal while no session is free.
	sLast0, _ := lastIndex(sp)
	if _, _, err := sp.AcceptSession(ctxT(t, 5*time.Second), fsm.AcceptSession{Owner: "o"}, 300*time.Millisecond); !errors.Is(err, fsm.ErrNoSessionAvailable) {
		t.Fatalf("accept next with no session: %v", err)
	}
	if _, _, err := sp.AcceptSession(ctxT(t, 5*time.Second), fsm.AcceptSession{Owner: "o"}, 0); !errors.Is(err, fsm.ErrNoSessionAvailable) {
		t.Fatalf("accept next with no session, no wait: %v", err)
	}
	if last, _ := lastIndex(sp); last != sLast0 {
		t.Fatalf("empty accepts appended %d entries", last-sLast0)
	}
	if ok, err := sp.SessionAvailable(fsm.Target{}); err != nil || ok {
		t.Fatalf("SessionAvailable with no session: %v %v", ok, err)
	}
	type acc struct {
		id  string
		err error
	}
	accepted := make(chan acc, 1)
	go func() {
		id, _, err := sp.AcceptSession(ctxT(t, 30*time.Second), fsm.AcceptSession{Owner: "o"}, 20*time.Second)
		accepted <- acc{id, err}
	}()
	// The pattern a remote waiter follows: take Changed, ask, wait.
	ch := sp.Changed()
	if ok, err := sp.SessionAvailable(fsm.Target{}); err != nil || ok {
		t.Fatalf("SessionAvailable before the send: %v %v", ok, err)
	}
	s := msg("s-msg", nil)
	s.SessionID = "s7"
	if _, err := sp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{s}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatal("Changed did not fire on the enqueue")
	}
	select {
	case a := <-accepted:
		if a.err != nil || a.id != "s7" {
			t.Fatalf("next-available accept: %q %v", a.id, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the accept did not wake on a session message")
	}
	c.checkConverged(1)
	c.checkConverged(2)
}
