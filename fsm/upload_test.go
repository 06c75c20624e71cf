package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// chunksOf splits body into BodyChunk commands of at most size bytes.
func chunksOf(id string, body []byte, size int, deadline int64) []Command {
	var out []Command
	for i := 0; len(body) > 0; i++ {
		n := min(size, len(body))
		out = append(out, &BodyChunk{Upload: id, Index: uint32(i), Deadline: deadline, Data: body[:n]})
		body = body[n:]
	}
	return out
}

func bigBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// TestUploadSameAsSingleSend: a body sent as chunks, each in an entry of its own and out
// of order, then completed by EnqueueUploaded, gives the state a single Enqueue of the
// same message gives: same digest, same message on receive.
func TestUploadSameAsSingleSend(t *testing.T) {
	body := bigBody(10_000)
	cfg := queueCfg()
	cfg.RequiresDuplicateDetection = true
	single := newTF(t, cfg)
	chunked := newTF(t, cfg)
	for _, x := range []*tf{single, chunked} {
		x.send(msgOf("before"))
		x.advance(5)
	}
	m := msgOf("", withID("big"), withProp("k", rule.Value{Kind: rule.KindString, S: "v"}))
	single.advance(4)
	single.one(&Enqueue{Messages: []*Message{msgOf("small"), {Properties: m.Properties, Payload: body}}})

	cs := chunksOf("u1", body, 3000, t0+120_000)
	if len(cs) != 4 {
		t.Fatalf("%d chunks", len(cs))
	}
	for _, i := range []int{2, 0, 3, 1} {
		if r := chunked.one(cs[i]); r.Err != nil {
			t.Fatalf("chunk %d: %v", i, r.Err)
		}
		chunked.advance(1)
	}
	if got := chunked.f.PendingUploads(); len(got) != 1 || got[0].Chunks != 4 || got[0].Bytes != int64(len(body)) {
		t.Fatalf("PendingUploads = %+v", got)
	}
	if st := chunked.stats(q); st.Active != 1 {
		t.Fatalf("a pending upload is visible: %+v", st)
	}
	r := chunked.one(&EnqueueUploaded{Messages: []*Message{msgOf("small"), m},
		Bodies: []UploadRef{{}, {Upload: "u1", Chunks: 4}}})
	if r.Err != nil || len(r.SeqNos) != 2 {
		t.Fatalf("EnqueueUploaded: %v, %v", r.Err, r.SeqNos)
	}
	if len(chunked.f.PendingUploads()) != 0 {
		t.Fatal("the upload is still pending after its message was stored")
	}
	if single.f.Digest() != chunked.f.Digest() {
		t.Fatal("chunked send and single send give different states")
	}
	got := chunked.recv(q, 10)
	if len(got) != 3 || !bytes.Equal(got[2].Payload, body) || got[2].MessageID != "big" {
		t.Fatalf("received %d messages, last body %d bytes", len(got), len(got[len(got)-1].Payload))
	}
	// Dedupe sees the assembled message: the same MessageId again is a duplicate, and
	// its chunks are dropped with it.
	chunked.apply(chunksOf("u2", body, 5000, t0+120_000)...)
	r = chunked.one(&EnqueueUploaded{Messages: []*Message{m}, Bodies: []UploadRef{{Upload: "u2", Chunks: 2}}})
	if r.Err != nil || r.Duplicates != 1 || len(chunked.f.PendingUploads()) != 0 {
		t.Fatalf("duplicate: %v, %d duplicates, %d pending", r.Err, r.Duplicates, len(chunked.f.PendingUploads()))
	}
	single.recv(q, 10) // keep the twins comparable at cleanup
}

