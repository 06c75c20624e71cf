package amqp

import (
	"context"
	"errors"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// The dialect of uamqp (Azure's AMQP stack in C, under the Python SDK azure-servicebus
// 7.x): what it does that go-amqp and rhea users never do.

// rpcPair attaches, on one session, a request sender to node and a response receiver
// from node whose target is target, as uamqp's CBS and management clients do.
func rpcPair(t *testing.T, s *goamqp.Session, node, target string) (*goamqp.Sender, *goamqp.Receiver) {
	t.Helper()
	snd, err := s.NewSender(ctxT(t), node, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctxT(t), node, &goamqp.ReceiverOptions{TargetAddress: target})
	if err != nil {
		t.Fatal(err)
	}
	return snd, rcv
}

// receiveWithin returns the next message of rcv, failing after d.
func receiveWithin(t *testing.T, rcv *goamqp.Receiver, d time.Duration, what string) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("%s: no response: %v", what, err)
	}
	_ = rcv.AcceptMessage(ctxT(t), m)
	return m
}

// TestRPCWithoutReplyTo: uamqp sends its $cbs put-token and $management requests with a
// message-id but no reply-to. Service Bus answers them on the link the client attached
// with source $cbs (or the same management address) in the same session; so must we.
func TestRPCWithoutReplyTo(t *testing.T) {
	_, _, addr := testServer(t, nil)
	ctx := ctxT(t)
	conn := dialAnon(t, addr)
	// Another session of the connection with its own $cbs response link, attached
	// first: the answer must not go there.
	other, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, otherRcv := rpcPair(t, other, "$cbs", "cbs-other")
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}

	snd, rcv := rpcPair(t, s, "$cbs", "cbs")
	aud := "amqp://" + addr + "/q1"
	err = snd.Send(ctx, &goamqp.Message{
		Properties: &goamqp.MessageProperties{MessageID: "put-1"},
		ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken",
			"name": aud},
		Value: sign(aud, "RootManageSharedAccessKey", "secret-key", time.Now().Add(time.Hour)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receiveWithin(t, rcv, 10*time.Second, "put-token")
	if code, _ := m.ApplicationProperties["statusCode"].(int32); code != 202 {
		t.Fatalf("put-token statusCode %v (%v)", m.ApplicationProperties["statusCode"], m.ApplicationProperties["statusDescription"])
	}
	// uamqp reads the CBS draft's key names on $cbs.
	if code, _ := m.ApplicationProperties["status-code"].(int32); code != 202 {
		t.Fatalf("put-token status-code %v", m.ApplicationProperties["status-code"])
	}
	if _, ok := m.ApplicationProperties["status-description"].(string); !ok {
		t.Fatalf("put-token without status-description: %v", m.ApplicationProperties)
	}
	if m.Properties == nil || m.Properties.CorrelationID != "put-1" {
		t.Fatalf("correlation-id %+v, want put-1", m.Properties)
	}

	// The token works: a management request without reply-to on q1/$management.
	qs, err := s.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	msnd, mrcv := rpcPair(t, s, "q1/$management", "mgmt-uamqp")
	err = msnd.Send(ctx, &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: uint64(7)},
		ApplicationProperties: map[string]any{"operation": "com.microsoft:peek-message"},
		Value:                 map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m = receiveWithin(t, mrcv, 10*time.Second, "peek-message")
	if code, _ := m.ApplicationProperties["statusCode"].(int32); code != 200 {
		t.Fatalf("peek statusCode %v (%v)", m.ApplicationProperties["statusCode"], m.ApplicationProperties["statusDescription"])
	}
	if m.Properties == nil || m.Properties.CorrelationID != uint64(7) {
		t.Fatalf("correlation-id %+v, want 7", m.Properties)
	}

	// Nothing reached the other session's response link.
	octx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // an absence: bounded by a short wait
	defer cancel()
	if m, err := otherRcv.Receive(octx, nil); err == nil {
		t.Fatalf("a response went to another session: %v", m.ApplicationProperties)
	}
}

// TestAttachCarriesMaxMessageSize: every attach we answer says max-message-size; uamqp
// logs "Could not retrieve peer_max_message_size from attach frame" without it.
func TestAttachCarriesMaxMessageSize(t *testing.T) {
	_, _, addr := testServer(t, nil)
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	attaches := []*frames.Attach{
		{Name: "cbs-req", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{Address: "c"}, Target: &frames.Target{Address: "$cbs"}},
		{Name: "cbs-resp", Handle: 1, Role: frames.RoleReceiver, Source: &frames.Source{Address: "$cbs"}, Target: &frames.Target{Address: "cbs"}},
		{Name: "mgmt-resp", Handle: 2, Role: frames.RoleReceiver, Source: &frames.Source{Address: "q1/$management"}, Target: &frames.Target{Address: "m"}},
		{Name: "send", Handle: 3, Role: frames.RoleSender, Source: &frames.Source{}, Target: &frames.Target{Address: "q1"}},
		{Name: "recv", Handle: 4, Role: frames.RoleReceiver, Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}},
		{Name: "missing", Handle: 5, Role: frames.RoleReceiver, Source: &frames.Source{Address: "nope"}, Target: &frames.Target{}},
	}
	for _, a := range attaches {
		rc.frame(frames.TypeAMQP, 0, a, nil)
		for {
			b := rc.next()
			reply, ok := b.(*frames.Attach)
			if !ok {
				continue // flow, or the detach after a refusal
			}
			if reply.Name != a.Name {
				t.Fatalf("attach reply for %q while waiting for %q", reply.Name, a.Name)
			}
			if reply.MaxMessageSize == 0 {
				t.Errorf("attach reply for %q has no max-message-size", a.Name)
			}
			break
		}
	}
}

