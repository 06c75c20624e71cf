package fsm

import "testing"

// wantReceivable checks Receivable for req and, when it says no, that applying req (at
// the current time) indeed returns nothing.
func (x *tf) wantReceivable(req Receive, want bool) {
	x.t.Helper()
	if got := x.f.Receivable(req); got != want {
		x.t.Fatalf("Receivable(%+v) = %v, want %v", req, got, want)
	}
	if !want {
		req.Max = 10
		if r := x.one(&req); len(r.Messages) != 0 {
			x.t.Fatalf("Receivable said no, but receive returned %v", bodies(r.Messages))
		}
	}
}

func (x *tf) wantSessionAvailable(t Target, want bool) {
	x.t.Helper()
	if got := x.f.SessionAvailable(t); got != want {
		x.t.Fatalf("SessionAvailable(%+v) = %v, want %v", t, got, want)
	}
}

// Receivable on a queue: true exactly while a message is available; locked, deferred,
// scheduled and expired messages are not, and deadlines count only once applied.
func TestReceivableQueue(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.LockDurationMs = 1000
	x := newTF(t, cfg)
	rq := Receive{Target: q, Max: 1}
	x.wantReceivable(rq, false)
	x.send(msgOf("a"))
	x.wantReceivable(rq, true)
	x.recv(q, 1)
	x.wantReceivable(rq, false) // locked
	x.advance(1500)
	if x.f.Receivable(rq) { // the lock has expired by the clock, but no entry applied it yet
		t.Fatal("Receivable before the lock expiry was applied")
	}
	x.tick()
	x.wantReceivable(rq, true) // S-LOCK-4
	a := x.recv(q, 1)
	if err := x.settle(q, Defer, a...); err != nil {
		t.Fatal(err)
	}
	x.wantReceivable(rq, false) // deferred only (S-LOCK-7)
	if r := x.one(&ReceiveDeferred{Target: q, SeqNos: seqsOf(a), Salt: 9}); r.Err != nil || len(r.Messages) != 1 {
		t.Fatalf("receive deferred: %+v", r)
	}
	x.send(msgOf("later", withSched(x.now+5000)))
	x.wantReceivable(rq, false) // scheduled (S-SCH-1)
	x.advance(5000)
	x.tick()
	x.wantReceivable(rq, true)
	if err := x.settle(q, Complete, x.recv(q, 1)...); err != nil {
		t.Fatal(err)
	}
	x.send(msgOf("ttl", withTTL(1000)))
	x.wantReceivable(rq, true)
	x.advance(1000)
	x.tick()
	x.wantReceivable(rq, false) // expired and dropped (S-TTL-3)
}

// Receivable on dead-letter and subscription targets, and true when the receive would
// fail so that the caller proposes it and sees the error.
func TestReceivableTargetsAndErrors(t *testing.T) {
	x := newTF(t, queueCfg())
	x.wantReceivable(Receive{Target: dlq}, false)
	x.send(msgOf("a"), msgOf("b"))
	if err := x.settle(q, DeadLetter, x.recv(q, 1)...); err != nil {
		t.Fatal(err)
	}
	x.wantReceivable(Receive{Target: dlq}, true)
	x.recv(q, 1)
	x.wantReceivable(Receive{Target: q}, false)
	x.wantReceivable(Receive{Target: dlq}, true)
	x.recv(dlq, 1)
	x.wantReceivable(Receive{Target: dlq}, false)
	if !x.f.Receivable(Receive{Target: Target{Sub: "nope"}}) {
		t.Error("a receive from an unknown target fails: Receivable must say yes")
	}
	if !x.f.Receivable(Receive{Target: q, SessionID: "s"}) {
		t.Error("a session receive on a queue without sessions fails: Receivable must say yes")
	}
	cfg := queueCfg()
	cfg.Queue.Status = StatusReceiveDisabled
	x.one(&UpdateEntity{Config: cfg})
	if !x.f.Receivable(Receive{Target: q}) {
		t.Error("a receive from a receive-disabled queue fails: Receivable must say yes")
	}

	y := newTF(t, topicCfg("a", "b"))
	sa, sb := Target{Sub: "a"}, Target{Sub: "b"}
	y.wantReceivable(Receive{Target: sa}, false)
	y.send(msgOf("m"))
	y.wantReceivable(Receive{Target: sa}, true)
	y.recv(sa, 1)
	y.wantReceivable(Receive{Target: sa}, false)
	y.wantReceivable(Receive{Target: sb}, true)
	y.wantReceivable(Receive{Target: Target{Sub: "b", DLQ: true}}, false)
	if !y.f.Receivable(Receive{Target: Target{Sub: "zz"}}) {
		t.Error("unknown subscription: Receivable must say yes")
	}
}