// TestUploadRefusedDropsChunks: whatever refuses the final command (quota, entity
// disabled, a missing chunk, an unknown upload), nothing is stored and the chunks are
// gone, their bytes no longer counted.
func TestUploadRefusedDropsChunks(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxSizeBytes = 25_000
	cases := []struct {
		name   string
		prep   func(x *tf)
		chunks uint32
		want   error
	}{
		{"quota", func(x *tf) {
			c := cfg
			c.MaxSizeBytes = 10_000
			x.one(&UpdateEntity{Config: c})
		}, 4, ErrQuotaExceeded},
		{"disabled", func(x *tf) {
			c := cfg
			c.Queue.Status = StatusSendDisabled
			x.one(&UpdateEntity{Config: c})
		}, 4, ErrEntityDisabled},
		{"missing chunk", func(x *tf) {}, 5, ErrUploadIncomplete},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := newTF(t, cfg)
			for _, c := range chunksOf("u", bigBody(12_000), 3000, t0+120_000) {
				if r := x.one(c); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			tc.prep(x)
			r := x.one(&EnqueueUploaded{Messages: []*Message{msgOf("")}, Bodies: []UploadRef{{Upload: "u", Chunks: tc.chunks}}})
			wantErr(t, r.Err, tc.want)
			if n := len(x.f.PendingUploads()); n != 0 {
				t.Fatalf("%d uploads pending after a refused final command", n)
			}
			if x.f.bytes != x.stats(q).Bytes {
				t.Fatalf("bytes %d counted, %d stored: the dropped chunks still count", x.f.bytes, x.stats(q).Bytes)
			}
		})
	}
	t.Run("abandoned", func(t *testing.T) {
		x := newTF(t, cfg)
		x.apply(chunksOf("u", bigBody(9_000), 3000, t0+120_000)...)
		r := x.one(&EnqueueUploaded{Messages: []*Message{{}}, Bodies: []UploadRef{{Upload: "u"}}})
		wantErr(t, r.Err, ErrUploadIncomplete)
		if len(x.f.PendingUploads()) != 0 || x.f.bytes != 0 || x.stats(q).Active != 0 {
			t.Fatalf("after abandoning: %+v, %d bytes, %d messages", x.f.PendingUploads(), x.f.bytes, x.stats(q).Active)
		}
	})
	t.Run("unknown upload", func(t *testing.T) {
		x := newTF(t, cfg)
		r := x.one(&EnqueueUploaded{Messages: []*Message{msgOf("a"), msgOf("")}, Bodies: []UploadRef{{}, {Upload: "nope", Chunks: 1}}})
		wantErr(t, r.Err, ErrUploadIncomplete)
		if st := x.stats(q); st.Active != 0 {
			t.Fatalf("a refused command stored %d messages", st.Active)
		}
	})
	t.Run("chunks count toward the quota", func(t *testing.T) {
		x := newTF(t, cfg)
		x.apply(chunksOf("u", bigBody(20_000), 5000, t0+120_000)...)
		wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf(string(bigBody(6_000)))}}).Err, ErrQuotaExceeded)
		// A chunk past the quota is refused and drops its upload.
		wantErr(t, x.one(&BodyChunk{Upload: "u", Index: 4, Deadline: t0 + 120_000, Data: bigBody(6_000)}).Err, ErrQuotaExceeded)
		if len(x.f.PendingUploads()) != 0 || x.f.bytes != 0 {
			t.Fatalf("after a refused chunk: %+v, %d bytes", x.f.PendingUploads(), x.f.bytes)
		}
	})
	t.Run("chunks past the message size limit", func(t *testing.T) {
		c := cfg
		c.MaxMessageSizeBytes = 10_000
		x := newTF(t, c)
		x.apply(chunksOf("u", bigBody(9_000), 3000, t0+120_000)...)
		wantErr(t, x.one(&BodyChunk{Upload: "u", Index: 3, Deadline: t0 + 120_000, Data: bigBody(3000)}).Err, ErrMessageTooLarge)
		if len(x.f.PendingUploads()) != 0 {
			t.Fatal("an upload past the size limit is still pending")
		}
	})
}

