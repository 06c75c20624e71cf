package cluster

import (
	"bytes"
	"encoding/gob"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
)

// BenchmarkWireCodec compares what one forwarded send costs to encode and decode, the
// request and its reply, in version 1 (gob, one stream per connection as net/rpc keeps
// it, so type descriptions are sent once) and version 2 (cluster/wire):
//
//	go test ./cluster/ -run '^$' -bench WireCodec -benchmem
func BenchmarkWireCodec(b *testing.B) {
	m := &fsm.Message{Payload: make([]byte, 1100)}
	m.MessageID = "0123456789abcdef0123456789abcdef"
	m.Size = 1100
	call := &wire.Call{Group: 7, Timeout: 30 * time.Second, Req: &wire.Enqueue{Msgs: []*fsm.Message{m}}}
	reply := &wire.Reply{Result: wire.Result{Seqs: []int64{12345}}}
	b.Run("v1-gob", func(b *testing.B) {
		var buf bytes.Buffer
		enc, dec := gob.NewEncoder(&buf), gob.NewDecoder(&buf)
		req, err := v1Call(call)
		if err != nil {
			b.Fatal(err)
		}
		resp := v1Reply(reply)
		b.ReportAllocs()
		for b.Loop() {
			if err := enc.Encode(req); err != nil {
				b.Fatal(err)
			}
			var got CallReq
			if err := dec.Decode(&got); err != nil {
				b.Fatal(err)
			}
			if _, err := fromV1Call(&got); err != nil {
				b.Fatal(err)
			}
			if err := enc.Encode(&resp); err != nil {
				b.Fatal(err)
			}
			var r CallResp
			if err := dec.Decode(&r); err != nil {
				b.Fatal(err)
			}
			_ = fromV1Reply(call.Req, &r)
		}
	})
	b.Run("v2-wire", func(b *testing.B) {
		// A connection encodes into its write buffer, which it keeps between writes.
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = call.AppendTo(buf[:0], wireErrors{})
			var got wire.Call
			if err := wire.Decode(buf, &got, wireErrors{}); err != nil {
				b.Fatal(err)
			}
			buf = reply.AppendTo(buf[:0], wireErrors{})
			var r wire.Reply
			if err := wire.Decode(buf, &r, wireErrors{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
