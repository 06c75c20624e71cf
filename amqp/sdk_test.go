package amqp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

func sdkClient(t *testing.T, addr, keyName, key string) *azservicebus.Client {
	t.Helper()
	cs := ConnectionString(addr, SASKey{Name: keyName, Key: key})
	c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func rootClient(t *testing.T, addr string) *azservicebus.Client {
	return sdkClient(t, addr, "RootManageSharedAccessKey", "secret-key")
}

func send(t *testing.T, c *azservicebus.Client, entity string, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, m := range msgs {
		if err := s.SendMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

type messageReceiver interface {
	ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

func receiveN(t *testing.T, r messageReceiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var out []*azservicebus.ReceivedMessage
	ctx := ctxT(t)
	for len(out) < n {
		// Wait for all that is missing, leaving the SDK no credit to release what
		// arrives after the call returns: a released message comes back behind
		// those already sent (S-RCV-2), out of the order the tests check.
		ms, err := r.ReceiveMessages(ctx, n-len(out), &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Minute})
		if err != nil {
			t.Fatalf("receive: %v (have %d of %d)", err, len(out), n)
		}
		out = append(out, ms...)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// TestSDKSendReceiveComplete: the unmodified SDK sends every message
// property and application-property type, receives in peek-lock and
// completes. S-SEND-1, S-SEND-5, S-RCV-1, S-LOCK-1, S-LOCK-2, S-LOCK-5.
func TestSDKSendReceiveComplete(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	ts := time.UnixMilli(1700000000123).UTC()
	send(t, c, "q1", &azservicebus.Message{
		Body: []byte("payload"), MessageID: ptrTo("mid"), CorrelationID: ptrTo("cid"), Subject: ptrTo("subj"),
		ContentType: ptrTo("text/plain"), To: ptrTo("to"), ReplyTo: ptrTo("rt"), TimeToLive: ptrTo(90 * time.Second),
		PartitionKey: ptrTo("pk"),
		ApplicationProperties: map[string]any{"s": "x", "i": 7, "i32": int32(-3), "f": 1.5, "b": true, "t": ts,
			"u8": uint8(1), "bin": []byte{9}},
	})
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	m := receiveN(t, r, 1)[0]
	if string(m.Body) != "payload" || m.MessageID != "mid" || *m.CorrelationID != "cid" || *m.Subject != "subj" ||
		*m.ContentType != "text/plain" || *m.To != "to" || *m.ReplyTo != "rt" || *m.TimeToLive != 90*time.Second ||
		*m.PartitionKey != "pk" {
		t.Fatalf("message fields: %+v", m)
	}
	if m.DeliveryCount != 1 || *m.SequenceNumber != 1 || m.EnqueuedTime == nil || m.LockedUntil == nil ||
		m.ExpiresAt == nil || !m.ExpiresAt.Equal(m.EnqueuedTime.Add(90*time.Second)) {
		t.Fatalf("broker fields: dc=%d seq=%v enq=%v locked=%v exp=%v", m.DeliveryCount, m.SequenceNumber, m.EnqueuedTime, m.LockedUntil, m.ExpiresAt)
	}
	ap := m.ApplicationProperties
	if ap["s"] != "x" || ap["i"] != int64(7) || ap["i32"] != int32(-3) || ap["f"] != 1.5 || ap["b"] != true ||
		!ap["t"].(time.Time).Equal(ts) || ap["u8"] != uint8(1) || string(ap["bin"].([]byte)) != "\x09" {
		t.Fatalf("application properties: %#v", ap)
	}
	if m.LockToken == [16]byte{} {
		t.Fatal("no lock token")
	}
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
	// S-LOCK-12: the same complete again (by lock token, through $management) gets the
	// first outcome; S-LOCK-9: any other settlement of the ended lock is lock-lost.
	if err := r.CompleteMessage(ctxT(t), &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil); err != nil {
		t.Fatalf("second complete: %v", err)
	}
	err = r.AbandonMessage(ctxT(t), &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("abandon after complete: %v", err)
	}
}

// TestSDKAbandonDeadLetterDefer covers abandon with property changes
// (S-LOCK-3, S-LOCK-5), dead-letter with reason (S-LOCK-6, S-DLQ-1), defer
// and receive-deferred (S-LOCK-7), renew lock (S-LOCK-8) and peek (S-LOCK-11).
func TestSDKAbandonDeadLetterDefer(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "q1", &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")})
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := ctxT(t)

	m := receiveN(t, r, 1)[0]
	if err := r.AbandonMessage(ctx, m, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"hello": "world"}}); err != nil {
		t.Fatal(err)
	}
	m = receiveN(t, r, 1)[0]
	if string(m.Body) != "a" || m.DeliveryCount != 2 || m.ApplicationProperties["hello"] != "world" {
		t.Fatalf("after abandon: body=%s dc=%d props=%v", m.Body, m.DeliveryCount, m.ApplicationProperties)
	}
	before := *m.LockedUntil
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if m.LockedUntil.Before(before) {
		t.Fatalf("renew did not extend: %v -> %v", before, m.LockedUntil)
	}
	if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: ptrTo("bad"), ErrorDescription: ptrTo("why")}); err != nil {
		t.Fatal(err)
	}

	m2 := receiveN(t, r, 1)[0]
	if string(m2.Body) != "b" {
		t.Fatalf("got %s", m2.Body)
	}
	if err := r.DeferMessage(ctx, m2, nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateDeferred || *peeked[0].SequenceNumber != 2 {
		t.Fatalf("peek: %d messages", len(peeked))
	}
	def, err := r.ReceiveDeferredMessages(ctx, []int64{*m2.SequenceNumber}, nil)
	if err != nil || len(def) != 1 {
		t.Fatalf("receive deferred: %v %d", err, len(def))
	}
	if def[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("deferred state %v", def[0].State)
	}
	if err := r.CompleteMessage(ctx, def[0], nil); err != nil {
		t.Fatal(err)
	}

	dlq, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(context.Background())
	d := receiveN(t, dlq, 1)[0]
	if string(d.Body) != "a" || *d.DeadLetterReason != "bad" || *d.DeadLetterErrorDescription != "why" || d.ApplicationProperties["hello"] != "world" {
		t.Fatalf("dlq message: %s reason=%v desc=%v props=%v", d.Body, d.DeadLetterReason, d.DeadLetterErrorDescription, d.ApplicationProperties)
	}
	if err := dlq.CompleteMessage(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSDKBatchScheduleReceiveAndDelete: batches are stored all together
// (S-SEND-5), scheduled messages are peekable as scheduled and can be
// cancelled (S-SCH-1), receive-and-delete consumes (S-RCV-1).
func TestSDKBatchScheduleReceiveAndDelete(t *testing.T) {
	_, b, addr := testServer(t, nil)
	c := rootClient(t, addr)
	ctx := ctxT(t)
	s, err := c.NewSender("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	batch, err := s.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte{byte('0' + i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}, {Body: []byte("cancel-me")}}, time.Now().Add(time.Hour), nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("schedule: %v %v", seqs, err)
	}
	if err := s.CancelScheduledMessages(ctx, seqs[1:], nil); err != nil {
		t.Fatal(err)
	}
	// A plain send with ScheduledEnqueueTime is scheduled too.
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("sched2"), ScheduledEnqueueTime: ptrTo(time.Now().Add(time.Hour))}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	got := receiveN(t, r, 3)
	for i, m := range got {
		if string(m.Body) != string(rune('0'+i)) {
			t.Fatalf("batch message %d = %q", i, m.Body)
		}
	}
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 || peeked[0].State != azservicebus.MessageStateScheduled || string(peeked[0].Body) != "later" || string(peeked[1].Body) != "sched2" {
		t.Fatalf("peek after RAD: %d", len(peeked))
	}
	b.mu.Lock()
	n := len(b.entities["q1"].queues[0])
	b.mu.Unlock()
	if n != 2 {
		t.Fatalf("queue holds %d messages, want the 2 scheduled ones", n)
	}
}

// TestSDKSessions: named and next-available sessions, exclusive lock,
// state set/get/clear, renew, list. S-SES-1..5.
func TestSDKSessions(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	ctx := ctxT(t)
	send(t, c, "sq", &azservicebus.Message{Body: []byte("a1"), SessionID: ptrTo("A")},
		&azservicebus.Message{Body: []byte("b1"), SessionID: ptrTo("B")},
		&azservicebus.Message{Body: []byte("a2"), SessionID: ptrTo("A")})

	// S-SES-1: a non-session receiver on a session entity is refused.
	nr, err := c.NewReceiverForQueue("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nr.ReceiveMessages(ctx, 1, nil); err == nil {
		t.Fatal("non-session receive on a session queue succeeded")
	}
	nr.Close(ctx)

	sr, err := c.AcceptSessionForQueue(ctx, "sq", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sr.SessionID() != "A" || sr.LockedUntil().Before(time.Now()) {
		t.Fatalf("session %q locked until %v", sr.SessionID(), sr.LockedUntil())
	}
	// S-SES-2: exclusive.
	if _, err := c.AcceptSessionForQueue(ctx, "sq", "A", nil); err == nil {
		t.Fatal("second accept of a locked session succeeded")
	}
	ms := receiveN(t, sr, 2)
	if string(ms[0].Body) != "a1" || string(ms[1].Body) != "a2" || *ms[0].SessionID != "A" {
		t.Fatalf("session messages %s %s", ms[0].Body, ms[1].Body)
	}
	for _, m := range ms {
		if err := sr.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := sr.GetSessionState(ctx, nil); err != nil || st != nil {
		t.Fatalf("initial state %v %v", st, err)
	}
	if err := sr.SetSessionState(ctx, []byte("st"), nil); err != nil {
		t.Fatal(err)
	}
	if st, err := sr.GetSessionState(ctx, nil); err != nil || string(st) != "st" {
		t.Fatalf("state %q %v", st, err)
	}
	if err := sr.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pager := c.NewListSessionsForQueuePager("sq", nil)
	var ids []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, page.Sessions...)
	}
	if len(ids) != 2 {
		t.Fatalf("sessions %v", ids)
	}
	if err := sr.SetSessionState(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := sr.GetSessionState(ctx, nil); err != nil || st != nil {
		t.Fatalf("cleared state %v %v", st, err)
	}
	sr.Close(ctx)

	next, err := c.AcceptNextSessionForQueue(ctx, "sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if next.SessionID() != "B" {
		t.Fatalf("next session %q", next.SessionID())
	}
	m := receiveN(t, next, 1)[0]
	if err := next.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	next.Close(ctx)

	// No session left: accept-next times out.
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err = c.AcceptNextSessionForQueue(short, "sq", nil)
	var sbErr *azservicebus.Error
	if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) {
		t.Fatalf("accept next with nothing available: %v", err)
	}
}

// TestSDKTopicSubscription: a message sent to a topic reaches the
// subscription (S-TOP-1, true filter).
func TestSDKTopicSubscription(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	send(t, c, "t1", &azservicebus.Message{Body: []byte("fanout")})
	r, err := c.NewReceiverForSubscription("t1", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	m := receiveN(t, r, 1)[0]
	if string(m.Body) != "fanout" {
		t.Fatalf("got %s", m.Body)
	}
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSDKErrors: not-found (404 from put-token), unauthorized (Listen key
// sending), message too large. S-SEND-2, S-SEND-6.
func TestSDKErrors(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	ctx := ctxT(t)
	var sbErr *azservicebus.Error

	s, _ := c.NewSender("nope", nil)
	err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeNotFound {
		t.Fatalf("send to missing entity: %v", err)
	}

	lc := sdkClient(t, addr, "listen", "listen-key")
	ls, _ := lc.NewSender("q1", nil)
	err = ls.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("send with a listen key: %v", err)
	}

	bad := sdkClient(t, addr, "RootManageSharedAccessKey", "wrong")
	bs, _ := bad.NewSender("q1", nil)
	err = bs.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("send with a bad key: %v", err)
	}

	s2, _ := c.NewSender("q1", nil)
	err = s2.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 300*1024)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("oversize send: %v", err)
	}
}

// TestSDKFreshClientSubQueueAndSubscription: a client whose only claims are
// for a dead-letter queue or a subscription can use them (CBS prefix rules,
// protocol.md §3).
func TestSDKFreshClientSubQueueAndSubscription(t *testing.T) {
	_, _, addr := testServer(t, nil)
	send(t, rootClient(t, addr), "t1", &azservicebus.Message{Body: []byte("x")})
	c := rootClient(t, addr)
	ctx := ctxT(t)
	dlq, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	if _, err := dlq.PeekMessages(ctx, 1, nil); err != nil {
		t.Fatalf("peek on the dead-letter queue: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := dlq.ReceiveMessages(short, 1, nil); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive on the dead-letter queue: %v", err)
	}
	c2 := rootClient(t, addr)
	sub, err := c2.NewReceiverForSubscription("t1", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	if m := receiveN(t, sub, 1)[0]; string(m.Body) != "x" {
		t.Fatalf("body %q", m.Body)
	}
}

// TestSDKExpiredSessionLockIsLost: once a holder's session lock expired and
// another client accepted the session, the old holder can neither renew,
// receive, nor release the new holder's lock by closing. S-SES-2, S-SES-4, S-SES-6.
//
// Lock times run on a manual clock: A's lock expires exactly when the test moves the
// clock past it, and B's never does, however slow the machine.
func TestSDKExpiredSessionLockIsLost(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	_, b, addr := testServer(t, func(c *Config) { c.Clock = clk })
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "ssq", RequiresSession: true, LockDuration: 30 * time.Second})
	ctx := ctxT(t)
	send(t, rootClient(t, addr), "ssq", &azservicebus.Message{Body: []byte("1"), SessionID: ptrTo("s")})
	a, err := rootClient(t, addr).AcceptSessionForQueue(ctx, "ssq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, a, 1)
	clk.Advance(31 * time.Second) // A's 30 s session lock expires
	bRecv, err := rootClient(t, addr).AcceptSessionForQueue(ctx, "ssq", "s", nil)
	if err != nil {
		t.Fatalf("B could not accept the expired session: %v", err)
	}
	defer bRecv.Close(ctx)
	if err := bRecv.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.RenewSessionLock(ctx, nil); err == nil {
		t.Error("A renewed the session lock B holds")
	}
	send(t, rootClient(t, addr), "ssq", &azservicebus.Message{Body: []byte("2"), SessionID: ptrTo("s")})
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if got, _ := a.ReceiveMessages(short, 1, nil); len(got) != 0 {
		t.Errorf("A received %q from the session B holds", got[0].Body)
	}
	if err := bRecv.RenewSessionLock(ctx, nil); err != nil { // B still holds the lock
		t.Fatal(err)
	}
	a.Close(ctx)
	short2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if c, err := rootClient(t, addr).AcceptSessionForQueue(short2, "ssq", "s", nil); err == nil {
		c.Close(ctx)
		t.Error("a third client accepted the session B holds (A's close released B's lock)")
	}
}

// TestSDKEntityLevelKey: an entity-level Listen rule (primary or secondary
// key) can receive from its entity but not send to it, nor reach another
// entity. protocol.md §3, S-SEND-2.
func TestSDKEntityLevelKey(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.mu.Lock()
	b.entityKeys["q1"] = map[string]SASKey{"listener": {Name: "listener", Key: "primary-k", SecondaryKey: "secondary-k", Rights: RightListen}}
	b.mu.Unlock()
	send(t, rootClient(t, addr), "q1", &azservicebus.Message{Body: []byte("x")}, &azservicebus.Message{Body: []byte("y")})
	ctx := ctxT(t)
	var sbErr *azservicebus.Error
	for _, key := range []string{"primary-k", "secondary-k"} {
		c := sdkClient(t, addr, "listener", key)
		r, err := c.NewReceiverForQueue("q1", nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveN(t, r, 1)[0]
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatalf("%s: complete: %v", key, err)
		}
		s, _ := c.NewSender("q1", nil)
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("z")}, nil); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
			t.Fatalf("%s: send with a listen-only entity key: %v", key, err)
		}
		other, _ := c.NewReceiverForQueue("sq", nil)
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = other.ReceiveMessages(short, 1, nil)
		cancel()
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
			t.Fatalf("%s: another entity with q1's key: %v", key, err)
		}
	}
}

