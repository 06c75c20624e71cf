package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
)

// mgmtClient sends $management requests as the SDKs do: a sender to <entity>/$management
// and a receiver for the replies.
type mgmtClient struct {
	t   *testing.T
	snd *goamqp.Sender
	rcv *goamqp.Receiver
	n   int
}

func newMgmtClient(t *testing.T, addr, entity string) *mgmtClient {
	t.Helper()
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, entity+"/$management", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, entity+"/$management", &goamqp.ReceiverOptions{Name: "reply-" + entity, TargetAddress: "reply"})
	if err != nil {
		t.Fatal(err)
	}
	return &mgmtClient{t: t, snd: snd, rcv: rcv}
}

// call sends operation op with body and extra application properties and returns the
// response's status and body.
func (m *mgmtClient) call(op string, body map[string]any, props map[string]any) (int32, map[string]any, *goamqp.Message) {
	m.t.Helper()
	m.n++
	req := goamqp.NewMessage(nil)
	req.Value = body
	req.Properties = &goamqp.MessageProperties{MessageID: fmt.Sprintf("r%d", m.n), ReplyTo: ptrTo("reply")}
	req.ApplicationProperties = map[string]any{"operation": op}
	for k, v := range props {
		req.ApplicationProperties[k] = v
	}
	ctx := ctxT(m.t)
	if err := m.snd.Send(ctx, req, nil); err != nil {
		m.t.Fatal(err)
	}
	resp, err := m.rcv.Receive(ctx, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	_ = m.rcv.AcceptMessage(ctx, resp)
	status, _ := resp.ApplicationProperties["statusCode"].(int32)
	out, _ := resp.Value.(map[string]any)
	return status, out, resp
}

// peekedMessages decodes the messages of a peek-message answer.
func peekedMessages(t *testing.T, body map[string]any) []*goamqp.Message {
	t.Helper()
	list, _ := body["messages"].([]any)
	var out []*goamqp.Message
	for _, it := range list {
		raw, _ := it.(map[string]any)["message"].([]byte)
		var m goamqp.Message
		if err := m.UnmarshalBinary(raw); err != nil {
			t.Fatalf("peeked message: %v", err)
		}
		out = append(out, &m)
	}
	return out
}

// Peek with omit-message-body (the JavaScript SDK's peekMessages omitMessageBody) answers
// each message's properties, application properties and sequence number, no body; a peek
// without it still has the body. Also by session.
func TestPeekOmitMessageBody(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "q1", &azservicebus.Message{Body: []byte("payload"), MessageID: ptrTo("m1"),
		ApplicationProperties: map[string]any{"k": "v"}})
	send(t, c, "sq", &azservicebus.Message{Body: []byte("in-session"), SessionID: ptrTo("s1")},
		&azservicebus.Message{Body: []byte("other"), SessionID: ptrTo("s2")})

	m := newMgmtClient(t, addr, "q1")
	for _, omit := range []bool{true, false} {
		status, body, _ := m.call("com.microsoft:peek-message", map[string]any{
			"from-sequence-number": int64(1), "message-count": int32(10), "omit-message-body": omit}, nil)
		if status != 200 {
			t.Fatalf("omit=%v: status %d", omit, status)
		}
		ms := peekedMessages(t, body)
		if len(ms) != 1 {
			t.Fatalf("omit=%v: %d messages", omit, len(ms))
		}
		p := ms[0]
		if p.Properties == nil || p.Properties.MessageID != "m1" || p.ApplicationProperties["k"] != "v" ||
			p.Annotations["x-opt-sequence-number"] != int64(1) {
			t.Fatalf("omit=%v: properties %+v, application properties %v, annotations %v", omit, p.Properties, p.ApplicationProperties, p.Annotations)
		}
		if hasBody := len(p.Data) > 0 || p.Value != nil; hasBody == omit {
			t.Fatalf("omit=%v: data %q value %v", omit, p.Data, p.Value)
		}
	}

	ms := newMgmtClient(t, addr, "sq")
	status, body, _ := ms.call("com.microsoft:peek-message", map[string]any{
		"from-sequence-number": int64(1), "message-count": int32(10), "session-id": "s1", "omit-message-body": true}, nil)
	got := peekedMessages(t, body)
	if status != 200 || len(got) != 1 || got[0].Properties.GroupID == nil || *got[0].Properties.GroupID != "s1" || len(got[0].Data) != 0 {
		t.Fatalf("peek by session without bodies: status %d, %d messages", status, len(got))
	}
}

