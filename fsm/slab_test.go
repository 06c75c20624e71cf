package fsm

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestDecodeEntryPacked: payloads decoded into a Slab equal DecodeEntry's, share chunks
// (small ones) without letting an append reach a neighbour, and do not alias the entry.
func TestDecodeEntryPacked(t *testing.T) {
	var msgs []*Message
	for i, n := range []int{0, 1, 1024, 1024, slabChunk / 16, slabChunk/16 + 1, 3000} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		msgs = append(msgs, &Message{Payload: p})
	}
	b := AppendEntry(nil, &Entry{Now: 1, Cmds: []Command{&Enqueue{Messages: msgs}}})
	var s Slab
	got, err := DecodeEntryPacked(b, &s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	gm, wm := got.Cmds[0].(*Enqueue).Messages, want.Cmds[0].(*Enqueue).Messages
	for i := range wm {
		if !bytes.Equal(gm[i].Payload, wm[i].Payload) {
			t.Fatalf("message %d: payload differs", i)
		}
		if p := gm[i].Payload; len(p) > 0 && len(p) <= slabChunk/16 && cap(p) != len(p) {
			t.Errorf("message %d: cap %d > len %d: an append would write into the next payload", i, cap(p), len(p))
		}
	}
	// The two 1 KiB payloads are neighbours in one chunk; the one above slabChunk/16 is not.
	next := func(a, c []byte) bool {
		return unsafe.Add(unsafe.Pointer(unsafe.SliceData(a)), len(a)) == unsafe.Pointer(unsafe.SliceData(c))
	}
	if !next(gm[2].Payload, gm[3].Payload) {
		t.Error("consecutive small payloads are not packed side by side")
	}
	if next(gm[4].Payload, gm[5].Payload) {
		t.Error("a payload above slabChunk/16 was packed into the chunk")
	}
	for i := range b {
		b[i] = 0xFF // the entry is the raft log's: the stored payloads must not alias it
	}
	for i := range wm {
		if !bytes.Equal(gm[i].Payload, wm[i].Payload) {
			t.Fatalf("message %d: payload changed with the entry", i)
		}
	}
}
