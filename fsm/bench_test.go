package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"runtime"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Benchmarks of the fsm alone (no raft, no encoding unless stated), 1 KiB bodies.
// Figures are recorded in docs/benchmarks.md, section "fsm".

var snapMsgs = flag.Int("fsm.snapmsgs", 100_000, "messages in BenchmarkSnapshot/BenchmarkRestore")

var body1K = bytes.Repeat([]byte("x"), 1024)

func benchCfg() Config {
	c := queueCfg()
	c.Queue.MaxDeliveryCount = 1 << 30
	return c
}

func one(m *Message) []*Message { return []*Message{m} }

// BenchmarkEnqueue: one message per entry.
func BenchmarkEnqueue(b *testing.B) {
	f := New(benchCfg())
	enq := &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(&Message{Payload: body1K})}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f.Apply(enq)
	}
}

// BenchmarkEnqueueWithMessageID: BenchmarkEnqueue with a 32-digit message-id, which
// every message stored through AMQP has (the broker gives one to a message without).
func BenchmarkEnqueueWithMessageID(b *testing.B) {
	f := New(benchCfg())
	m := &Message{Payload: body1K}
	m.MessageID = "0123456789abcdef0123456789abcdef"
	enq := &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(m)}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f.Apply(enq)
	}
}

// BenchmarkDecodeEntryBatch100: decoding one raft entry that enqueues a batch of 100
// 1 KiB messages, as every replica does before applying it (payloads go to a slab, as
// the partition's replicas decode); allocs/op and B/op are per entry.
func BenchmarkDecodeEntryBatch100(b *testing.B) {
	ms := make([]*Message, 100)
	for i := range ms {
		ms[i] = &Message{Payload: body1K}
		ms[i].MessageID = fmt.Sprintf("%032x", i)
	}
	enc := AppendEntry(nil, &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}})
	var s Slab
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntryPacked(enc, &s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueBatch64: 64 messages per entry; ns/op is per message.
func BenchmarkEnqueueBatch64(b *testing.B) {
	f := New(benchCfg())
	ms := make([]*Message, 64)
	for i := range ms {
		ms[i] = &Message{Payload: body1K}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}})
	}
}

// BenchmarkEnqueueLockComplete: the whole life of one message, three entries, with
// 10k other messages waiting in the queue.
func BenchmarkEnqueueLockComplete(b *testing.B) {
	f := New(benchCfg())
	for i := 0; i < 10_000; i++ {
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(&Message{Payload: body1K, Properties: propsTTL()})}}})
	}
	// The commands are built once: the fsm copies what it keeps (it keeps the payload,
	// which is never written), so this measures fsm time, not the caller's allocations.
	enq := &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(&Message{Payload: body1K})}}}
	rcv := &Entry{Now: t0, Cmds: []Command{&Receive{Max: 1, Salt: 1}}}
	stl := &Settle{Tokens: make([]LockToken, 1), Disposition: Complete}
	cpl := &Entry{Now: t0, Cmds: []Command{stl}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply(enq)
		r := f.Apply(rcv)
		stl.Tokens[0] = r[0].Messages[0].LockToken
		if r = f.Apply(cpl); r[0].Err != nil {
			b.Fatal(r[0].Err)
		}
	}
}

// BenchmarkReceiveBatch100: one peek-lock receive of up to 100 (the SDK's
// ReceiveMessages(100)) and one settle completing them, from a backlog that is refilled
// by one enqueue of 100 each time; allocs/op and B/op are per 100 messages.
func BenchmarkReceiveBatch100(b *testing.B) {
	f := New(benchCfg())
	ms := make([]*Message, 100)
	for i := range ms {
		ms[i] = &Message{Payload: body1K}
	}
	enq := &Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}}
	rcv := &Entry{Now: t0, Cmds: []Command{&Receive{Max: 100, Salt: 1}}}
	stl := &Settle{Tokens: make([]LockToken, 100), Disposition: Complete}
	cpl := &Entry{Now: t0, Cmds: []Command{stl}}
	b.ReportAllocs()
	for b.Loop() {
		f.Apply(enq)
		r := f.Apply(rcv)
		if len(r[0].Messages) != 100 {
			b.Fatalf("received %d", len(r[0].Messages))
		}
		for i, m := range r[0].Messages {
			stl.Tokens[i] = m.LockToken
		}
		if r = f.Apply(cpl); r[0].Err != nil {
			b.Fatal(r[0].Err)
		}
	}
}

func propsTTL() rule.Properties { return rule.Properties{TimeToLive: 3_600_000} }

// BenchmarkAbandonRedelivery: receive and abandon the same message.
func BenchmarkAbandonRedelivery(b *testing.B) {
	f := New(benchCfg())
	for i := 0; i < 1000; i++ {
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(&Message{Payload: body1K})}}})
	}
	rcv := &Entry{Now: t0, Cmds: []Command{&Receive{Max: 1, Salt: 1}}}
	stl := &Settle{Tokens: make([]LockToken, 1), Disposition: Abandon}
	abn := &Entry{Now: t0, Cmds: []Command{stl}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := f.Apply(rcv)
		stl.Tokens[0] = r[0].Messages[0].LockToken
		f.Apply(abn)
	}
}

