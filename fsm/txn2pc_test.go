package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

const txnDeadline = t0 + 30_000

// prepareOf is a prepare of a receive-complete-send on q.
func prepareOf(id string, settle *Message, send ...*Message) *TxnPrepare {
	p := &TxnPrepare{ID: id, Coordinator: 3, Deadline: txnDeadline}
	if len(send) > 0 {
		p.Cmds = append(p.Cmds, &Enqueue{Messages: send})
	}
	if settle != nil {
		p.Cmds = append(p.Cmds, &Settle{Target: q, Tokens: []LockToken{settle.LockToken}, Disposition: Complete})
	}
	return p
}

// TestTxnPrepareValidatesLikeTxn: a prepare that Txn would refuse is refused for the
// same reason and holds nothing: the lock stays the client's, nothing is reserved.
func TestTxnPrepareValidatesLikeTxn(t *testing.T) {
	cases := []struct {
		name string
		bad  func(x *tf, locked *Message) Command
		want error
	}{
		{"lost lock", func(x *tf, _ *Message) Command {
			var tok LockToken
			tok[15] = 99
			return &Settle{Target: q, Tokens: []LockToken{tok}, Disposition: Complete}
		}, ErrLockLost},
		{"settled twice", func(x *tf, m *Message) Command {
			return &Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: DeadLetter}
		}, ErrLockLost},
		{"message too large", func(x *tf, _ *Message) Command {
			return &Enqueue{Messages: []*Message{{Payload: make([]byte, 2048), Properties: rule.Properties{Size: 2048}}}}
		}, ErrMessageTooLarge},
		{"over quota", func(x *tf, _ *Message) Command {
			return &Enqueue{Messages: []*Message{{Payload: make([]byte, 1000), Properties: rule.Properties{Size: 1000}}}}
		}, ErrQuotaExceeded},
		{"unknown subscription", func(x *tf, _ *Message) Command {
			return &Settle{Target: Target{Sub: "nope"}, Disposition: Complete}
		}, ErrNotFound},
		{"not a transactional command", func(x *tf, _ *Message) Command {
			return &Purge{Target: q}
		}, ErrBadCommand},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := queueCfg()
			cfg.MaxMessageSizeBytes = 1024
			cfg.MaxSizeBytes = 1000
			x := newTF(t, cfg)
			x.send(msgOf("a"))
			m := x.recv(q, 1)[0]
			p := prepareOf("t1", m, msgOf("sent"))
			p.Cmds = append(p.Cmds, tc.bad(x, m))
			wantErr(t, x.one(p).Err, tc.want)
			if got := x.f.PreparedTxns(); len(got) != 0 {
				t.Fatalf("a refused prepare is held: %+v", got)
			}
			// Nothing reserved: a send of what the quota leaves still fits.
			if r := x.one(&Enqueue{Messages: []*Message{{Payload: make([]byte, 990), Properties: rule.Properties{Size: 990}}}}); r.Err != nil {
				t.Fatalf("send after a refused prepare: %v", r.Err)
			}
			if err := x.settle(q, Complete, m); err != nil {
				t.Fatalf("complete after a refused prepare: %v", err)
			}
		})
	}
	t.Run("past its deadline", func(t *testing.T) {
		x := newTF(t, queueCfg())
		x.send(msgOf("a"))
		m := x.recv(q, 1)[0]
		p := prepareOf("t1", m)
		p.Deadline = x.now
		wantErr(t, x.one(p).Err, ErrTxnTimeout)
		if err := x.settle(q, Complete, m); err != nil {
			t.Fatalf("complete after a refused prepare: %v", err)
		}
	})
}

