package amqp

import (
	"encoding/binary"
	"testing"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// dataMessage is a message of one data section holding n bytes.
func dataMessage(n int) []byte {
	b := []byte{0x00, 0x53, 0x75, 0xb0}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return append(b, make([]byte, n)...)
}

// TestConnBufferedBound: what one connection may buffer of incomplete multi-frame
// deliveries is bounded over all its links (Config.MaxConnBuffered). A delivery that does
// not fit is refused with amqp:resource-limit-exceeded when it ends; the others go
// through, and the room is given back as deliveries complete.
func TestConnBufferedBound(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxConnBuffered = 4096 })
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	until[*frames.Begin](rc)
	for h, name := range []string{"a", "b"} {
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: name, Handle: uint32(h), Role: frames.RoleSender,
			Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
		until[*frames.Attach](rc)
	}
	zero := uint32(0)
	// send writes msg on handle h as delivery id in frames of at most 1000 bytes; with
	// hold, the last frame is left out (the delivery stays incomplete).
	send := func(h, id uint32, msg []byte, hold bool) {
		first := true
		for off := 0; off < len(msg); off += 1000 {
			end := min(off+1000, len(msg))
			last := end == len(msg)
			if last && hold {
				return
			}
			tr := &frames.Transfer{Handle: h, More: !last}
			if first {
				tr.DeliveryID, tr.DeliveryTag, tr.MessageFormat = &id, []byte{byte(id)}, &zero
				first = false
			}
			rc.frame(frames.TypeAMQP, 0, tr, msg[off:end])
		}
	}
	finish := func(h uint32, msg []byte) {
		off := (len(msg) - 1) / 1000 * 1000
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: h}, msg[off:])
	}
	outcome := func(id uint32) frames.DeliveryState {
		t.Helper()
		for {
			d := until[*frames.Disposition](rc)
			if d.First <= id && (d.Last == nil && d.First == id || d.Last != nil && *d.Last >= id) {
				return d.State
			}
		}
	}

	big, small := dataMessage(3000), dataMessage(2000)
	send(0, 0, big, true)   // a: 3000 bytes buffered, incomplete
	send(1, 1, small, true) // b: does not fit beside it
	finish(0, big)
	if st := outcome(0); st != (frames.Accepted{}) {
		t.Fatalf("the delivery that fitted: %v", st)
	}
	finish(1, small)
	r, ok := outcome(1).(*frames.Rejected)
	if !ok || r.Error == nil || r.Error.Condition != condResourceLimit {
		t.Fatalf("the delivery beyond the connection's bound: %v, want rejected with %s", r, condResourceLimit)
	}
	// The room came back: the same 2000 bytes go through now.
	send(1, 2, small, false)
	if st := outcome(2); st != (frames.Accepted{}) {
		t.Fatalf("after the room came back: %v", st)
	}
}
