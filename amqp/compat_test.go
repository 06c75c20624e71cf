package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
)

// Behaviours the SDKs' own test suites check (docs/compatibility.md): a message-id is
// assigned when missing (Test_Sender_MessageID); a client's delivery annotations reach
// the receiver, first-acquirer is false and x-opt-enqueue-sequence-number is absent
// (TestSender_SendAMQPMessageWithMultipleByteSlicesInData); a peek shows the count of
// the next delivery (TestDeferredMessages/Abandon); a bogus lock reads as Service Bus
// words it (TestReceiver_RenewMessageLock).
func TestSDKSuiteMessageShapes(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "q1", &azservicebus.Message{Body: []byte("no id")})
	s, err := c.NewSender("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.SendAMQPAnnotatedMessage(ctxT(t), &azservicebus.AMQPAnnotatedMessage{
		DeliveryAnnotations: map[any]any{"x-opt-da-test": "v"},
		Body:                azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("a"), []byte("b")}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ms := receiveN(t, r, 2)
	if ms[0].MessageID == "" || len(ms[0].MessageID) != 32 {
		t.Errorf("assigned message id %q, want 32 hex digits", ms[0].MessageID)
	}
	raw := ms[1].RawAMQPMessage
	if raw.DeliveryAnnotations["x-opt-da-test"] != "v" || raw.DeliveryAnnotations["x-opt-lock-token"] == nil {
		t.Errorf("delivery annotations %v", raw.DeliveryAnnotations)
	}
	if raw.Header == nil || raw.Header.FirstAcquirer || raw.MessageAnnotations["x-opt-enqueue-sequence-number"] != nil {
		t.Errorf("header %+v annotations %v", raw.Header, raw.MessageAnnotations)
	}
	if len(raw.Body.Data) != 2 || raw.Properties == nil || raw.Properties.MessageID == nil {
		t.Errorf("body %v properties %+v", raw.Body.Data, raw.Properties)
	}
	if err := r.AbandonMessage(ctxT(t), ms[0], nil); err != nil {
		t.Fatal(err)
	}
	p, err := r.PeekMessages(ctxT(t), 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ms[0].SequenceNumber})
	if err != nil || len(p) != 1 || p[0].DeliveryCount != 2 {
		t.Fatalf("peek after abandon: %v %+v, want DeliveryCount 2", err, p)
	}
	// A lock token that was never issued.
	bogus := *ms[1]
	bogus.LockToken = [16]byte{1, 2, 3}
	err = r.RenewMessageLock(ctxT(t), &bogus, nil)
	if err == nil || !strings.Contains(err.Error(), "status code 410 and description: The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue") {
		t.Fatalf("renew bogus lock: %v", err)
	}
}

// The JavaScript SDK attaches its reply links with no target address and uses the link
// name as reply-to; failed requests carry errorCondition, which it maps errors from.
func TestReplyLinkWithoutTargetAndErrorCondition(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q1/$management", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "q1/$management", &goamqp.ReceiverOptions{Name: "js-reply-link"})
	if err != nil {
		t.Fatal(err)
	}
	req := goamqp.NewMessage(nil)
	req.Value = map[string]any{"sequence-numbers": []int64{424242}, "receiver-settle-mode": uint32(1)}
	req.Properties = &goamqp.MessageProperties{MessageID: "req-1", ReplyTo: ptrTo("js-reply-link")}
	req.ApplicationProperties = map[string]any{"operation": "com.microsoft:receive-by-sequence-number"}
	if err := snd.Send(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ap := resp.ApplicationProperties
	if ap["statusCode"] != int32(404) || fmt.Sprint(ap["errorCondition"]) != "com.microsoft:message-not-found" {
		t.Fatalf("response %v", ap)
	}
}

// get-message-sessions with a last-updated-time lists the sessions with state, none for
// a future time, and every session for the SDK's "no filter" year 10000
// (TestClient_ListSessionsForQueue_SessionStateUpdatedAfter_Live).
func TestListSessionsUpdatedAfter(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "sq", &azservicebus.Message{Body: []byte("m"), SessionID: ptrTo("msg-only")})
	sr, err := c.AcceptSessionForQueue(ctxT(t), "sq", "with-state", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctxT(t), []byte("s"), nil); err != nil {
		t.Fatal(err)
	}
	if err := sr.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	list := func(after *time.Time) []string {
		t.Helper()
		var got []string
		p := c.NewListSessionsForQueuePager("sq", &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: after})
		for p.More() {
			page, err := p.NextPage(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Sessions...)
		}
		slices.Sort(got)
		return got
	}
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if got := list(&past); !slices.Equal(got, []string{"with-state"}) {
		t.Errorf("past cutoff: %v", got)
	}
	if got := list(&future); len(got) != 0 {
		t.Errorf("future cutoff: %v", got)
	}
	if got := list(nil); !slices.Equal(got, []string{"msg-only", "with-state"}) {
		t.Errorf("no cutoff: %v", got)
	}
}