// TestTxnPrepareHolds: between prepare and commit, the settled message stays locked
// past its lock duration and cannot be settled by anyone else, the send is neither
// receivable, peekable nor counted, but its bytes count toward the quota; the commit
// then applies both, once.
func TestTxnPrepareHolds(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxSizeBytes = 1000
	x := newTF(t, cfg)
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	big := &Message{Payload: []byte("big"), Properties: rule.Properties{Size: 600}}
	if r := x.one(prepareOf("t1", m, big)); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}
	if r := x.one(prepareOf("t1", m, big)); r.Err != nil { // a repeat changes nothing
		t.Fatalf("repeated prepare: %v", r.Err)
	}
	if got := x.f.PreparedTxns(); len(got) != 1 || got[0] != (PreparedTxn{ID: "t1", Coordinator: 3, Deadline: txnDeadline}) {
		t.Fatalf("PreparedTxns = %+v", got)
	}
	x.advance(cfg.Queue.LockDurationMs * 3) // well past the lock's expiry
	x.tick()
	if s := x.stats(q); s.Active != 1 || s.Locked != 1 {
		t.Fatalf("while prepared: %+v, want the held message alone, locked", s)
	}
	if got := x.recv(q, 10); len(got) != 0 {
		t.Fatalf("received %v while prepared", bodies(got))
	}
	if got := x.f.Peek(q, 0, 10); len(got) != 1 || string(got[0].Payload) != "a" {
		t.Fatalf("peek while prepared: %v", bodies(got))
	}
	wantErr(t, x.settle(q, Abandon, m), ErrLockLost)
	wantErr(t, x.one(&Txn{Cmds: []Command{&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete}}}).Err, ErrLockLost)
	if r := x.one(&RenewLock{Target: q, Tokens: []LockToken{m.LockToken}}); r.Err != nil {
		t.Fatalf("renewing a held lock: %v", r.Err)
	}
	// The reserved 600 bytes count: 500 more exceed the 1000-byte quota.
	wantErr(t, x.one(&Enqueue{Messages: []*Message{{Payload: []byte("x"), Properties: rule.Properties{Size: 500}}}}).Err, ErrQuotaExceeded)

	r := x.one(&TxnCommit{ID: "t1"})
	if r.Err != nil || len(r.SeqNos) != 1 || r.SeqNos[0] != 2 {
		t.Fatalf("commit: %v, SeqNos %v", r.Err, r.SeqNos)
	}
	if got := x.f.PreparedTxns(); len(got) != 0 {
		t.Fatalf("still prepared after commit: %+v", got)
	}
	if got := bodies(x.f.Peek(q, 0, 10)); len(got) != 1 || got[0] != "big" {
		t.Fatalf("after commit the queue holds %v, want [big]", got)
	}
	for _, c := range []Command{&TxnCommit{ID: "t1"}, &TxnAbort{ID: "t1"}} { // idempotent, and too late
		if r := x.one(c); r.Err != nil {
			t.Fatalf("%T after commit: %v", c, r.Err)
		}
	}
	if got := bodies(x.recv(q, 10)); len(got) != 1 || got[0] != "big" {
		t.Fatalf("after commit and repeats received %v, want [big]", got)
	}
}

// TestTxnAbortReleases: an abort drops the held sends, frees their quota and returns the
// held message as an abandon would; commit and abort afterwards change nothing.
func TestTxnAbortReleases(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxSizeBytes = 1000
	x := newTF(t, cfg)
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	if r := x.one(prepareOf("t1", m, &Message{Payload: []byte("big"), Properties: rule.Properties{Size: 600}})); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}
	for i := 0; i < 2; i++ {
		if r := x.one(&TxnAbort{ID: "t1"}); r.Err != nil {
			t.Fatalf("abort %d: %v", i, r.Err)
		}
	}
	if r := x.one(&TxnCommit{ID: "t1"}); r.Err != nil {
		t.Fatalf("commit after abort: %v", r.Err)
	}
	got := x.recv(q, 10)
	if len(got) != 1 || string(got[0].Payload) != "a" || got[0].DeliveryCount != 2 {
		t.Fatalf("after abort received %v (DeliveryCount %v), want [a] delivered twice", bodies(got), got)
	}
	// The quota is free again.
	if r := x.one(&Enqueue{Messages: []*Message{{Payload: []byte("x"), Properties: rule.Properties{Size: 900}}}}); r.Err != nil {
		t.Fatalf("send after abort: %v", r.Err)
	}
}

