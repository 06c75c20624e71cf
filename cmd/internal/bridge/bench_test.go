package bridge

import (
	"testing"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/fsm"
)

// BenchmarkDeliveries: turning a receive's 100 stored messages (1 KiB each) into the
// deliveries the amqp layer sends; allocs/op and B/op are per 100 messages.
//
//	go test -run '^$' -bench Deliveries -benchmem ./cmd/internal/bridge/
func BenchmarkDeliveries(b *testing.B) {
	body := make([]byte, 1024)
	ms := make([]*fsm.Message, 100)
	for i := range ms {
		m := &fsm.Message{Payload: body, LockedUntil: 1_700_000_060_000, DeliveryCount: 1, LockToken: fsm.LockToken{1, byte(i)}}
		m.MessageID = "0123456789abcdef0123456789abcdef"
		m.SequenceNumber, m.EnqueuedTime = int64(i+1), 1_700_000_000_000
		ms[i] = m
	}
	b.ReportAllocs()
	for b.Loop() {
		if ds := deliveries(ms); len(ds) != len(ms) {
			b.Fatalf("%d deliveries", len(ds))
		}
	}
}

// BenchmarkToMessages: turning a sent batch of 100 messages (1 KiB each) into the
// cluster's messages; allocs/op and B/op are per 100 messages.
func BenchmarkToMessages(b *testing.B) {
	body := make([]byte, 1100)
	ms := make([]*amqp.Message, 100)
	for i := range ms {
		ms[i] = &amqp.Message{Raw: body, MessageID: "0123456789abcdef0123456789abcdef"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if out := toMessages(ms); len(out) != len(ms) {
			b.Fatalf("%d messages", len(out))
		}
	}
}