// BenchmarkTick100k: 100k pending deadlines (messages with a TTL); each Tick expires one.
func BenchmarkTick100k(b *testing.B) {
	f := New(benchCfg())
	ms := make([]*Message, 0, 1000)
	for i := 0; i < 100_000; i++ {
		ms = append(ms, &Message{Payload: body1K, Properties: propsTTL()})
		if len(ms) == cap(ms) {
			f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}})
			ms = ms[:0]
		}
	}
	for i := 0; i < b.N; i++ {
		m := &Message{Payload: body1K}
		m.TimeToLive = int64(1 + i)
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: one(m)}}})
	}
	if f.NextDeadline() != t0+1 {
		b.Fatalf("next deadline %d", f.NextDeadline()-t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply(&Entry{Now: t0 + int64(1+i), Cmds: []Command{&Tick{}}})
	}
	b.StopTimer()
	if s := f.Stats().Targets[0]; s.Active != 100_000 {
		b.Fatalf("%d left", s.Active)
	}
}

func filled(n int) *FSM {
	f := New(benchCfg())
	ms := make([]*Message, 0, 1000)
	for i := 0; i < n; i++ {
		m := &Message{Payload: body1K}
		m.MessageID = fmt.Sprintf("%032x", i)
		ms = append(ms, m)
		if len(ms) == cap(ms) || i == n-1 {
			f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}})
			ms = make([]*Message, 0, 1000)
		}
	}
	return f
}

type countW struct{ n int64 }

func (c *countW) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkSnapshot: one snapshot of -fsm.snapmsgs messages per op (to io.Discard).
func BenchmarkSnapshot(b *testing.B) {
	f := filled(*snapMsgs)
	b.ReportAllocs()
	b.ResetTimer()
	var w countW
	for i := 0; i < b.N; i++ {
		if err := f.Snapshot(&w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(w.n)/float64(b.N)/1e6, "MB/snapshot")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(*snapMsgs), "ns/msg")
}

// BenchmarkRestore: one restore of -fsm.snapmsgs messages per op.
func BenchmarkRestore(b *testing.B) {
	var buf bytes.Buffer
	if err := filled(*snapMsgs).Snapshot(&buf); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := New(benchCfg())
		if err := f.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(*snapMsgs), "ns/msg")
}

// heapPerMessage returns the live heap bytes per stored message that the fsm adds
// beyond the payload (which the command hands over and the fsm keeps without copying),
// and how many of those bytes are the message's own property strings (copied into the
// packed form). Payloads and property strings exist before the measurement starts; the
// command Message structs are built per batch and become garbage.
func heapPerMessage(n int, mk func(i int) *Message) (added, strs float64) {
	proto := make([]*Message, n)
	var strBytes int64
	for i := range proto {
		m := mk(i)
		proto[i] = m
		strBytes += int64(len(m.MessageID) + len(m.SessionID) + len(m.Subject) + len(m.CorrelationID))
		for _, p := range m.App {
			strBytes += int64(len(p.Key) + len(p.Value.S))
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := New(benchCfg())
	for i := 0; i < n; i += 500 {
		batch := make([]*Message, 0, 500)
		for _, p := range proto[i:min(i+500, n)] {
			c := *p
			batch = append(batch, &c)
		}
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: batch}}})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(f)
	runtime.KeepAlive(proto)
	used := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	return used / float64(n), float64(strBytes) / float64(n)
}

func bareMsg(int) *Message { return &Message{Payload: make([]byte, 1024)} }

func typicalMsg(i int) *Message {
	m := &Message{Payload: make([]byte, 1024)}
	m.MessageID = fmt.Sprintf("%032x", i)
	m.Subject = "orders"
	m.App = []rule.Property{{Key: "tenant", Value: rule.Value{Kind: rule.KindString, S: "contoso"}}}
	return m
}

// BenchmarkMemoryPerMessage reports the fsm's heap overhead per stored message.
func BenchmarkMemoryPerMessage(b *testing.B) {
	for _, c := range []struct {
		name string
		mk   func(int) *Message
	}{{"bare", bareMsg}, {"typical", typicalMsg}} {
		b.Run(c.name, func(b *testing.B) {
			var o, strs float64
			for i := 0; i < b.N; i++ {
				o, strs = heapPerMessage(100_000, c.mk)
			}
			b.ReportMetric(o-strs, "B/msg-overhead")
		})
	}
}

// BenchmarkFreeze: the pause Apply sees when a snapshot is taken with Freeze (the
// writing then runs concurrently), -fsm.snapmsgs messages.
func BenchmarkFreeze(b *testing.B) {
	f := filled(*snapMsgs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if f.Freeze() == nil {
			b.Fatal("nil")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(*snapMsgs), "ns/msg")
}

// BenchmarkAcceptNextSession: 10 000 sessions with a message each; accept the next
// available one, take its message, complete it, release the session, and send the
// session a new message.
func BenchmarkAcceptNextSession(b *testing.B) {
	cfg := benchCfg()
	cfg.Queue.RequiresSession = true
	f := New(cfg)
	ms := make([]*Message, 0, 10_000)
	for i := 0; i < 10_000; i++ {
		m := &Message{Payload: body1K}
		m.SessionID = fmt.Sprintf("session-%05d", i)
		ms = append(ms, m)
	}
	f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: ms}}})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := f.Apply(&Entry{Now: t0, Cmds: []Command{&AcceptSession{Owner: "o"}}})
		id := r[0].SessionID
		r = f.Apply(&Entry{Now: t0, Cmds: []Command{&Receive{Max: 1, SessionID: id, Owner: "o"}}})
		m := &Message{Payload: body1K}
		m.SessionID = id
		f.Apply(&Entry{Now: t0, Cmds: []Command{
			&Settle{Tokens: []LockToken{r[0].Messages[0].LockToken}, Disposition: Complete, SessionID: id, Owner: "o"},
			&ReleaseSession{SessionID: id, Owner: "o"},
			&Enqueue{Messages: []*Message{m}}}})
	}
}