// deadlineBackend records the deadline of the context each Peek gets.
type deadlineBackend struct {
	*memBackend
	left chan time.Duration
}

func (d *deadlineBackend) Peek(ctx context.Context, a Address, sessionID string, from int64, n int) ([]*Delivery, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		d.left <- -1
	} else {
		d.left <- time.Until(dl)
	}
	return nil, nil
}

// Both spellings of the server timeout (server-timeout, the JavaScript and Go SDKs';
// com.microsoft:server-timeout, .NET's and Java's) bound the request on every management
// operation; without either the configured RPCTimeout does.
func TestManagementServerTimeoutBothSpellings(t *testing.T) {
	mb := newMemBackend()
	mb.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	b := &deadlineBackend{memBackend: mb, left: make(chan time.Duration, 1)}
	cfg := DefaultConfig()
	cfg.Addresses = []string{"127.0.0.1:0"}
	cfg.RPCTimeout = time.Hour
	s, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := newMgmtClient(t, s.Addrs()[0].String(), "q1")
	for _, c := range []struct {
		props map[string]any
		max   time.Duration
		min   time.Duration
	}{
		{map[string]any{"server-timeout": uint32(5000)}, 5 * time.Second, 0},
		{map[string]any{"com.microsoft:server-timeout": uint32(7000)}, 7 * time.Second, 0},
		{map[string]any{"com.microsoft:server-timeout": int64(9000)}, 9 * time.Second, 0},
		{nil, time.Hour, 59 * time.Minute},
	} {
		status, _, _ := m.call("com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(1), "message-count": int32(1)}, c.props)
		left := <-b.left
		if status != 204 || left <= c.min || left > c.max {
			t.Errorf("%v: status %d, deadline in %v, want in (%v, %v]", c.props, status, left, c.min, c.max)
		}
	}
}

func countOf(t *testing.T, body map[string]any) int32 {
	t.Helper()
	n, ok := body["message-count"].(int32)
	if !ok {
		t.Fatalf("answer without an int message-count: %v", body)
	}
	return n
}

// com.microsoft:batch-delete-messages as the SDKs send it (S-DEL-1..4): up to
// message-count messages enqueued before enqueued-time-utc, in sequence order, locked
// ones kept; the answer's message-count is how many went. More than 4,000, none, or a
// cutoff that is not a time is a bad request.
func TestBatchDeleteMessages(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	for i := range 5 {
		send(t, c, "q1", &azservicebus.Message{Body: []byte(fmt.Sprint(i))})
	}
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	locked := receiveN(t, r, 1)[0]

	m := newMgmtClient(t, addr, "q1")
	future := time.Now().Add(time.Hour)
	status, body, _ := m.call("com.microsoft:batch-delete-messages", map[string]any{
		"message-count": int32(2), "enqueued-time-utc": future}, nil)
	if status != 200 || countOf(t, body) != 2 {
		t.Fatalf("delete 2: status %d body %v", status, body)
	}
	peeked, err := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptrTo(int64(1))})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range peeked {
		left = append(left, string(p.Body))
	}
	if fmt.Sprint(left) != "[0 3 4]" {
		t.Fatalf("left %v, want the locked 0 and the newest two", left)
	}
	// A cutoff before every message deletes none: as a timestamp (.NET, JavaScript) or
	// as Unix milliseconds (the Python SDK's value before it is typed).
	for _, cutoff := range []any{time.Now().Add(-time.Hour), time.Now().Add(-time.Hour).UnixMilli()} {
		status, body, _ = m.call("com.microsoft:batch-delete-messages", map[string]any{
			"message-count": int32(10), "enqueued-time-utc": cutoff}, nil)
		if status != 200 || countOf(t, body) != 0 {
			t.Fatalf("delete before the first (%T): status %d body %v", cutoff, status, body)
		}
	}
	// Without a cutoff: now. The locked message stays.
	status, body, _ = m.call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(4000)}, nil)
	if status != 200 || countOf(t, body) != 2 {
		t.Fatalf("purge: status %d body %v", status, body)
	}
	if err := r.CompleteMessage(ctxT(t), locked, nil); err != nil {
		t.Fatalf("the locked message's lock was kept: %v", err)
	}

	for _, bad := range []map[string]any{
		{"message-count": int32(4001)},
		{"message-count": int32(0)},
		{},
		{"message-count": int32(1), "enqueued-time-utc": "yesterday"},
	} {
		status, _, resp := m.call("com.microsoft:batch-delete-messages", bad, nil)
		if status != 400 {
			t.Errorf("%v: status %d, want 400 (%v)", bad, status, resp.ApplicationProperties)
		}
	}
}

