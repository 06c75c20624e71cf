package ops

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// qbctl queue purge does what the SDKs' purgeMessages does (batch delete, S-DEL-3), on
// the queue and then its dead-letter queue: active, deferred and dead-lettered messages
// go; the message an SDK receiver holds locked stays and can still be completed, and so
// does the message scheduled for later. --reset removes those too (the admin reset).
func TestQbctlQueuePurgeIsBatchDelete(t *testing.T) {
	n := harness.Start(t)
	qbctl(t, n, "queue", "create", "jobs", "--lock-duration", "5m")
	c := n.Client(t)
	ctx := ctxT(t, 120*time.Second)
	s, err := c.NewSender("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := range 5 {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	locked := testutil.DeadLetterDeferLock(t, r, 60*time.Second)

	// 2 active and 1 deferred from the queue, 1 from its dead-letter queue.
	if out := qbctl(t, n, "queue", "purge", "jobs"); !strings.Contains(out, "purged 4 message(s) from jobs (1 from its dead-letter queue)") {
		t.Fatalf("queue purge: %s", out)
	}
	ac := n.AdminClient(t)
	rt, err := ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
	if err != nil || rt.ActiveMessageCount != 1 || rt.ScheduledMessageCount != 1 || rt.DeadLetterMessageCount != 0 || rt.TotalMessageCount != 2 {
		t.Fatalf("after purge: %+v %v; want the locked and the scheduled message", rt, err)
	}
	left, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: new(int64)})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || *left[0].SequenceNumber != *locked.SequenceNumber || *left[1].SequenceNumber != seqs[0] ||
		left[1].State != azservicebus.MessageStateScheduled {
		t.Fatalf("left after purge: %d messages, want the locked one (seq %d) and the scheduled one (seq %d)", len(left), *locked.SequenceNumber, seqs[0])
	}
	if err := r.CompleteMessage(ctx, locked, nil); err != nil {
		t.Fatalf("the locked message lost its lock in the purge: %v", err)
	}

	// -o json: Purged is the total, DeadLettered how many of them were dead letters.
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("a")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.DeadLetterMessage(ctx, testutil.ReceiveN(t, r, 1, 60*time.Second)[0], nil); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Entity       string
		Purged       int
		DeadLettered int
	}
	qbctlJSON(t, n, &res, "queue", "purge", "jobs")
	if res.Entity != "jobs" || res.Purged != 2 || res.DeadLettered != 1 {
		t.Fatalf("queue purge -o json: %+v, want jobs, 2 purged, 1 of them dead-lettered", res)
	}

	// --reset removes the scheduled message and a locked one too: its lock is gone.
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("c")}, nil); err != nil {
		t.Fatal(err)
	}
	locked = testutil.ReceiveN(t, r, 1, 60*time.Second)[0]
	if out := qbctl(t, n, "queue", "purge", "jobs", "--reset"); !strings.Contains(out, "purged 2 message(s) from jobs (reset") {
		t.Fatalf("queue purge --reset: %s", out)
	}
	rt, err = ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
	if err != nil || rt.TotalMessageCount != 0 || rt.ScheduledMessageCount != 0 {
		t.Fatalf("after purge --reset: %+v %v", rt, err)
	}
	if err := r.CompleteMessage(ctx, locked, nil); err == nil {
		t.Fatal("a message locked before purge --reset could still be completed")
	}

	if _, err := n.Qbctl(t, "queue", "purge", "missing"); err == nil || !strings.Contains(err.Error(), `queue "missing" not found`) {
		t.Fatalf("purge of a missing queue: %v", err)
	}
}

// qbctl subscription purge and topic purge: the same on one subscription, and on every
// subscription of a topic (each with its dead-letter queue), a locked message staying.
func TestQbctlSubscriptionAndTopicPurgeAreBatchDelete(t *testing.T) {
	n := harness.Start(t)
	qbctl(t, n, "topic", "create", "events")
	qbctl(t, n, "subscription", "create", "events", "a", "--lock-duration", "5m")
	qbctl(t, n, "subscription", "create", "events", "b")
	c := n.Client(t)
	ctx := ctxT(t, 120*time.Second)
	sendN(t, c, "events", 3, func(i int) *azservicebus.Message { return &azservicebus.Message{Body: []byte(fmt.Sprint(i))} })
	ra, err := c.NewReceiverForSubscription("events", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close(context.Background())
	ms := testutil.ReceiveN(t, ra, 2, 60*time.Second)
	if err := ra.DeadLetterMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	locked := ms[1]
	if out := qbctl(t, n, "subscription", "purge", "events", "a"); !strings.Contains(out, "purged 2 message(s) from events/Subscriptions/a (1 from its dead-letter queue)") {
		t.Fatalf("subscription purge: %s", out)
	}
	ac := n.AdminClient(t)
	if rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "events", "a", nil); err != nil || rt.ActiveMessageCount != 1 || rt.DeadLetterMessageCount != 0 {
		t.Fatalf("subscription a after purge: %+v %v; want only the locked message", rt, err)
	}
	if rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "events", "b", nil); err != nil || rt.ActiveMessageCount != 3 {
		t.Fatalf("subscription b after purging a: %+v %v; want its 3", rt, err)
	}

	var res struct {
		Entity        string
		Purged        int
		DeadLettered  int
		Subscriptions []struct {
			Entity       string
			Purged       int
			DeadLettered int
		}
	}
	qbctlJSON(t, n, &res, "topic", "purge", "events")
	if res.Entity != "events" || res.Purged != 3 || res.DeadLettered != 0 || len(res.Subscriptions) != 2 ||
		res.Subscriptions[0].Entity != "events/Subscriptions/a" || res.Subscriptions[0].Purged != 0 ||
		res.Subscriptions[1].Entity != "events/Subscriptions/b" || res.Subscriptions[1].Purged != 3 {
		t.Fatalf("topic purge -o json: %+v", res)
	}
	if err := ra.CompleteMessage(ctx, locked, nil); err != nil {
		t.Fatalf("the locked message lost its lock in the topic purge: %v", err)
	}
	if _, err := n.Qbctl(t, "topic", "purge", "missing"); err == nil || !strings.Contains(err.Error(), `topic "missing" not found`) {
		t.Fatalf("purge of a missing topic: %v", err)
	}
}
