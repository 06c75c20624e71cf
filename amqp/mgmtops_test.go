package amqp

import (
	"context"
	"fmt"
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
