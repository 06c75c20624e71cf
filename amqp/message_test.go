package amqp

import (
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// TestEncodeDeliveryTypes checks the exact AMQP types the SDK asserts on
// (protocol.md §6.3, §11.4), using go-amqp as the decoder.
func TestEncodeDeliveryTypes(t *testing.T) {
	src := &goamqp.Message{
		Header:                &goamqp.MessageHeader{TTL: time.Minute, Priority: 4},
		Properties:            &goamqp.MessageProperties{MessageID: "m"},
		Annotations:           goamqp.Annotations{"x-opt-partition-key": "pk", "x-opt-sequence-number": int64(999)},
		ApplicationProperties: map[string]any{"keep": "me", "DeadLetterReason": "old"},
		Data:                  [][]byte{[]byte("b")},
		DeliveryAnnotations:   goamqp.Annotations{"x-hop": "dropped"},
	}
	raw, _ := src.MarshalBinary()
	m, _, err := parseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.PartitionKey != "pk" || m.TimeToLive != time.Minute || m.MessageID != "m" {
		t.Fatalf("parsed %+v", m)
	}
	enq := time.UnixMilli(1_700_000_000_000).UTC()
	d := &Delivery{Message: m, LockToken: UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SequenceNumber: 42,
		EnqueuedTime: enq, LockedUntil: enq.Add(time.Minute), DeliveryCount: 3, ExpiresAt: enq.Add(2 * time.Minute),
		State: StateDeferred, DeadLettered: true, DeadLetterReason: "why", DeadLetterDescription: "because", DeadLetterSource: "q0"}
	out, err := encodeDelivery(d, true)
	if err != nil {
		t.Fatal(err)
	}
	var got goamqp.Message
	if err := got.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	ma := got.Annotations
	if ma["x-opt-sequence-number"] != int64(42) || ma["x-opt-enqueue-sequence-number"] != int64(42) {
		t.Fatalf("sequence numbers must be long and the client's value replaced: %#v", ma)
	}
	if v, ok := ma["x-opt-enqueued-time"].(time.Time); !ok || !v.Equal(enq) {
		t.Fatalf("enqueued-time must be a timestamp: %#v", ma["x-opt-enqueued-time"])
	}
	if v, ok := ma["x-opt-locked-until"].(time.Time); !ok || !v.Equal(enq.Add(time.Minute)) {
		t.Fatalf("locked-until must be a timestamp: %#v", ma["x-opt-locked-until"])
	}
	if ma["x-opt-message-state"] != int32(1) || ma["x-opt-partition-key"] != "pk" || ma["x-opt-deadletter-source"] != "q0" {
		t.Fatalf("annotations %#v", ma)
	}
	if got.DeliveryAnnotations["x-opt-lock-token"] != goamqp.UUID(d.LockToken) || got.DeliveryAnnotations["x-hop"] != nil {
		t.Fatalf("delivery annotations %#v", got.DeliveryAnnotations)
	}
	// header: delivery-count is the number of previous deliveries; ttl makes
	// ExpiresAt = EnqueuedTime + ttl; priority kept.
	if got.Header.DeliveryCount != 2 || got.Header.TTL != 2*time.Minute || got.Header.Priority != 4 {
		t.Fatalf("header %+v", got.Header)
	}
	ap := got.ApplicationProperties
	if ap["keep"] != "me" || ap["DeadLetterReason"] != "why" || ap["DeadLetterErrorDescription"] != "because" {
		t.Fatalf("application properties %#v", ap)
	}
	if string(got.GetData()) != "b" || got.Properties.MessageID != "m" {
		t.Fatal("bare message changed")
	}
	tag := dotnetTag(d.LockToken)
	if string(tag) != string([]byte{4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Fatalf(".NET GUID order: %x", tag)
	}
}

// TestPreSettledSendAndCaseInsensitiveAddress: a pre-settled transfer is
// stored without an outcome (S-SEND-4); entity names match case-insensitively.
func TestPreSettledSendAndCaseInsensitiveAddress(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	snd, err := s.NewSender(ctx, "Q1", &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("fire-and-forget")), nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil || string(m.GetData()) != "fire-and-forget" {
		t.Fatalf("receive: %v", err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
}
