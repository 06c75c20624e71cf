package e2e

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// boundedCtx is for calls that must fail fast: the SDK's own live tests expect
// not-found within 10 s (protocol.md §3).
func boundedCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestErrors covers what a client sees when something is refused: missing entities,
// bad credentials, disabled entities, and lock loss by entity update.
func TestErrors(t *testing.T) {
	e := newEnv(t)

	// S-SEND-2: a missing entity gives CodeNotFound quickly, for senders, receivers and
	// session receivers, with a TrackingId in the description.
	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		e := e.isolated(t)
		s, err := e.c.NewSender("no-such-queue", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.SendMessage(boundedCtx(t), body("x"), nil)
		wantCode(t, err, azservicebus.CodeNotFound)
		if !strings.Contains(err.Error(), "TrackingId:") {
			t.Errorf("not-found error without TrackingId: %v", err)
		}
		r, err := e.c.NewReceiverForQueue("no-such-queue", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.ReceiveMessages(boundedCtx(t), 1, nil)
		wantCode(t, err, azservicebus.CodeNotFound)

		_, err = e.c.AcceptSessionForQueue(boundedCtx(t), "no-such-queue", "s", nil)
		wantCode(t, err, azservicebus.CodeNotFound)

		tp := e.topic(t, "nfsub", nil, "exists")
		rs, err := e.c.NewReceiverForSubscription(tp, "missing", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = rs.ReceiveMessages(boundedCtx(t), 1, nil)
		wantCode(t, err, azservicebus.CodeNotFound)
	})

	// S-SEND-2: a deleted entity is not found any more.
	t.Run("Deleted", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "deleted", nil)
		send(t, e.sender(t, q), body("x"))
		if _, err := e.admin.DeleteQueue(testCtx(t), q, nil); err != nil {
			t.Fatal(err)
		}
		s, err := e.n.Client(t).NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.SendMessage(boundedCtx(t), body("y"), nil), azservicebus.CodeNotFound)
	})

	// S-SEND-2: a token signed with a wrong key, or naming an unknown key, is refused
	// with CodeUnauthorizedAccess and is not retried for long.
	t.Run("Unauthorized", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "auth", nil)
		key := regexp.MustCompile(`SharedAccessKey=[^;]*`)
		name := regexp.MustCompile(`SharedAccessKeyName=[^;]*`)
		for label, cs := range map[string]string{
			"wrong key":       key.ReplaceAllString(e.n.ConnectionString, "SharedAccessKey=d3Jvbmcta2V5LXZhbHVlLTEyMzQ1Njc4OTAxMjM0NTY="),
			"unknown keyname": name.ReplaceAllString(e.n.ConnectionString, "SharedAccessKeyName=NoSuchKey"),
		} {
			c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
				RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 100 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			s, err := c.NewSender(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = s.SendMessage(boundedCtx(t), body("x"), nil)
			if sbCode(err) != azservicebus.CodeUnauthorizedAccess {
				t.Errorf("%s: send error %v, want CodeUnauthorizedAccess", label, err)
			}
			r, err := c.NewReceiverForQueue(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.ReceiveMessages(boundedCtx(t), 1, nil)
			if sbCode(err) != azservicebus.CodeUnauthorizedAccess {
				t.Errorf("%s: receive error %v, want CodeUnauthorizedAccess", label, err)
			}
		}
		// Nothing got in.
		if p := peekAll(t, e.receiver(t, q, nil)); len(p) != 0 {
			t.Fatalf("unauthorized sends stored %d messages", len(p))
		}
	})

	// S-ENT-2: Status SendDisabled refuses sends but allows receives; ReceiveDisabled the
	// opposite; Active restores both.
	t.Run("EntityStatus", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "status", nil)
		send(t, e.sender(t, q), body("before"))
		setStatus := func(st admin.EntityStatus) {
			t.Helper()
			got, err := e.admin.GetQueue(testCtx(t), q, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := got.QueueProperties
			p.Status = to.Ptr(st)
			if _, err := e.admin.UpdateQueue(testCtx(t), q, p, nil); err != nil {
				t.Fatal(err)
			}
		}

		setStatus(admin.EntityStatusSendDisabled)
		c := e.n.Client(t)
		s, err := c.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMessage(boundedCtx(t), body("refused"), nil); err == nil {
			t.Errorf("send to a SendDisabled queue succeeded")
		}
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "before" {
			t.Fatalf("got %q", m.Body)
		}
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}

		setStatus(admin.EntityStatusReceiveDisabled)
		c2 := e.n.Client(t)
		send(t, func() *azservicebus.Sender {
			s, err := c2.NewSender(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), body("stored"))
		r2, err := c2.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if msgs, err := r2.ReceiveMessages(ctx, 1, nil); err == nil || len(msgs) != 0 {
			t.Errorf("receive from a ReceiveDisabled queue: %d messages, err %v", len(msgs), err)
		}

		setStatus(admin.EntityStatusActive)
		r3 := e.receiver(t, q, nil)
		if m := receiveOne(t, r3, 10*time.Second); string(m.Body) != "stored" {
			t.Fatalf("after re-enabling got %q", m.Body)
		}
	})

	// S-ENT-3: updating an entity's properties while a message is locked releases the
	// lock: the holder gets lock-lost and the message is available again at once.
	t.Run("UpdateReleasesLocks", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "update", nil) // 60 s lock: redelivery within seconds proves the release
		send(t, e.sender(t, q), body("x"))
		// Its own client (connection): on a fatal link error (DeleteWhileReceiving's
		// amqp:not-found) the SDK closes the client's whole connection, which would turn
		// this subtest's lock-lost into connlost.
		r, err := e.n.Client(t).NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r, 10*time.Second)
		got, err := e.admin.GetQueue(testCtx(t), q, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := got.QueueProperties
		p.MaxDeliveryCount = to.Ptr[int32](7)
		if _, err := e.admin.UpdateQueue(testCtx(t), q, p, nil); err != nil {
			t.Fatal(err)
		}
		wantCode(t, r.RenewMessageLock(testCtx(t), m, nil), azservicebus.CodeLockLost)
		wantCode(t, r.CompleteMessage(testCtx(t), m, nil), azservicebus.CodeLockLost)
		m2 := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		if *m2.SequenceNumber != *m.SequenceNumber {
			t.Fatalf("got another message")
		}
	})
	// S-ENT-2: properties out of bounds are refused at creation; RequiresSession is
	// fixed at creation.
	t.Run("EntityBounds", func(t *testing.T) {
		t.Parallel()
		for label, p := range map[string]*admin.QueueProperties{
			"LockDuration 1s":     {LockDuration: to.Ptr("PT1S")},
			"LockDuration 6m":     {LockDuration: to.Ptr("PT6M")},
			"MaxDeliveryCount 0":  {MaxDeliveryCount: to.Ptr[int32](0)},
			"dedup window 10s":    {RequiresDuplicateDetection: to.Ptr(true), DuplicateDetectionHistoryTimeWindow: to.Ptr("PT10S")},
			"AutoDeleteOnIdle 1m": {AutoDeleteOnIdle: to.Ptr("PT1M")},
		} {
			q := name("bounds")
			if _, err := e.admin.CreateQueue(testCtx(t), q, &admin.CreateQueueOptions{Properties: p}); err == nil {
				t.Errorf("%s: queue created", label)
			}
		}
		q := e.queue(t, "fixed", nil)
		got, err := e.admin.GetQueue(testCtx(t), q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := got.LockDuration; d == nil || *d != "PT1M" {
			t.Errorf("default LockDuration %v, want PT1M", deref(d))
		}
		if c := got.MaxDeliveryCount; c == nil || *c != 10 {
			t.Errorf("default MaxDeliveryCount %v, want 10", deref(c))
		}
		p := got.QueueProperties
		p.RequiresSession = to.Ptr(true)
		if _, err := e.admin.UpdateQueue(testCtx(t), q, p, nil); err == nil {
			t.Errorf("RequiresSession changed after creation")
		}
	})

	// S-ENT-1, S-SEND-5: runtime counts follow what clients do: active, scheduled,
	// dead-lettered.
	t.Run("RuntimeCounts", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "counts", nil)
		s := e.sender(t, q)
		send(t, s, body("a"), body("b"), body("c"))
		if _, err := s.ScheduleMessages(testCtx(t), []*azservicebus.Message{body("later")}, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.DeadLetterMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		rp, err := e.admin.GetQueueRuntimeProperties(testCtx(t), q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rp.ActiveMessageCount != 2 || rp.ScheduledMessageCount != 1 || rp.DeadLetterMessageCount != 1 || rp.TotalMessageCount != 4 {
			t.Errorf("counts: active %d scheduled %d dead-letter %d total %d; want 2 1 1 4",
				rp.ActiveMessageCount, rp.ScheduledMessageCount, rp.DeadLetterMessageCount, rp.TotalMessageCount)
		}
		if rp.SizeInBytes <= 0 {
			t.Errorf("SizeInBytes %d", rp.SizeInBytes)
		}
	})
	// S-SEND-2: deleting an entity ends a receive that is waiting on it with an error,
	// well before the receive's own deadline.
	t.Run("DeleteWhileReceiving", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "delrecv", nil)
		send(t, e.sender(t, q), body("x"))
		c, tp := e.tapped(t) // own connection: this subtest provokes link errors
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r, 10*time.Second) // the link is attached
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		flows := len(tp.sent(perfFlow))
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := r.ReceiveMessages(ctx, 1, nil)
			done <- err
		}()
		// The receive's credit (the SDK grants it per call) has reached the broker, which
		// has nothing to deliver: the receive is waiting when the queue goes.
		tp.waitSent(t, perfFlow, flows)
		select {
		case err := <-done:
			t.Fatalf("receive ended before the delete: %v", err)
		default:
		}
		if _, err := e.admin.DeleteQueue(testCtx(t), q, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("receive on a deleted queue ended with %v, want an entity error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("receive still waiting 20s after its queue was deleted")
		}
	})
	// S-SEND-2, protocol.md §3: a key with only the Listen right (an entity-level
	// authorization rule; the admin API offers no other way to make one) receives but
	// cannot send: CodeUnauthorizedAccess.
	t.Run("ListenOnlyEntityKey", func(t *testing.T) {
		t.Parallel()
		const key = "bGlzdGVuLW9ubHkta2V5LTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE="
		q := e.queue(t, "listen", &admin.QueueProperties{
			AuthorizationRules: []admin.AuthorizationRule{{KeyName: to.Ptr("listener"), AccessRights: []admin.AccessRight{admin.AccessRightListen},
				PrimaryKey: to.Ptr(key), SecondaryKey: to.Ptr("c2Vjb25kYXJ5LWtleS0wMTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM=")}},
		})
		send(t, e.sender(t, q), body("x"))
		cs := regexp.MustCompile(`SharedAccessKeyName=[^;]*;SharedAccessKey=[^;]*`).ReplaceAllString(e.n.ConnectionString,
			"SharedAccessKeyName=listener;SharedAccessKey="+key)
		c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
			RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := r.ReceiveMessages(boundedCtx(t), 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive with a Listen key: %d messages, err %v", len(msgs), err)
		}
		if err := r.CompleteMessage(testCtx(t), msgs[0], nil); err != nil {
			t.Fatalf("complete with a Listen key: %v", err)
		}
		s, err := c.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.SendMessage(boundedCtx(t), body("y"), nil), azservicebus.CodeUnauthorizedAccess)
		// The entity key does not open other entities.
		other := e.queue(t, "notlisten", nil)
		ro, err := c.NewReceiverForQueue(other, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ro.ReceiveMessages(boundedCtx(t), 1, nil)
		wantCode(t, err, azservicebus.CodeUnauthorizedAccess)
	})
}
