package amqp

import (
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// Codec benchmarks: the per-message work of the send and receive paths without
// sockets, so that allocs/op and B/op are exact counts.
//
//	go test -run '^$' -bench 'ParseClientMessage|EncodeDelivery' -benchmem ./amqp/

// sdkMessage is a 1 KiB message shaped like the SDK's SendMessage with a body only:
// header and an empty properties section, no message-id.
func sdkMessage(b *testing.B) []byte {
	b.Helper()
	raw, err := (&goamqp.Message{Header: &goamqp.MessageHeader{Durable: true},
		Properties: &goamqp.MessageProperties{}, Data: [][]byte{make([]byte, 1024)}}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkParseClientMessage: parse a sent message, check its limits and give it a
// message-id, as every transfer to an entity does.
func BenchmarkParseClientMessage(b *testing.B) {
	raw := sdkMessage(b)
	cfg := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseClientMessage(cfg, raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDelivery: the wire message of one peek-lock delivery of a stored
// message.
func BenchmarkEncodeDelivery(b *testing.B) {
	cfg := DefaultConfig()
	m, err := parseClientMessage(cfg, sdkMessage(b))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	d := &Delivery{Message: m, SequenceNumber: 7, EnqueuedTime: now, LockedUntil: now.Add(time.Minute),
		DeliveryCount: 1, LockToken: UUID{1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeDelivery(d, true); err != nil {
			b.Fatal(err)
		}
	}
}
