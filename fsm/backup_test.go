package fsm

import (
	"bytes"
	"errors"
	"testing"
)

// Rebase keeps every message, its sequence number, delivery count and state, the
// session state and the duplicate-detection history; it drops locks and takes the new
// partition's group id.
func TestRebase(t *testing.T) {
	cfg := sessCfg()
	cfg.RequiresDuplicateDetection = true
	x := newTF(t, cfg)
	x.send(msgOf("a", withSession("s1"), withID("id-a")), msgOf("b", withSession("s1"), withID("id-b")))
	x.send(msgOf("c", withSession("s2"), withID("id-c")))
	if err := x.one(&SetSessionState{Target: q, SessionID: "s2", State: []byte("st")}).Err; err != nil {
		t.Fatal(err)
	}
	if err := x.one(&AcceptSession{Target: q, SessionID: "s1", Owner: "me"}).Err; err != nil {
		t.Fatal(err)
	}
	got := x.recvSess(q, "s1", "me", 1) // locks a, holds s1
	if len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	var snap, out bytes.Buffer
	if err := x.f.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	target := cfg
	target.GroupID = 99
	if _, err := Rebase(bytes.NewReader(snap.Bytes()), &out, target); err != nil {
		t.Fatal(err)
	}
	r := New(target)
	if err := r.Restore(&out); err != nil {
		t.Fatal(err)
	}
	if r.Config().GroupID != 99 {
		t.Fatalf("group id %d", r.Config().GroupID)
	}
	ms := r.Peek(q, 0, 10)
	if len(ms) != 3 {
		t.Fatalf("%d messages", len(ms))
	}
	for _, m := range ms {
		if m.LockedUntil != 0 || m.State != StateActive {
			t.Fatalf("message %d: locked until %d, state %d", m.SequenceNumber, m.LockedUntil, m.State)
		}
	}
	if ms[0].DeliveryCount != 1 {
		t.Fatalf("delivery count %d, want 1 (kept)", ms[0].DeliveryCount)
	}
	if s, ok := r.Session(q, "s1"); !ok || s.Held {
		t.Fatalf("session s1: %+v %v", s, ok)
	}
	if st := r.SessionState(q, "s2"); string(st) != "st" {
		t.Fatalf("session state %q", st)
	}
	res := r.Apply(&Entry{Now: x.now + 1, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("again", withSession("s1"), withID("id-a"))}}}})
	if res[0].Err != nil || res[0].Duplicates != 1 {
		t.Fatalf("duplicate after rebase: %+v", res[0])
	}

	// A damaged snapshot or another entity is refused.
	bad := bytes.Clone(snap.Bytes())
	bad[len(bad)/2] ^= 1
	if _, err := Rebase(bytes.NewReader(bad), &bytes.Buffer{}, target); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("corrupt: %v", err)
	}
	if _, err := Rebase(bytes.NewReader(snap.Bytes()[:len(snap.Bytes())-3]), &bytes.Buffer{}, target); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("truncated: %v", err)
	}
	topic := Config{Kind: KindTopic, GroupID: 1, Subscriptions: []SubscriptionConfig{{Name: "x", Queue: DefaultQueueConfig()}}}
	if _, err := Rebase(bytes.NewReader(snap.Bytes()), &bytes.Buffer{}, topic); !errors.Is(err, ErrBackupMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
}