// SessionId "" is a session of its own, not "no session" (the SDK's
// TestSessionReceiver_blankSessionIDs).
func TestSDKBlankSessionID(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "sq", &azservicebus.Message{Body: []byte("1"), SessionID: ptrTo("")},
		&azservicebus.Message{Body: []byte("other"), SessionID: ptrTo("x")})
	s, err := c.NewSender("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("2"), SessionID: ptrTo("")}}, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.AcceptSessionForQueue(ctxT(t), "sq", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if r.SessionID() != "" || r.LockedUntil().IsZero() {
		t.Fatalf("session %q locked until %v", r.SessionID(), r.LockedUntil())
	}
	ms := receiveN(t, r, 2)
	for _, m := range ms {
		if m.SessionID == nil || *m.SessionID != "" {
			t.Errorf("message %s session %v", m.Body, m.SessionID)
		}
		if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetSessionState(ctxT(t), []byte("s"), nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewListSessionsForQueuePager("sq", nil)
	var ids []string
	for p.More() {
		page, err := p.NextPage(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, page.Sessions...)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"", "x"}) {
		t.Errorf("sessions %q", ids)
	}
}

// A key without Send sending to a missing queue is told it lacks the claim, not that
// the queue is missing (the SDK's TestClientUnauthorizedCreds/ListenOnly_with_Sender).
func TestSDKLimitedKeyMissingEntity(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := sdkClient(t, addr, "listen", "listen-key")
	s, err := c.NewSender("testqueue", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	err = s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess ||
		!strings.Contains(err.Error(), "Description: Unauthorized access. 'Send' claim(s) are required to perform this operation") {
		t.Fatalf("send with a Listen key: %v", err)
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every refusal is visible in the log at the default level (info): a link refused at
// attach and a refused $cbs request.
func TestRefusalsAreLoggedAtInfo(t *testing.T) {
	var logs syncBuffer
	_, _, addr := testServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	c := sdkClient(t, addr, "RootManageSharedAccessKey", "wrong-key")
	s, err := c.NewSender("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Fatal("send with a wrong key succeeded")
	}
	good := rootClient(t, addr)
	r, err := good.NewReceiverForQueue("sq", nil) // a session queue: refused at attach
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.ReceiveMessages(ctxT(t), 1, nil); err == nil {
		t.Fatal("a non-session receive from a session queue succeeded")
	}
	out := logs.String()
	for _, want := range []string{"amqp: request refused", "operation=put-token", "status=401",
		"amqp: detaching link with an error", "condition=amqp:not-allowed"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// A second receiver on the same connection cannot accept a session the first holds,
// although session locks are owned per connection (the SDK's
// TestSessionReceiver_acceptSessionButAlreadyLocked); after the first closes, it can.
func TestSDKSecondAcceptOnSameConnection(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "sq", &azservicebus.Message{Body: []byte("1"), SessionID: ptrTo("s")})
	first, err := c.AcceptSessionForQueue(ctxT(t), "sq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AcceptSessionForQueue(ctxT(t), "sq", "s", nil)
	if err == nil || !strings.Contains(err.Error(), "com.microsoft:session-cannot-be-locked") {
		t.Fatalf("second accept on the same connection: %v", err)
	}
	if m := receiveN(t, first, 1); string(m[0].Body) != "1" {
		t.Fatalf("first receiver got %q", m[0].Body)
	}
	if err := first.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	again, err := c.AcceptSessionForQueue(ctxT(t), "sq", "s", nil)
	if err != nil {
		t.Fatalf("accept after the holder closed: %v", err)
	}
	again.Close(context.Background())
}
