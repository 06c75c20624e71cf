package amqp

import (
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// FuzzMessage: parsing any bytes as a message, as a batch, or as an RPC
// request never panics, and a parsed message always re-encodes as a
// delivery that parses again with the same fields.
func FuzzMessage(f *testing.F) {
	m := &goamqp.Message{
		Header:                &goamqp.MessageHeader{TTL: time.Minute},
		Properties:            &goamqp.MessageProperties{MessageID: "id", GroupID: ptrTo("g")},
		Annotations:           goamqp.Annotations{"x-opt-partition-key": "pk"},
		ApplicationProperties: map[string]any{"a": int64(1)},
		Data:                  [][]byte{[]byte("body")},
	}
	raw, _ := m.MarshalBinary()
	f.Add(raw)
	f.Add([]byte{0x00, 0x53, 0x75, 0xa0, 0x00})
	f.Add([]byte{0x00, 0x53, 0x77, 0xc1, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = splitBatch(b)
		_, _ = parseRPC(b)
		msg, _, err := parseMessage(b)
		if err != nil {
			return
		}
		cp := *msg
		if err := cp.Reencode(); err == nil {
			again, _, err := parseMessage(cp.Raw)
			if err != nil || again.MessageID != msg.MessageID || again.Subject != msg.Subject || len(again.ApplicationProperties) != len(msg.ApplicationProperties) {
				t.Fatalf("Reencode changed the message: %v", err)
			}
		}
		d := &Delivery{Message: msg, SequenceNumber: 7, EnqueuedTime: time.UnixMilli(1), DeliveryCount: 2,
			LockedUntil: time.UnixMilli(2), DeadLettered: true, DeadLetterReason: "r"}
		out, err := encodeDelivery(d, true)
		if err != nil {
			return // e.g. an application-properties value the encoder cannot re-encode
		}
		back, _, err := parseMessage(out)
		if err != nil {
			t.Fatalf("re-parse of delivery: %v", err)
		}
		if back.MessageID != msg.MessageID || back.SessionID != msg.SessionID || back.PartitionKey != msg.PartitionKey {
			t.Fatalf("fields changed: %+v vs %+v", back, msg)
		}
	})
}

// FuzzSASL: any bytes in place of sasl-init end the handshake cleanly.
func FuzzSASL(f *testing.F) {
	f.Add(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00a\x00b")}, nil))
	f.Add(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "ANONYMOUS"}, nil))
	f.Add([]byte{0, 0, 0, 8, 2, 1, 0, 0})
	s, err := New(DefaultConfig(), newMemBackend())
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		s.ServeConn(server)
		_ = client.SetDeadline(time.Now().Add(2 * time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(io.Discard, client)
		}()
		_, _ = client.Write(append(frames.ProtoSASL[:], data...))
		_, _ = client.Write(frames.ProtoAMQP[:])
		client.Close()
		<-done
	})
}
