package amqp

import (
	"reflect"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
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
		DeliveryAnnotations:   goamqp.Annotations{"x-hop": "kept"},
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
	if ma["x-opt-sequence-number"] != int64(42) || ma["x-opt-enqueue-sequence-number"] != nil {
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
	if got.DeliveryAnnotations["x-opt-lock-token"] != goamqp.UUID(d.LockToken) || got.DeliveryAnnotations["x-hop"] != "kept" {
		t.Fatalf("delivery annotations %#v", got.DeliveryAnnotations)
	}
	// header: delivery-count is the number of previous deliveries; ttl makes
	// ExpiresAt = EnqueuedTime + ttl; priority kept.
	// first-acquirer is false, as Service Bus sends it (TestSender_SendAMQPMessageWithMultipleByteSlicesInData).
	if got.Header.DeliveryCount != 2 || got.Header.TTL != 2*time.Minute || got.Header.Priority != 4 || got.Header.FirstAcquirer {
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

// TestApplicationPropertiesRoundTripEveryType: application properties of
// every AMQP simple type, including decimal and char (which go-amqp cannot
// decode), survive parsing and the re-encoding done after a modification.
func TestApplicationPropertiesRoundTripEveryType(t *testing.T) {
	props := Map{
		{Key: "null", Value: nil}, {Key: "bool", Value: true}, {Key: "ubyte", Value: uint8(1)}, {Key: "ushort", Value: uint16(2)},
		{Key: "uint", Value: uint32(3)}, {Key: "ulong", Value: uint64(4)}, {Key: "byte", Value: int8(-1)}, {Key: "short", Value: int16(-2)},
		{Key: "int", Value: int32(-3)}, {Key: "long", Value: int64(-4)}, {Key: "float", Value: float32(1.5)}, {Key: "double", Value: 2.5},
		{Key: "d32", Value: Decimal32{1, 2, 3, 4}}, {Key: "d64", Value: Decimal64{5}}, {Key: "d128", Value: Decimal128{6}},
		{Key: "char", Value: Char('é')}, {Key: "ts", Value: Timestamp(123)}, {Key: "uuid", Value: UUID{7}},
		{Key: "bin", Value: []byte{8}}, {Key: "str", Value: "s"}, {Key: "sym", Value: Symbol("y")},
	}
	raw := encodingAppend(t, nil, &Described{Descriptor: uint64(secAppProperties), Value: props})
	raw = encodingAppend(t, raw, &Described{Descriptor: uint64(secData), Value: []byte("b")})
	m, _, err := parseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ApplicationProperties) != len(props) {
		t.Fatalf("parsed %d properties", len(m.ApplicationProperties))
	}
	for i, p := range m.ApplicationProperties {
		if p.Key != props[i].Key.(string) || !reflect.DeepEqual(p.Value, props[i].Value) {
			t.Fatalf("property %d: %#v, want %#v", i, p, props[i])
		}
	}
	d := &Delivery{Message: m, Properties: m.ApplicationProperties, PropertiesModified: true, SequenceNumber: 1}
	out, err := encodeDelivery(d, false)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := parseMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.ApplicationProperties, m.ApplicationProperties) {
		t.Fatalf("re-encoded properties differ:\n%#v\n%#v", back.ApplicationProperties, m.ApplicationProperties)
	}
}

func encodingAppend(t *testing.T, b []byte, v any) []byte {
	t.Helper()
	out, err := encoding.Append(b, v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReencode: the broker changes system and application properties of a
// message (a rule action, S-TOP-1) and Raw follows; untouched fields keep
// their encoding, including a non-string message-id.
func TestReencode(t *testing.T) {
	src := &goamqp.Message{
		Header:                &goamqp.MessageHeader{TTL: time.Minute},
		Properties:            &goamqp.MessageProperties{MessageID: uint64(77), Subject: ptrTo("orig"), CorrelationID: "c1", To: ptrTo("to")},
		Annotations:           goamqp.Annotations{"x-opt-partition-key": "pk"},
		ApplicationProperties: map[string]any{"a": int64(1), "secret": "x"},
		Data:                  [][]byte{[]byte("body")},
	}
	raw, _ := src.MarshalBinary()
	m, _, err := parseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	m.Subject, m.CorrelationID, m.To = "changed", "c2", ""
	m.ApplicationProperties = []Property{{Key: "a", Value: int64(1)}, {Key: "routed", Value: "yes"}}
	if err := m.Reencode(); err != nil {
		t.Fatal(err)
	}
	var got goamqp.Message
	if err := got.UnmarshalBinary(m.Raw); err != nil {
		t.Fatal(err)
	}
	p := got.Properties
	if *p.Subject != "changed" || p.CorrelationID != "c2" || p.To != nil || p.MessageID != uint64(77) {
		t.Fatalf("properties %+v", p)
	}
	if got.ApplicationProperties["routed"] != "yes" || got.ApplicationProperties["secret"] != nil || got.ApplicationProperties["a"] != int64(1) {
		t.Fatalf("application properties %v", got.ApplicationProperties)
	}
	if got.Header.TTL != time.Minute || got.Annotations["x-opt-partition-key"] != "pk" || string(got.GetData()) != "body" {
		t.Fatal("other sections changed")
	}
	again, _, err := parseMessage(m.Raw)
	if err != nil || again.Subject != "changed" || again.CorrelationID != "c2" {
		t.Fatalf("re-parse: %+v %v", again, err)
	}
}