// TestTxnPreparedSessionMessage: a held session message outlives its session's lock and
// is completed by the commit even though its session is then held by someone else.
func TestTxnPreparedSessionMessage(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.RequiresSession = true
	x := newTF(t, cfg)
	x.send(msgOf("a", withSession("s1")), msgOf("b", withSession("s1")))
	if r := x.one(&AcceptSession{Target: q, SessionID: "s1", Owner: "c1"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	m := x.recvSess(q, "s1", "c1", 1)[0]
	p := &TxnPrepare{ID: "t1", Deadline: txnDeadline, Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete, SessionID: "s1", Owner: "c1"}}}
	if r := x.one(p); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}
	x.advance(cfg.Queue.LockDurationMs + 1) // the session lock expires
	x.tick()
	if r := x.one(&AcceptSession{Target: q, SessionID: "s1", Owner: "c2"}); r.Err != nil {
		t.Fatalf("accept by another: %v", r.Err)
	}
	if got := bodies(x.recvSess(q, "s1", "c2", 10)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("the other holder received %v, want [b]", got)
	}
	if r := x.one(&TxnCommit{ID: "t1"}); r.Err != nil {
		t.Fatalf("commit: %v", r.Err)
	}
	if got := bodies(x.f.Peek(q, 0, 10)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("after commit the queue holds %v, want [b]", got)
	}
}

// TestTxnDecide: the first decision stands; a commit after the deadline records abort.
func TestTxnDecide(t *testing.T) {
	x := newTF(t, queueCfg())
	parts := []uint32{3, 5}
	cases := []struct {
		cmd       *TxnDecide
		want      error
		committed bool
	}{
		{&TxnDecide{ID: "c", Commit: true, Deadline: txnDeadline, Participants: parts}, nil, true},
		{&TxnDecide{ID: "c", Commit: true, Deadline: txnDeadline, Participants: parts}, nil, true},
		{&TxnDecide{ID: "c", Commit: false, Deadline: txnDeadline}, ErrTxnDecided, true},
		{&TxnDecide{ID: "a", Commit: false, Deadline: txnDeadline}, nil, false},
		{&TxnDecide{ID: "a", Commit: true, Deadline: txnDeadline, Participants: parts}, ErrTxnDecided, false},
		{&TxnDecide{ID: "late", Commit: true, Deadline: t0, Participants: parts}, ErrTxnTimeout, false},
		{&TxnDecide{ID: "late", Commit: true, Deadline: txnDeadline, Participants: parts}, ErrTxnDecided, false},
	}
	for i, tc := range cases {
		r := x.one(tc.cmd)
		if tc.want == nil && r.Err != nil || tc.want != nil && !errors.Is(r.Err, tc.want) || r.Committed != tc.committed {
			t.Fatalf("case %d %+v: err %v committed %v, want %v %v", i, tc.cmd, r.Err, r.Committed, tc.want, tc.committed)
		}
	}
	ds := x.f.TxnDecisions()
	if len(ds) != 3 || ds[0].ID != "a" || ds[1].ID != "c" || !ds[1].Commit || len(ds[1].Participants) != 2 || ds[2].Commit {
		t.Fatalf("TxnDecisions = %+v", ds)
	}
	x.one(&TxnForget{ID: "c"})
	x.one(&TxnForget{ID: "c"})
	if ds := x.f.TxnDecisions(); len(ds) != 2 {
		t.Fatalf("after forget: %+v", ds)
	}
}

