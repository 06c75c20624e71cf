package fsm

import (
	"bytes"
	"errors"
	"testing"
)

// S-LOCK-12: the repeat of a settlement that applied (its answer lost with a partition
// leader) gets the first outcome while the ended lock would still have held; anything
// else done with the token is lock-lost (S-LOCK-9).
func TestS_LOCK_12_RepeatedSettlement(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"), msgOf("c"))
	got := x.recv(q, 2)
	a, b := got[0], got[1]

	// The first attempt commits; its answer is lost; the retry must not say lock-lost.
	if err := x.settle(q, Complete, a); err != nil {
		t.Fatal(err)
	}
	if err := x.settle(q, Complete, a); err != nil {
		t.Fatalf("repeated complete: %v, want the first outcome (ok)", err)
	}
	if st := x.stats(q); st.Active != 2 || st.Locked != 1 {
		t.Fatalf("after the repeat: stats %+v, want 2 messages, 1 locked (nothing applied twice)", st)
	}
	for _, d := range []Disposition{Abandon, DeadLetter, Defer, Release} {
		wantErr(t, x.settle(q, d, a), ErrLockLost)
	}
	wantErr(t, x.one(&RenewLock{Target: q, Tokens: []LockToken{a.LockToken}}).Err, ErrLockLost)
	other := *a
	other.LockToken[5] ^= 1 // another salt: not the lock that was settled
	wantErr(t, x.settle(q, Complete, &other), ErrLockLost)
	wantErr(t, x.settle(Target{Sub: "nope"}, Complete, a), ErrNotFound)

	// An abandon repeated counts one delivery attempt, not two.
	if err := x.settle(q, Abandon, b); err != nil {
		t.Fatal(err)
	}
	if err := x.settle(q, Abandon, b); err != nil {
		t.Fatalf("repeated abandon: %v", err)
	}
	if again := x.recv(q, 1); len(again) != 1 || string(again[0].Payload) != "b" || again[0].DeliveryCount != 2 {
		t.Fatalf("after a repeated abandon: %+v, want b with DeliveryCount 2", again)
	}
	// A batch that repeats one token and settles another answers both.
	c := x.recv(q, 1)[0]
	r := x.one(&Settle{Target: q, Tokens: []LockToken{a.LockToken, c.LockToken}, Disposition: Complete})
	if r.Err != nil || r.TokenErrs[0] != nil || r.TokenErrs[1] != nil {
		t.Fatalf("batch with a repeat: %v %v", r.Err, r.TokenErrs)
	}

	// A replica restored from a snapshot taken now forgets (the memory is not in
	// snapshots, which keep their format): the repeat is lock-lost there.
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	rf := New(Config{Kind: KindQueue})
	if err := rf.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	res := rf.Apply(&Entry{Now: x.now, Cmds: []Command{&Settle{Target: q, Tokens: []LockToken{a.LockToken}, Disposition: Complete}}})
	wantErr(t, res[0].Err, ErrLockLost)

	// Once the lock would have expired, the repeat is lock-lost like any ended lock, and
	// the memory is gone.
	x.advance(queueCfg().Queue.LockDurationMs + 1)
	x.tick()
	wantErr(t, x.settle(q, Complete, a), ErrLockLost)
	if len(x.f.settled) != 0 || len(x.f.settledq) != 0 {
		t.Fatalf("%d settlements still remembered after their locks expired", len(x.f.settled))
	}
}

// S-LOCK-12 on a session: the repeat succeeds while the session lock holds.
func TestS_LOCK_12_RepeatedSessionSettlement(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("a", withSession("s")), msgOf("b", withSession("s")))
	if r := x.accept("s", "o"); r.Err != nil {
		t.Fatal(r.Err)
	}
	m := x.recvSess(q, "s", "o", 1)[0]
	settle := &Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete, SessionID: "s", Owner: "o"}
	for i := range 2 {
		if err := x.one(settle).Err; err != nil {
			t.Fatalf("complete %d: %v", i+1, err)
		}
	}
	abandon := *settle
	abandon.Disposition = Abandon
	if err := x.one(&abandon).Err; !errors.Is(err, ErrSessionLockLost) {
		t.Fatalf("abandon after complete: %v, want session lock lost", err)
	}
}
