package fsm

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"testing"
)

// S-SES-5: the fsm keeps the time a session's state was last set, and lists the sessions
// whose state was set since a time (get-message-sessions with a last-updated-time).
func TestSessionsUpdatedSince(t *testing.T) {
	x := newTF(t, sessCfg())
	set := func(id, state string) {
		t.Helper()
		if err := x.one(&SetSessionState{Target: q, SessionID: id, State: []byte(state)}).Err; err != nil {
			t.Fatal(err)
		}
	}
	want := func(since int64, ids ...string) {
		t.Helper()
		if got := x.f.SessionsUpdatedSince(q, since); !slices.Equal(got, ids) {
			t.Fatalf("since %+d: %q, want %q", since-t0, got, ids)
		}
	}
	x.send(msgOf("m", withSession("nostate")))
	set("a", "1")
	x.advance(1000)
	set("b", "2")
	x.advance(1000)
	want(t0, "a", "b")
	want(t0+1, "b")
	want(t0+1000, "b")
	want(t0 + 1001)
	set("a", "3") // setting again moves its time
	want(t0+1001, "a")
	set("b", "") // cleared: no state, not listed
	want(t0, "a")
	want(x.now + 1)
	if got := x.f.SessionsUpdatedSince(Target{Sub: "nope"}, 0); got != nil {
		t.Fatalf("unknown target: %q", got)
	}

	// The time survives a snapshot.
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r := New(queueCfg())
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got := r.SessionsUpdatedSince(q, x.now); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("restored: %q", got)
	}
	if got := r.SessionsUpdatedSince(q, x.now+1); len(got) != 0 {
		t.Fatalf("restored, later: %q", got)
	}
}

// A version 1 snapshot (written before session records carried the state's update
// time; testdata/compat/v1-sessions.snap is seedSnapshots()[1] as release 1 wrote it)
// still restores: its states keep their bytes and count as set at the snapshot's time.
func TestRestoreVersion1Snapshot(t *testing.T) {
	b, err := os.ReadFile("testdata/compat/v1-sessions.snap")
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != 1 {
		t.Fatalf("fixture is version %d", b[4])
	}
	f := New(queueCfg())
	if err := f.Restore(bytes.NewReader(b)); err != nil {
		t.Fatalf("restore a version 1 snapshot: %v", err)
	}
	if string(f.SessionState(q, "s2")) != "x" {
		t.Fatalf("state %q", f.SessionState(q, "s2"))
	}
	if got := f.SessionsUpdatedSince(q, f.Now()); !slices.Equal(got, []string{"s2"}) {
		t.Fatalf("since the snapshot's time: %q", got)
	}
	if got := f.SessionsUpdatedSince(q, f.Now()+1); len(got) != 0 {
		t.Fatalf("after the snapshot's time: %q", got)
	}
	// It writes the current version (without transactions, 2), which restores to the same state.
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != snapVersionNoTxn {
		t.Fatalf("rewritten as version %d", buf.Bytes()[4])
	}
	g := New(queueCfg())
	if err := g.Restore(&buf); err != nil || g.Digest() != f.Digest() {
		t.Fatalf("rewritten snapshot: %v", err)
	}
}

// S-SES-5: get-session-state is the lock holder's: anyone else, and anyone once the
// session is released, gets ErrSessionLockLost.
func TestHeldSessionState(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("m", withSession("s")))
	if _, err := x.f.HeldSessionState(q, "s", "o"); !errors.Is(err, ErrSessionLockLost) {
		t.Fatalf("before accept: %v", err)
	}
	x.accept("s", "o")
	if st, err := x.f.HeldSessionState(q, "s", "o"); err != nil || st != nil {
		t.Fatalf("holder, no state: %q %v", st, err)
	}
	if err := x.one(&SetSessionState{Target: q, SessionID: "s", Owner: "o", State: []byte("st")}).Err; err != nil {
		t.Fatal(err)
	}
	if st, err := x.f.HeldSessionState(q, "s", "o"); err != nil || string(st) != "st" {
		t.Fatalf("holder: %q %v", st, err)
	}
	if _, err := x.f.HeldSessionState(q, "s", "other"); !errors.Is(err, ErrSessionLockLost) {
		t.Fatalf("another owner: %v", err)
	}
	x.one(&ReleaseSession{Target: q, SessionID: "s", Owner: "o"})
	if _, err := x.f.HeldSessionState(q, "s", "o"); !errors.Is(err, ErrSessionLockLost) {
		t.Fatalf("after release: %v", err)
	}
	if _, err := x.f.HeldSessionState(Target{Sub: "nope"}, "s", "o"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown target: %v", err)
	}
}
