package fsm

import (
	"errors"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// TestTxnCommitsAll: a receive-complete-send transaction applies every operation: the
// completed message is gone, the sent one is available, the abandoned one is back.
func TestTxnCommitsAll(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"))
	got := x.recv(q, 2)
	if len(got) != 2 {
		t.Fatalf("received %d, want 2", len(got))
	}
	r := x.one(&Txn{Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{got[0].LockToken}, Disposition: Complete},
		&Enqueue{Messages: []*Message{msgOf("c")}},
		&Settle{Target: q, Tokens: []LockToken{got[1].LockToken}, Disposition: Abandon},
	}})
	if r.Err != nil {
		t.Fatalf("txn: %v", r.Err)
	}
	if len(r.SeqNos) != 1 || r.SeqNos[0] != 3 {
		t.Fatalf("SeqNos = %v, want [3]", r.SeqNos)
	}
	rest := x.recv(q, 10)
	if b := bodies(rest); len(b) != 2 || b[0] != "b" || b[1] != "c" {
		t.Fatalf("after commit the queue holds %v, want [b c]", b)
	}
	if rest[0].DeliveryCount != 2 {
		t.Fatalf("abandoned message DeliveryCount = %d, want 2", rest[0].DeliveryCount)
	}
}

// TestTxnAllOrNothing: when one operation of a transaction cannot apply, none does: the
// valid settlement keeps its lock and the send stores nothing.
func TestTxnAllOrNothing(t *testing.T) {
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
			x := newTF(t, cfg)
			x.send(msgOf("a"))
			m := x.recv(q, 1)[0]
			r := x.one(&Txn{Cmds: []Command{
				&Enqueue{Messages: []*Message{msgOf("sent")}},
				&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete},
				tc.bad(x, m),
			}})
			wantErr(t, r.Err, tc.want)
			if len(r.SeqNos) != 0 {
				t.Fatalf("a failed transaction reported SeqNos %v", r.SeqNos)
			}
			s := x.stats(q)
			if s.Active != 1 || s.Locked != 1 { // Active counts the locked message
				t.Fatalf("after a failed transaction: active %d locked %d, want 1 and 1", s.Active, s.Locked)
			}
			// The lock survived: completing it outside the transaction works.
			if err := x.settle(q, Complete, m); err != nil {
				t.Fatalf("complete after rollback: %v", err)
			}
			// The send did not happen, and its sequence number was not spent.
			if seqs := x.send(msgOf("later")); seqs[0] != 2 {
				t.Fatalf("next sequence number = %d, want 2", seqs[0])
			}
		})
	}
}

// TestTxnQuotaAllOrNothing: a transaction whose sends exceed the quota changes nothing.
func TestTxnQuotaAllOrNothing(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxSizeBytes = 3000
	x := newTF(t, cfg)
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	r := x.one(&Txn{Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete},
		&Enqueue{Messages: []*Message{{Payload: make([]byte, 4000), Properties: rule.Properties{Size: 4000}}}},
	}})
	wantErr(t, r.Err, ErrQuotaExceeded)
	if s := x.stats(q); s.Locked != 1 {
		t.Fatalf("locked = %d after a failed transaction, want 1", s.Locked)
	}
}

// TestTxnSessionOwner: settlements in a transaction obey session locks like any other.
func TestTxnSessionOwner(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.RequiresSession = true
	x := newTF(t, cfg)
	x.send(msgOf("a", withSession("s1")))
	if r := x.one(&AcceptSession{Target: q, SessionID: "s1", Owner: "conn1"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	m := x.recvSess(q, "s1", "conn1", 1)[0]
	r := x.one(&Txn{Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete, SessionID: "s1", Owner: "other"},
	}})
	wantErr(t, r.Err, ErrSessionLockLost)
	r = x.one(&Txn{Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Complete, SessionID: "s1", Owner: "conn1"},
	}})
	if r.Err != nil {
		t.Fatalf("txn by the holder: %v", r.Err)
	}
	if s := x.stats(q); s.Active != 0 {
		t.Fatalf("message still there after a committed complete: %+v", s)
	}
}

// TestTxnTopicFanOut: a send in a transaction on a topic fans out as a plain send does.
func TestTxnTopicFanOut(t *testing.T) {
	x := newTF(t, topicCfg("s1", "s2"))
	r := x.one(&Txn{Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("x")}}}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, sub := range []string{"s1", "s2"} {
		if got := x.recv(Target{Sub: sub}, 5); len(got) != 1 {
			t.Fatalf("%s received %d, want 1", sub, len(got))
		}
	}
}

// TestTxnDecodeRejectsNesting: a Txn inside a Txn is malformed on the wire.
func TestTxnDecodeRejectsNesting(t *testing.T) {
	b := AppendEntry(nil, &Entry{Now: t0, Cmds: []Command{&Txn{Cmds: []Command{&Txn{}}}}})
	if _, err := DecodeEntry(b); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("DecodeEntry(nested txn) = %v, want ErrBadCommand", err)
	}
	for i := range b {
		if _, err := DecodeEntry(b[:i]); err == nil {
			t.Fatalf("DecodeEntry of %d of %d bytes succeeded", i, len(b))
		}
	}
}
