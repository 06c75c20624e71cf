package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// A store that spills every body: received messages carry Spilled instead of Payload,
// Body reads it back, nothing is counted in memory, and the quota counts the same bytes.
func TestSpilledBodiesQueue(t *testing.T) {
	x := newTF(t, queueCfg())
	h := &heapSpill{}
	x.f.SetBodies(h)
	x.send(msgOf("one"), msgOf("two"))
	if h.spills != 2 || x.f.MemoryBodyBytes() != 0 {
		t.Fatalf("spills %d, bytes in memory %d; want 2, 0", h.spills, x.f.MemoryBodyBytes())
	}
	if a, b := x.f.Stats(), x.twin.Stats(); a.Bytes != b.Bytes || a.Bytes == 0 {
		t.Fatalf("quota bytes %d spilled, %d in the twin", a.Bytes, b.Bytes)
	}
	got := x.recv(q, 2)
	for i, want := range []string{"one", "two"} {
		m := got[i]
		body, err := m.Body()
		if m.Payload != nil || m.Spilled == nil || err != nil || string(body) != want {
			t.Fatalf("message %d: payload %q, spilled %v, body %q, %v; want spilled %q", i, m.Payload, m.Spilled, body, err, want)
		}
	}
	if err := x.settle(q, Complete, got...); err != nil {
		t.Fatal(err)
	}
	if x.f.Stats().Bytes != 0 {
		t.Fatalf("quota bytes %d after completing everything", x.f.Stats().Bytes)
	}
}

// A store may keep some bodies in memory and spill others (a node under its budget, then
// over it); MemoryBodyBytes counts only the first.
func TestSpilledBodiesMixed(t *testing.T) {
	x := newTF(t, queueCfg())
	b := &budgetSpill{left: 5}
	x.f.SetBodies(b)
	x.send(msgOf("12345"), msgOf("678"), msgOf("9"))
	if got := x.f.MemoryBodyBytes(); got != 5 {
		t.Fatalf("bytes in memory %d, want 5 (the first body only)", got)
	}
	got := x.recv(q, 3)
	if got[0].Spilled != nil || got[1].Spilled == nil || got[2].Spilled == nil {
		t.Fatalf("spilled: %v %v %v; want the last two", got[0].Spilled, got[1].Spilled, got[2].Spilled)
	}
	if err := x.settle(q, Complete, got[0]); err != nil {
		t.Fatal(err)
	}
	if got := x.f.MemoryBodyBytes(); got != 0 {
		t.Fatalf("bytes in memory %d after completing the in-memory message", got)
	}
}

// A topic's copies of one message share one spilled body, also after a restore, and a
// dead-lettered copy keeps it.
func TestSpilledBodiesTopicShare(t *testing.T) {
	x := newTF(t, topicCfg("a", "b", "c"))
	h := &heapSpill{}
	x.f.SetBodies(h)
	x.send(msgOf("fan"), msgOf("out"))
	if h.spills != 2 {
		t.Fatalf("%d spills for 2 messages to 3 subscriptions, want 2", h.spills)
	}
	got := x.recv(Target{Sub: "b"}, 1)
	if err := x.one(&Settle{Target: Target{Sub: "b"}, Tokens: []LockToken{got[0].LockToken}, Disposition: DeadLetter}).Err; err != nil {
		t.Fatal(err)
	}
	dl := x.recv(Target{Sub: "b", DLQ: true}, 1)
	if body, _ := dl[0].Body(); string(body) != "fan" || dl[0].Spilled == nil {
		t.Fatalf("dead-lettered copy: body %q, spilled %v", body, dl[0].Spilled)
	}
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r := New(Config{Kind: KindQueue})
	hr := &heapSpill{}
	r.SetBodies(hr)
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if hr.spills != 2 || r.Digest() != x.f.Digest() {
		t.Fatalf("restore: %d spills for 2 messages in 3 subscriptions (want 2), digests equal %v", hr.spills, r.Digest() == x.f.Digest())
	}
}

// A spilled body that cannot be read back fails the snapshot with an error (raft retries
// a failed snapshot); it does not panic or write a partial image as if it were whole.
func TestSpilledBodyReadErrorFailsSnapshot(t *testing.T) {
	f := New(queueCfg())
	f.SetBodies(failingSpill{})
	b := AppendEntry(nil, &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("lost")}}}})
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(e); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	err = f.Snapshot(&bytes.Buffer{})
	if !errors.Is(err, errSpillGone) || !strings.Contains(err.Error(), "message 1") {
		t.Fatalf("snapshot error %v, want one naming message 1 and wrapping the read error", err)
	}
	if _, err := f.Freeze().WriteTo(&bytes.Buffer{}); !errors.Is(err, errSpillGone) {
		t.Fatalf("frozen snapshot error %v", err)
	}
	if _, err := f.DigestErr(); !errors.Is(err, errSpillGone) {
		t.Fatalf("DigestErr %v", err)
	}
}

// budgetSpill keeps bodies in memory while left lasts, then spills them.
type budgetSpill struct{ left int }

func (b *budgetSpill) Spill(p []byte) Spilled {
	if len(p) <= b.left {
		b.left -= len(p)
		return nil
	}
	return heapBody(bytes.Clone(p))
}

var errSpillGone = errors.New("spilled body gone")

type failingSpill struct{}

func (failingSpill) Spill(p []byte) Spilled { return failingBody(len(p)) }

type failingBody int

func (b failingBody) Len() int              { return int(b) }
func (b failingBody) Read() ([]byte, error) { return nil, errSpillGone }