// Receivable in a session, and SessionAvailable: a session held by another owner is
// neither available nor receivable by a non-holder (whose receive fails: yes); sessions
// with only deferred or locked messages are not available; release and session-lock
// expiry make a session available again.
func TestReceivableSessionsAndSessionAvailable(t *testing.T) {
	cfg := sessCfg()
	cfg.Queue.LockDurationMs = 1000
	x := newTF(t, cfg)
	x.wantSessionAvailable(q, false)
	if !x.f.Receivable(Receive{Target: q}) {
		t.Error("a receive without a session on a session queue fails: Receivable must say yes")
	}
	x.send(msgOf("a1", withSession("a")))
	x.wantSessionAvailable(q, true)
	if !x.f.Receivable(Receive{Target: q, SessionID: "a", Owner: "o1"}) {
		t.Error("receiving from a session not held fails: Receivable must say yes")
	}
	if r := x.accept("", "o1"); r.SessionID != "a" {
		t.Fatalf("accept next: %+v", r)
	}
	x.wantSessionAvailable(q, false) // held by o1
	x.wantReceivable(Receive{Target: q, SessionID: "a", Owner: "o1"}, true)
	if !x.f.Receivable(Receive{Target: q, SessionID: "a", Owner: "o2"}) {
		t.Error("o2's receive from o1's session fails: Receivable must say yes")
	}
	a := x.recvSess(q, "a", "o1", 1)
	x.wantReceivable(Receive{Target: q, SessionID: "a", Owner: "o1"}, false)
	if r := x.one(&Settle{Target: q, Tokens: []LockToken{a[0].LockToken}, Disposition: Defer, SessionID: "a", Owner: "o1"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	x.wantReceivable(Receive{Target: q, SessionID: "a", Owner: "o1"}, false) // deferred only
	x.send(msgOf("b1", withSession("b")))
	x.wantSessionAvailable(q, true)
	if r := x.accept("", "o2"); r.SessionID != "b" {
		t.Fatalf("accept next: %+v", r)
	}
	x.wantSessionAvailable(q, false)
	x.recvSess(q, "b", "o2", 1)
	if r := x.one(&ReleaseSession{Target: q, SessionID: "a", Owner: "o1"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	x.wantSessionAvailable(q, false) // a is free but has only a deferred message
	x.send(msgOf("a2", withSession("a")), msgOf("b2", withSession("b")))
	x.wantSessionAvailable(q, true) // a: free with a2
	if r := x.accept("a", "o3"); r.Err != nil {
		t.Fatal(r.Err)
	}
	x.wantSessionAvailable(q, false) // b is held by o2 with b2 available
	x.advance(1500)
	if x.f.SessionAvailable(q) {
		t.Fatal("SessionAvailable before the session-lock expiry was applied")
	}
	x.tick()
	x.wantSessionAvailable(q, true) // S-SES-6: the expired sessions are free again
	if r := x.accept("", "o4"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !x.f.SessionAvailable(Target{DLQ: true}) || !newTF(t, queueCfg()).f.SessionAvailable(q) {
		t.Error("accepting a session where there are none fails: SessionAvailable must say yes")
	}
}