// A session receiver's batch delete (the session-id the JavaScript SDK sends) deletes
// that session's messages only; the dead-letter queue has its own.
func TestBatchDeleteSessionAndDeadLetter(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "sq", &azservicebus.Message{Body: []byte("a"), SessionID: ptrTo("s1")},
		&azservicebus.Message{Body: []byte("b"), SessionID: ptrTo("s2")},
		&azservicebus.Message{Body: []byte("c"), SessionID: ptrTo("s1")})
	m := newMgmtClient(t, addr, "sq")
	status, body, _ := m.call("com.microsoft:batch-delete-messages", map[string]any{
		"message-count": int32(10), "enqueued-time-utc": time.Now().Add(time.Minute), "session-id": "s1"}, nil)
	if status != 200 || countOf(t, body) != 2 {
		t.Fatalf("delete session s1: status %d body %v", status, body)
	}

	send(t, c, "q1", &azservicebus.Message{Body: []byte("x")}, &azservicebus.Message{Body: []byte("y")})
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, msg := range receiveN(t, r, 2) {
		if err := r.DeadLetterMessage(ctxT(t), msg, nil); err != nil {
			t.Fatal(err)
		}
	}
	dlq := newMgmtClient(t, addr, "q1/$DeadLetterQueue")
	status, body, _ = dlq.call("com.microsoft:batch-delete-messages", map[string]any{
		"message-count": int32(1), "enqueued-time-utc": time.Now().Add(time.Minute)}, nil)
	if status != 200 || countOf(t, body) != 1 {
		t.Fatalf("delete from the DLQ: status %d body %v", status, body)
	}
}

// A Backend without MessageDeleter answers 501 naming the operation.
func TestBatchDeleteNeedsTheCapability(t *testing.T) {
	mb := newMemBackend()
	mb.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	cfg := DefaultConfig()
	cfg.Addresses = []string{"127.0.0.1:0"}
	s, err := New(cfg, struct{ Backend }{mb})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := newMgmtClient(t, s.Addrs()[0].String(), "q1")
	status, _, resp := m.call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(1)}, nil)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	if status != 501 || fmt.Sprint(resp.ApplicationProperties["errorCondition"]) != condNotImplemented ||
		!strings.Contains(desc, "com.microsoft:batch-delete-messages") {
		t.Fatalf("status %d, %v", status, resp.ApplicationProperties)
	}
}

// An operation the broker does not implement answers 501 with amqp:not-implemented and a
// description naming it (docs/compatibility.md lists every operation and its status).
func TestUnknownManagementOperationNamesIt(t *testing.T) {
	_, _, addr := testServer(t, nil)
	m := newMgmtClient(t, addr, "q1")
	const op = "com.microsoft:no-such-operation"
	status, _, resp := m.call(op, map[string]any{}, nil)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	if status != 501 || fmt.Sprint(resp.ApplicationProperties["errorCondition"]) != condNotImplemented ||
		!strings.Contains(desc, "The operation '"+op+"' is not supported") {
		t.Fatalf("status %d, %v", status, resp.ApplicationProperties)
	}
}
