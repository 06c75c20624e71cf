package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// TestSDKSuiteBehaviours covers, through the real broker, what the Go SDK's own live
// tests found different from Service Bus (docs/compatibility.md). Each
// subtest names the SDK test it stands for.
func TestSDKSuiteBehaviours(t *testing.T) {
	e := newEnv(t)

	// TestMessageSettlementUsingReceiver: dead-lettering is not a failed delivery, and
	// deliveries from the dead-letter sub-queue are not counted (S-LOCK-5, S-DLQ-1).
	t.Run("DeadLetterKeepsDeliveryCount", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "dlqcount", nil)
		send(t, e.sender(t, q), body("x"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		m = receiveOne(t, r, 10*time.Second)
		if m.DeliveryCount != 2 {
			t.Fatalf("after abandon DeliveryCount %d, want 2", m.DeliveryCount)
		}
		if err := r.DeadLetterMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		d := e.dlq(t, q)
		dm := receiveOne(t, d, 10*time.Second)
		if dm.DeliveryCount != 2 {
			t.Fatalf("from the DLQ DeliveryCount %d, want 2", dm.DeliveryCount)
		}
		if err := d.AbandonMessage(testCtx(t), dm, nil); err != nil {
			t.Fatal(err)
		}
		if dm = receiveOne(t, d, 10*time.Second); dm.DeliveryCount != 2 {
			t.Fatalf("after an abandon in the DLQ DeliveryCount %d, want 2", dm.DeliveryCount)
		}
	})

	// TestDeferredMessages/Abandon: a peek shows an abandoned message with the count
	// of its next delivery.
	t.Run("PeekAfterAbandon", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "peekcount", nil)
		send(t, e.sender(t, q), body("x"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		p, err := r.PeekMessages(testCtx(t), 1, nil)
		if err != nil || len(p) != 1 || p[0].DeliveryCount != 2 {
			t.Fatalf("peek: %v %v", err, p)
		}
	})

	// Test_Sender_MessageID: a message sent without MessageId arrives with one.
	t.Run("MessageIDAssigned", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "msgid", nil)
		send(t, e.sender(t, q), body("x"))
		m := receiveOne(t, e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}), 10*time.Second)
		if len(m.MessageID) != 32 {
			t.Fatalf("MessageID %q", m.MessageID)
		}
	})

	// TestReceiver_RenewMessageLock: Service Bus's text for an invalid lock.
	t.Run("InvalidLockText", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "locktext", nil)
		send(t, e.sender(t, q), body("x"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		err := r.RenewMessageLock(testCtx(t), m, nil)
		if err == nil || !strings.Contains(err.Error(), "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue") {
			t.Fatalf("renew after complete: %v", err)
		}
	})

	// TestSessionReceiver_blankSessionIDs: SessionId "" is a session.
	t.Run("BlankSessionID", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "blanksess", &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		s := e.sender(t, q)
		send(t, s, &azservicebus.Message{Body: []byte("1"), SessionID: to.Ptr("")})
		if _, err := s.ScheduleMessages(testCtx(t), []*azservicebus.Message{{Body: []byte("2"), SessionID: to.Ptr("")}}, time.Now(), nil); err != nil {
			t.Fatal(err)
		}
		r, err := e.c.AcceptSessionForQueue(testCtx(t), q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		if r.SessionID() != "" || r.LockedUntil().IsZero() {
			t.Fatalf("session %q until %v", r.SessionID(), r.LockedUntil())
		}
		got := receiveN(t, r, 2, 20*time.Second)
		for _, m := range got {
			if m.SessionID == nil || *m.SessionID != "" {
				t.Errorf("message %s SessionID %v", m.Body, m.SessionID)
			}
			if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
	})

	// TestSessionReceiver_acceptSessionButAlreadyLocked: session locks belong to the
	// connection, yet a second receiver of the same client cannot take a held session.
	t.Run("SecondAcceptSameConnection", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sameconn", &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		c := e.n.Client(t)
		first, err := c.AcceptSessionForQueue(testCtx(t), q, "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := c.AcceptSessionForQueue(testCtx(t), q, "s", nil); err == nil || !strings.Contains(err.Error(), "session-cannot-be-locked") {
			if r != nil {
				r.Close(context.Background())
			}
			t.Fatalf("second accept on the same connection: %v", err)
		}
		if err := first.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		again, err := c.AcceptSessionForQueue(testCtx(t), q, "s", nil)
		if err != nil {
			t.Fatalf("accept after the holder closed: %v", err)
		}
		again.Close(context.Background())
	})

	// TestClient_ListSessionsForQueue_SessionStateUpdatedAfter_Live.
	t.Run("ListSessionsUpdatedAfter", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sessafter", &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("m"), SessionID: to.Ptr("msg-only")})
		sr, err := e.c.AcceptSessionForQueue(testCtx(t), q, "with-state", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.SetSessionState(testCtx(t), []byte("s"), nil); err != nil {
			t.Fatal(err)
		}
		if err := sr.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		list := func(after *time.Time) []string {
			var ids []string
			p := e.c.NewListSessionsForQueuePager(q, &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: after})
			for p.More() {
				page, err := p.NextPage(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, page.Sessions...)
			}
			slices.Sort(ids)
			return ids
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
	})

	// TestAdminClient_CreateQueue_Standard, _UpdateQueue: a partitioned queue reports
	// 16 times its size, takes it back on update, and refuses a RequiresSession change
	// in Service Bus's words.
	t.Run("PartitionedSizeAndImmutable", func(t *testing.T) {
		t.Parallel()
		q := name("partsize")
		created, err := e.admin.CreateQueue(testCtx(t), q, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
			EnablePartitioning: to.Ptr(true), MaxSizeInMegabytes: to.Ptr(int32(1024))}})
		if err != nil {
			t.Fatal(err)
		}
		if *created.MaxSizeInMegabytes != 16*1024 {
			t.Fatalf("MaxSizeInMegabytes %d", *created.MaxSizeInMegabytes)
		}
		upd, err := e.admin.UpdateQueue(testCtx(t), q, created.QueueProperties, nil)
		if err != nil || *upd.MaxSizeInMegabytes != 16*1024 {
			t.Fatalf("round trip: %v %v", err, upd)
		}
		p := upd.QueueProperties
		p.RequiresSession = to.Ptr(true)
		_, err = e.admin.UpdateQueue(testCtx(t), q, p, nil)
		if err == nil || !strings.Contains(err.Error(), "The value for the RequiresSession property of an existing Queue cannot be changed") {
			t.Fatalf("RequiresSession change: %v", err)
		}
		rt, err := e.admin.GetQueueRuntimeProperties(testCtx(t), q, nil)
		if err != nil || !rt.AccessedAt.IsZero() {
			t.Fatalf("new queue AccessedAt: %v %v", err, rt)
		}
	})
}
