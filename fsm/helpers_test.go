package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

const t0 = int64(1_700_000_000_000) // an arbitrary start time, Unix ms

// tf drives an FSM in tests. Every entry goes through AppendEntry/DecodeEntry, and a twin
// FSM applies the same bytes; at cleanup both must have the same digest, and a
// snapshot-restore copy must too.
type tf struct {
	t    *testing.T
	f    *FSM
	twin *FSM
	now  int64
	salt uint32
}

func newTF(t *testing.T, cfg Config) *tf {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	x := &tf{t: t, f: New(cfg), twin: New(cfg), now: t0}
	x.twin.SetBodies(&heapSpill{})
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if x.f.Digest() != x.twin.Digest() {
			t.Errorf("twin FSM fed the same entries has a different digest")
		}
		var buf bytes.Buffer
		if err := x.f.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		r := New(Config{Kind: KindQueue})
		if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if r.Digest() != x.f.Digest() {
			t.Errorf("restored FSM has a different digest")
		}
		rs := New(Config{Kind: KindQueue}) // restored with every body spilled
		rs.SetBodies(&heapSpill{})
		if err := rs.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("restore with spilled bodies: %v", err)
		}
		if rs.Digest() != x.f.Digest() || rs.MemoryBodyBytes() != 0 {
			t.Errorf("FSM restored with spilled bodies: different digest, or %d bytes in memory", rs.MemoryBodyBytes())
		}
	})
	return x
}

// heapSpill is a Bodies store that takes every body (into a copy of its own). The twin
// FSM of every test stores its bodies through one, so every test also checks that a
// replica with spilled bodies reaches the same state as one without.
type heapSpill struct{ spills int }

func (h *heapSpill) Spill(p []byte) Spilled {
	h.spills++
	return heapBody(bytes.Clone(p))
}

type heapBody []byte

func (b heapBody) Len() int              { return len(b) }
func (b heapBody) Read() ([]byte, error) { return b, nil }

func queueCfg() Config {
	return Config{Kind: KindQueue, GroupID: 7, Queue: DefaultQueueConfig(), DuplicateWindowMs: 600_000}
}

func (x *tf) apply(cmds ...Command) []Result {
	x.t.Helper()
	b := AppendEntry(nil, &Entry{Now: x.now, Cmds: cmds})
	e, err := DecodeEntry(b)
	if err != nil {
		x.t.Fatalf("decode of our own encoding: %v", err)
	}
	if again := AppendEntry(nil, e); !bytes.Equal(again, b) {
		x.t.Fatalf("entry does not re-encode to the same bytes")
	}
	res := x.f.Apply(e)
	e2, _ := DecodeEntry(b)
	x.twin.Apply(e2)
	return res
}

func (x *tf) one(c Command) Result {
	x.t.Helper()
	return x.apply(c)[0]
}

func (x *tf) advance(ms int64) { x.now += ms }

func (x *tf) tick() { x.t.Helper(); x.one(&Tick{}) }

func msgOf(body string, opts ...func(*Message)) *Message {
	m := &Message{Payload: []byte(body)}
	for _, o := range opts {
		o(m)
	}
	return m
}

func withID(id string) func(*Message)      { return func(m *Message) { m.MessageID = id } }
func withSession(id string) func(*Message) { return func(m *Message) { m.SessionID = id } }
func withTTL(ms int64) func(*Message)      { return func(m *Message) { m.TimeToLive = ms } }
func withSched(at int64) func(*Message)    { return func(m *Message) { m.ScheduledEnqueueTime = at } }
func withProp(k string, v rule.Value) func(*Message) {
	return func(m *Message) { m.App = append(m.App, rule.Property{Key: k, Value: v}) }
}

func (x *tf) send(ms ...*Message) []int64 {
	x.t.Helper()
	r := x.one(&Enqueue{Messages: ms})
	if r.Err != nil {
		x.t.Fatalf("enqueue: %v", r.Err)
	}
	return r.SeqNos
}

func (x *tf) recv(t Target, max int32) []*Message {
	x.t.Helper()
	x.salt++
	r := x.one(&Receive{Target: t, Max: max, Salt: x.salt})
	if r.Err != nil {
		x.t.Fatalf("receive: %v", r.Err)
	}
	return r.Messages
}

func (x *tf) recvSess(t Target, sess, owner string, max int32) []*Message {
	x.t.Helper()
	x.salt++
	r := x.one(&Receive{Target: t, Max: max, Salt: x.salt, SessionID: sess, Owner: owner})
	if r.Err != nil {
		x.t.Fatalf("receive session %s: %v", sess, r.Err)
	}
	return r.Messages
}

func (x *tf) settle(t Target, d Disposition, ms ...*Message) error {
	x.t.Helper()
	toks := make([]LockToken, len(ms))
	for i, m := range ms {
		toks[i] = m.LockToken
	}
	return x.one(&Settle{Target: t, Tokens: toks, Disposition: d}).Err
}

func (x *tf) stats(t Target) TargetStats {
	x.t.Helper()
	for _, s := range x.f.Stats().Targets {
		if s.Target == t {
			return s
		}
	}
	x.t.Fatalf("no stats for %+v", t)
	return TargetStats{}
}

func seqsOf(ms []*Message) []int64 {
	s := make([]int64, len(ms))
	for i, m := range ms {
		s[i] = m.SequenceNumber
	}
	return s
}

func bodies(ms []*Message) []string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m.Payload)
	}
	return s
}

func wantErr(t *testing.T, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error = %v, want %v", got, want)
	}
}

var (
	q   = Target{}
	dlq = Target{DLQ: true}
)
