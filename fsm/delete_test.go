package fsm

import (
	"slices"
	"testing"
)

func (x *tf) del(c DeleteMessages) Result {
	x.t.Helper()
	return x.one(&c)
}

func (x *tf) peekSeqs(t Target) []int64 { return seqsOf(x.f.Peek(t, 0, 1000)) }

// S-DEL-1..3: in sequence order, up to Max, those enqueued before the cutoff; locked
// messages stay, deferred ones go, scheduled ones go only once enqueued before the cutoff.
func TestDeleteMessagesOrderAndEligibility(t *testing.T) {
	x := newTF(t, queueCfg())
	seqs := x.send(msgOf("a"), msgOf("b"), msgOf("c"), msgOf("d"), msgOf("e"))
	sched := x.send(msgOf("later", withSched(t0+60_000)))[0]
	locked := x.recv(q, 2) // a, b
	if err := x.settle(q, Defer, locked[1]); err != nil {
		t.Fatal(err)
	}
	x.advance(10)
	late := x.send(msgOf("late"))[0] // enqueued at the cutoff: not before it
	cutoff := x.now

	r := x.del(DeleteMessages{Target: q, Max: 2, Before: cutoff})
	if r.Err != nil || r.Count != 2 {
		t.Fatalf("delete 2: %+v", r)
	}
	// a is locked; b (deferred) and c are the two oldest eligible.
	if got, want := x.peekSeqs(q), []int64{seqs[0], seqs[3], seqs[4], sched, late}; !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	r = x.del(DeleteMessages{Target: q, Max: 4000, Before: cutoff})
	if r.Count != 2 || r.Next != 0 {
		t.Fatalf("delete rest: %+v", r)
	}
	if got, want := x.peekSeqs(q), []int64{seqs[0], sched, late}; !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	// The scheduled message is enqueued at its scheduled time (S-TTL-2).
	r = x.del(DeleteMessages{Target: q, Max: 4000, Before: t0 + 60_001})
	if r.Count != 2 {
		t.Fatalf("delete with a later cutoff: %+v", r)
	}
	if got := x.peekSeqs(q); !slices.Equal(got, []int64{seqs[0]}) {
		t.Fatalf("left %v, want only the locked message", got)
	}
	if err := x.settle(q, Complete, locked[0]); err != nil {
		t.Fatalf("the locked message's lock survives: %v", err)
	}
	if st := x.stats(q); st.Total() != 0 || st.Locked != 0 {
		t.Fatalf("stats after: %+v", st)
	}
	if r := x.del(DeleteMessages{Target: q, Max: 10, Before: NeverMs}); r.Err != nil || r.Count != 0 {
		t.Fatalf("delete from an empty queue: %+v", r)
	}
}

func TestDeleteMessagesDeadLetterAndFrom(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"), msgOf("c"))
	ms := x.recv(q, 3)
	if err := x.settle(q, DeadLetter, ms...); err != nil {
		t.Fatal(err)
	}
	r := x.del(DeleteMessages{Target: dlq, Max: 10, Before: NeverMs, From: ms[1].SequenceNumber})
	if r.Err != nil || r.Count != 2 {
		t.Fatalf("delete from the DLQ from seq %d: %+v", ms[1].SequenceNumber, r)
	}
	if got := x.peekSeqs(dlq); !slices.Equal(got, []int64{ms[0].SequenceNumber}) {
		t.Fatalf("DLQ left %v", got)
	}
}

func TestDeleteMessagesSessions(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("a1", withSession("a")), msgOf("b1", withSession("b")), msgOf("a2", withSession("a")),
		msgOf("b2", withSession("b")))
	if r := x.one(&AcceptSession{Target: q, SessionID: "b", Owner: "o"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	got := x.recvSess(q, "b", "o", 1) // b1 locked
	r := x.del(DeleteMessages{Target: q, Max: 10, Before: NeverMs, SessionID: "a"})
	if r.Err != nil || r.Count != 2 {
		t.Fatalf("delete session a: %+v", r)
	}
	r = x.del(DeleteMessages{Target: q, Max: 10, Before: NeverMs})
	if r.Err != nil || r.Count != 1 {
		t.Fatalf("delete across sessions (b1 locked): %+v", r)
	}
	if left := x.peekSeqs(q); !slices.Equal(left, seqsOf(got)) {
		t.Fatalf("left %v, want the locked %v", left, seqsOf(got))
	}
	if slices.Contains(x.f.ListSessions(q), "a") {
		t.Fatalf("session a has no messages and no state left but is listed")
	}
}

func TestDeleteMessagesRefusals(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	for _, c := range []DeleteMessages{
		{Target: q, Max: 0, Before: NeverMs},
		{Target: q, Max: MaxDeleteCount + 1, Before: NeverMs},
	} {
		wantErr(t, x.del(c).Err, ErrBadCommand)
	}
	wantErr(t, x.del(DeleteMessages{Target: q, Max: 1, Before: NeverMs, SessionID: "s"}).Err, ErrSessionNotAllowed)
	wantErr(t, x.del(DeleteMessages{Target: Target{Sub: "nope"}, Max: 1, Before: NeverMs}).Err, ErrNotFound)
	if n := x.stats(q).Active; n != 1 {
		t.Fatalf("a refused delete removed messages: %d left", n)
	}
}

// One DeleteMessages looks at a bounded number of messages: past maxDeleteScan it stops
// and says where to go on (Next), and going on from there finds the rest.
func TestDeleteMessagesScanIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("stores maxDeleteScan messages")
	}
	x := newTF(t, sessCfg())
	for sent := 0; sent < maxDeleteScan; sent += 4000 {
		batch := make([]*Message, 4000)
		for i := range batch {
			batch[i] = msgOf("", withSession("b"))
		}
		x.send(batch...)
	}
	a := x.send(msgOf("a1", withSession("a")))[0]
	r := x.del(DeleteMessages{Target: q, Max: 10, Before: NeverMs, SessionID: "a"})
	if r.Err != nil || r.Count != 0 || r.Next != a {
		t.Fatalf("first entry: %+v, want nothing deleted and Next %d", r, a)
	}
	r = x.del(DeleteMessages{Target: q, Max: 10, Before: NeverMs, SessionID: "a", From: r.Next})
	if r.Err != nil || r.Count != 1 || r.Next != 0 {
		t.Fatalf("going on: %+v, want a1 deleted and the scan finished", r)
	}
}