// TestUploadDeadline: an upload never completed is dropped by the first entry at or
// after its deadline, on every replica alike (tf's twin), and NextDeadline tells the
// leader when to tick for it. A completion after that finds nothing.
func TestUploadDeadline(t *testing.T) {
	x := newTF(t, queueCfg())
	x.one(&BodyChunk{Upload: "u", Index: 0, Deadline: t0 + 60_000, Data: []byte("abc")})
	x.advance(1000)
	x.one(&BodyChunk{Upload: "u", Index: 1, Deadline: t0 + 61_000, Data: []byte("def")}) // moves it later
	if d := x.f.NextDeadline(); d != t0+61_000 {
		t.Fatalf("NextDeadline = %d, want %d", d, t0+61_000)
	}
	x.now = t0 + 60_999
	x.tick()
	if len(x.f.PendingUploads()) != 1 {
		t.Fatal("dropped before its deadline")
	}
	x.now = t0 + 61_000
	x.tick()
	if len(x.f.PendingUploads()) != 0 || x.f.bytes != 0 {
		t.Fatalf("still pending at its deadline: %+v", x.f.PendingUploads())
	}
	if d := x.f.NextDeadline(); d != NeverMs {
		t.Fatalf("NextDeadline = %d after the drop", d)
	}
	r := x.one(&EnqueueUploaded{Messages: []*Message{msgOf("")}, Bodies: []UploadRef{{Upload: "u", Chunks: 2}}})
	wantErr(t, r.Err, ErrUploadIncomplete)
	// A chunk whose deadline has already passed is refused.
	wantErr(t, x.one(&BodyChunk{Upload: "v", Index: 0, Deadline: x.now, Data: []byte("x")}).Err, ErrUploadIncomplete)
	// So is a malformed one.
	wantErr(t, x.one(&BodyChunk{Upload: "", Index: 0, Deadline: NeverMs, Data: []byte("x")}).Err, ErrBadCommand)
	wantErr(t, x.one(&BodyChunk{Upload: "w", Index: MaxUploadChunks, Deadline: NeverMs, Data: []byte("x")}).Err, ErrBadCommand)
}

// TestUploadRepeatedChunk: a chunk repeated (a retried proposal) changes nothing.
func TestUploadRepeatedChunk(t *testing.T) {
	x := newTF(t, queueCfg())
	c := &BodyChunk{Upload: "u", Index: 0, Deadline: t0 + 60_000, Data: []byte("abc")}
	x.one(c)
	x.one(c)
	if got := x.f.PendingUploads(); len(got) != 1 || got[0].Bytes != 3 || got[0].Chunks != 1 {
		t.Fatalf("PendingUploads = %+v", got)
	}
}

// TestUploadSnapshot: pending uploads survive snapshot and restore (version 4), the
// restored copy completes them alike, and once none is pending the snapshot is written
// in the older version again, byte for byte as before.
func TestUploadSnapshot(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	var v2 bytes.Buffer
	if err := x.f.Snapshot(&v2); err != nil {
		t.Fatal(err)
	}
	body := bigBody(7000)
	cs := chunksOf("u", body, 2000, t0+60_000)
	x.apply(cs[0], cs[3])
	x.one(&BodyChunk{Upload: "other", Index: 0, Deadline: t0 + 30_000, Data: []byte("x")})
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[4]; v != 4 {
		t.Fatalf("snapshot version %d with pending uploads, want 4", v)
	}
	r := New(queueCfg())
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if r.Digest() != x.f.Digest() || fmt.Sprint(r.PendingUploads()) != fmt.Sprint(x.f.PendingUploads()) {
		t.Fatalf("restored %+v, want %+v", r.PendingUploads(), x.f.PendingUploads())
	}
	// Both complete the upload the same way.
	e := &Entry{Now: x.now, Cmds: []Command{cs[1], cs[2],
		&EnqueueUploaded{Messages: []*Message{msgOf("")}, Bodies: []UploadRef{{Upload: "u", Chunks: 4}}}}}
	x.apply(e.Cmds...)
	res := r.Apply(e)
	if res[2].Err != nil || r.Digest() != x.f.Digest() {
		t.Fatalf("restored copy: %v, or a different digest", res[2].Err)
	}
	if got := r.Peek(q, 0, 10); len(got) != 2 || !bytes.Equal(got[1].Payload, body) {
		t.Fatalf("restored copy holds %d messages", len(got))
	}
	// "other" expires; nothing is pending, and the snapshot is version 2 again.
	x.now = t0 + 30_000
	x.tick()
	buf.Reset()
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[4]; v != snapVersionNoTxn {
		t.Fatalf("snapshot version %d without uploads or transactions, want %d", v, snapVersionNoTxn)
	}
	if v2.Bytes()[4] != snapVersionNoTxn {
		t.Fatalf("version %d before any upload", v2.Bytes()[4])
	}
}