// TestTxnPreparedSnapshot: a snapshot taken while a transaction is prepared (version 3)
// restores it: the message stays held, the quota reserved, and a commit on the restored
// fsm gives the same state as on the original. Without transactions the snapshot is
// written as version 2.
func TestTxnPreparedSnapshot(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"))
	ms := x.recv(q, 2)
	if r := x.one(prepareOf("t1", ms[0], msgOf("c", withID("m1")))); r.Err != nil {
		t.Fatal(r.Err)
	}
	x.one(&TxnDecide{ID: "t0", Commit: true, Deadline: txnDeadline, Participants: []uint32{3, 9}})
	for _, frozen := range []bool{false, true} {
		var buf bytes.Buffer
		if frozen {
			if _, err := x.f.Freeze().WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
		} else if err := x.f.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if v := buf.Bytes()[4]; v != 3 {
			t.Fatalf("snapshot version %d with a prepared transaction, want 3", v)
		}
		r := New(queueCfg())
		if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if r.Digest() != x.f.Digest() {
			t.Fatal("restored digest differs")
		}
		if got := r.PreparedTxns(); len(got) != 1 || got[0].ID != "t1" {
			t.Fatalf("restored PreparedTxns = %+v", got)
		}
		if got := r.TxnDecisions(); len(got) != 1 || got[0].ID != "t0" || !got[0].Commit {
			t.Fatalf("restored TxnDecisions = %+v", got)
		}
		// Lock expiry on the restored copy leaves the held message alone.
		e := &Entry{Now: x.now + 10*DefaultQueueConfig().LockDurationMs, Cmds: []Command{&Tick{}, &TxnCommit{ID: "t1"}}}
		r.Apply(e)
		if got := bodies(r.Peek(q, 0, 10)); len(got) != 2 || got[0] != "b" || got[1] != "c" {
			t.Fatalf("restored, expired and committed: %v, want [b c]", got)
		}
	}
	x.one(&TxnAbort{ID: "t1"})
	x.one(&TxnForget{ID: "t0"})
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[4]; v != snapVersionNoTxn {
		t.Fatalf("snapshot version %d without transactions, want %d", v, snapVersionNoTxn)
	}
}

// TestTxnDecode2PC: the two-phase commands round-trip (tf checks each entry), nest no
// transaction, and fail on any truncation.
func TestTxnDecode2PC(t *testing.T) {
	cmds := []Command{
		&TxnPrepare{ID: "t", Coordinator: 1 << 31, Deadline: t0, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("x")}}}},
		&TxnDecide{ID: "t", Commit: true, Deadline: t0, Participants: []uint32{1, 2}},
		&TxnCommit{ID: "t"}, &TxnAbort{ID: "t"}, &TxnForget{ID: "t"},
	}
	b := AppendEntry(nil, &Entry{Now: t0, Cmds: cmds})
	e, err := DecodeEntry(b)
	if err != nil || len(e.Cmds) != len(cmds) {
		t.Fatalf("decode: %v", err)
	}
	if p := e.Cmds[0].(*TxnPrepare); p.Coordinator != 1<<31 || p.ID != "t" || len(p.Cmds) != 1 {
		t.Fatalf("decoded prepare %+v", p)
	}
	for i := range b {
		if _, err := DecodeEntry(b[:i]); err == nil {
			t.Fatalf("DecodeEntry of %d of %d bytes succeeded", i, len(b))
		}
	}
	nested := AppendEntry(nil, &Entry{Now: t0, Cmds: []Command{&TxnPrepare{ID: "t", Cmds: []Command{&Txn{}}}}})
	if _, err := DecodeEntry(nested); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("nested transaction in a prepare: %v, want ErrBadCommand", err)
	}
}

// TestTxnPreparedMessagePurged: a held message removed meanwhile (a purge) is skipped by
// the commit, and the state with the prepared record still snapshots and restores (tf).
func TestTxnPreparedMessagePurged(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	if r := x.one(prepareOf("t1", m, msgOf("b"))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := x.one(&Purge{Target: q}); r.Err != nil || r.Count != 1 {
		t.Fatalf("purge: %v, %d", r.Err, r.Count)
	}
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if err := New(queueCfg()).Restore(&buf); err != nil {
		t.Fatalf("restore with a prepared record whose message is gone: %v", err)
	}
	if r := x.one(&TxnCommit{ID: "t1"}); r.Err != nil {
		t.Fatalf("commit: %v", r.Err)
	}
	if got := bodies(x.f.Peek(q, 0, 10)); fmt.Sprint(got) != "[b]" {
		t.Fatalf("after commit: %v, want [b]", got)
	}
}