// TestSessionCloseAppliesSettlementsFirst: uamqp completes a session's messages with
// settled dispositions and detaches the link at once, without waiting for anything.
// The session lock must be released only after those settlements are applied, or they
// fail for want of the lock and the messages come back.
func TestSessionCloseAppliesSettlementsFirst(t *testing.T) {
	_, b, addr := testServer(t, nil)
	ctx := ctxT(t)
	send(t, rootClient(t, addr), "sq", &azservicebus.Message{Body: []byte("1"), SessionID: ptrTo("s")})
	s, err := dialPlain(t, addr).NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReceiver(ctx, "sq", &goamqp.ReceiverOptions{
		Credit:  1,
		Filters: []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x00000137000000C, "s")},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	gate, waiting := make(chan struct{}), make(chan struct{})
	b.mu.Lock()
	b.settleGate, b.settleWaiting = gate, waiting
	b.mu.Unlock()
	if err := r.AcceptMessage(ctx, m); err != nil { // mode first: settled, not waited for
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the settlement never reached the Backend")
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ctx) }()
	// The detach must wait for the settlement; a release that overtook it shows as the
	// session no longer held while the settlement is still held at the gate.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // an absence: bounded by a short wait
	defer cancel()
	early := false
	select {
	case err := <-closed:
		early = true
		t.Errorf("the link closed (%v) before its settlement was applied", err)
	case <-short.Done():
	}
	b.mu.Lock()
	b.settleGate = nil
	b.mu.Unlock()
	close(gate)
	if !early {
		if err := <-closed; err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	b.mu.Lock()
	left := len(b.entities["sq"].queues[0])
	b.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d message(s) left in the session after completing and closing", left)
	}
}

// TestRefusalNamesTheEntity: uamqp attaches with the full URI as address
// ("amqps://host/q1"); a refusal names the resource as Service Bus does,
// sb://<namespace host>/<entity path>, not the address pasted after it.
func TestRefusalNamesTheEntity(t *testing.T) {
	_, _, addr := testServer(t, nil)
	s, err := dialAnon(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewReceiver(ctxT(t), "amqps://127.0.0.1/q1/$DeadLetterQueue", nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("attach without a token: %v, want the server's refusal", err)
	}
	d := ae.Description
	if !strings.Contains(d, "Resource: 'sb://") || !strings.Contains(d, "/q1/$DeadLetterQueue'") || strings.Contains(d, "amqps://") {
		t.Fatalf("description %q: want Resource: 'sb://<host>/q1/$DeadLetterQueue'", d)
	}
}