// TestSDKLateSessionCompleteFails: a session receiver whose session lock expired while it
// held received messages cannot complete one of them, and the SDK reports the failure.
// The chaos run of seed 819341 found the SDK reporting success instead: the broker
// answered the late disposition with a settled rejection (session-lock-lost), which
// go-amqp records as the message's settlement; the SDK, which retries that condition
// with a new connection, then re-sent nothing and returned nil. Its reconnect had
// meanwhile re-accepted the (by then free) session, so the stale receiver went on to
// overwrite the session state the next holder had set. S-SES-6; protocol.md §8.
func TestSDKLateSessionCompleteFails(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	_, b, addr := testServer(t, func(c *Config) { c.Clock = clk })
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "ssq", RequiresSession: true, LockDuration: 30 * time.Second})
	ctx := ctxT(t)
	send(t, rootClient(t, addr), "ssq",
		&azservicebus.Message{Body: []byte("1"), SessionID: ptrTo("s")},
		&azservicebus.Message{Body: []byte("2"), SessionID: ptrTo("s")})
	a, err := rootClient(t, addr).AcceptSessionForQueue(ctx, "ssq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	stale := receiveN(t, a, 2)    // the link has no credit left: nothing detaches it
	clk.Advance(31 * time.Second) // A's session lock expires

	// B takes the session over, completes the first message, records it and leaves.
	bRecv, err := rootClient(t, addr).AcceptSessionForQueue(ctx, "ssq", "s", nil)
	if err != nil {
		t.Fatalf("B could not accept the expired session: %v", err)
	}
	m := receiveN(t, bRecv, 1)[0]
	if string(m.Body) != "1" {
		t.Fatalf("B received %q first", m.Body)
	}
	if err := bRecv.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := bRecv.SetSessionState(ctx, []byte("B"), nil); err != nil {
		t.Fatal(err)
	}
	if err := bRecv.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A, late, completes the message B completed. The SDK retries a session's lost lock
	// for longer than a test waits (its settlement retries ignore the client's retry
	// options), so the answer may be lock lost or the caller's deadline: anything but
	// success. Before the fix the false success came with the SDK's first retry, about
	// 4 s in.
	late, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := a.CompleteMessage(late, stale[0], nil); err == nil {
		t.Error("A's late complete of a message B had completed reported success")
	} else {
		t.Logf("A's late complete: %v", err)
	}
	a.Close(ctx)
	c, err := rootClient(t, addr).AcceptSessionForQueue(ctx, "ssq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if st, err := c.GetSessionState(ctx, nil); err != nil || string(st) != "B" {
		t.Errorf("session state %q (%v), want B's", st, err)
	}
	if m := receiveN(t, c, 1)[0]; string(m.Body) != "2" {
		t.Errorf("the next holder received %q, want 2", m.Body)
	}
}
