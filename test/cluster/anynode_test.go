package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// outsider waits until entity's single partition has a leader and its replicas, and
// returns a node that holds none of them: every request it serves for entity is
// forwarded.
func outsider(t *testing.T, c *harness.Cluster, entity string, replicas int) *harness.Node {
	t.Helper()
	var out *harness.Node
	c.WaitFor(t, 60*time.Second, func() error {
		var ps []partition
		if err := qbctlJSON(t, c.Nodes[0], &ps, "cluster", "partitions"); err != nil {
			return err
		}
		var mine []partition
		for _, p := range ps {
			if strings.EqualFold(p.Entity, entity) {
				mine = append(mine, p)
			}
		}
		if len(mine) != 1 {
			return fmt.Errorf("%d partition groups for %s, want 1: %+v", len(mine), entity, mine)
		}
		p := mine[0]
		if p.Leader == "" || len(p.Replicas) != replicas {
			return fmt.Errorf("group %d of %s: leader %q, %d replicas; want a leader and %d", p.Group, entity, p.Leader, len(p.Replicas), replicas)
		}
		hosts := map[string]bool{}
		for _, r := range p.Replicas {
			hosts[r.Node] = true
		}
		for _, n := range c.Nodes {
			if !hosts[n.ID] {
				out = n
				return nil
			}
		}
		return harness.Permanent(fmt.Errorf("every node holds a replica of %s: %+v", entity, p))
	})
	return out
}

// Every data-plane operation works through a node that holds no replica of the entity
// (S-CLU forwarding): the SDK cannot tell which node it is connected to.
func TestAnyNodeServesEveryOperation(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "2"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })

	ac := c.Nodes[0].AdminClient(t)
	ctx := ctxT(t, 30*time.Second)
	if _, err := ac.CreateQueue(ctx, "ops", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		LockDuration: to.Ptr("PT10S"), MaxDeliveryCount: to.Ptr(int32(5)),
	}}); err != nil {
		t.Fatalf("create queue ops: %v", err)
	}
	if _, err := ac.CreateQueue(ctx, "ops-sessions", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: to.Ptr(true),
	}}); err != nil {
		t.Fatalf("create queue ops-sessions: %v", err)
	}

	t.Run("Queue", func(t *testing.T) {
		n := outsider(t, c, "ops", 2)
		t.Logf("using %s, which holds no replica of ops", n.ID)
		queueOperations(t, n.Client(t), "ops")
	})
	t.Run("Sessions", func(t *testing.T) {
		n := outsider(t, c, "ops-sessions", 2)
		t.Logf("using %s, which holds no replica of ops-sessions", n.ID)
		sessionOperations(t, n.Client(t), "ops-sessions")
	})
}

func receiveOne(t *testing.T, ctx context.Context, r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}, want string) *azservicebus.ReceivedMessage {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msgs, err := r.ReceiveMessages(rctx, 1, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive %q: %v", want, err)
		}
		if len(msgs) == 1 {
			if got := string(msgs[0].Body); got != want {
				t.Fatalf("received %q, want %q", got, want)
			}
			return msgs[0]
		}
	}
	t.Fatalf("no message %q within 20s", want)
	return nil
}

func queueOperations(t *testing.T, c *azservicebus.Client, q string) {
	ctx := ctxT(t, 3*time.Minute)
	s, err := c.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	r, err := c.NewReceiverForQueue(q, nil) // peek-lock
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	send := func(b string) {
		t.Helper()
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatalf("send %q: %v", b, err)
		}
	}

	// Send, peek, receive and complete.
	send("complete-me")
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 1 || string(peeked[0].Body) != "complete-me" {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	m := receiveOne(t, ctx, r, "complete-me")
	if m.LockedUntil == nil {
		t.Fatal("a peek-lock receive without a lock")
	}
	before := *m.LockedUntil
	time.Sleep(time.Second) // so that a renewed lock ends later than the first one
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatalf("renew lock: %v", err)
	}
	if !m.LockedUntil.After(before) {
		t.Errorf("renewed lock ends %v, not after %v", *m.LockedUntil, before)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}

	// Abandon: the message comes back with its delivery count raised.
	send("abandon-me")
	m = receiveOne(t, ctx, r, "abandon-me")
	if err := r.AbandonMessage(ctx, m, nil); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	m = receiveOne(t, ctx, r, "abandon-me")
	if m.DeliveryCount != 2 {
		t.Errorf("delivery count after abandon = %d, want 2", m.DeliveryCount)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete after abandon: %v", err)
	}

	// Defer, then receive it by sequence number.
	send("defer-me")
	m = receiveOne(t, ctx, r, "defer-me")
	seq := *m.SequenceNumber
	if err := r.DeferMessage(ctx, m, nil); err != nil {
		t.Fatalf("defer: %v", err)
	}
	ds, err := r.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "defer-me" {
		t.Fatalf("receive deferred %d: %d messages, %v", seq, len(ds), err)
	}
	if err := r.CompleteMessage(ctx, ds[0], nil); err != nil {
		t.Fatalf("complete deferred: %v", err)
	}

	// Dead-letter, then find it in the dead-letter queue with its reason.
	send("dead-letter-me")
	m = receiveOne(t, ctx, r, "dead-letter-me")
	if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("cluster-test")}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	dlq, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	m = receiveOne(t, ctx, dlq, "dead-letter-me")
	if m.DeadLetterReason == nil || *m.DeadLetterReason != "cluster-test" {
		t.Errorf("dead-letter reason %v", m.DeadLetterReason)
	}
	if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete in the DLQ: %v", err)
	}

	// Schedule two, cancel one: only the other arrives.
	at := time.Now().Add(3 * time.Second)
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("scheduled-keep")}, {Body: []byte("scheduled-cancel")}}, at, nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("schedule: %v %v", seqs, err)
	}
	if err := s.CancelScheduledMessages(ctx, seqs[1:], nil); err != nil {
		t.Fatalf("cancel scheduled: %v", err)
	}
	m = receiveOne(t, ctx, r, "scheduled-keep")
	if now := time.Now(); now.Before(at.Add(-500 * time.Millisecond)) {
		t.Errorf("scheduled message delivered at %v, before its time %v", now, at)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete scheduled: %v", err)
	}
	if left, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))}); err != nil || len(left) != 0 {
		t.Fatalf("after cancel, the queue still holds %d messages (%v)", len(left), err)
	}
}

func sessionOperations(t *testing.T, c *azservicebus.Client, q string) {
	ctx := ctxT(t, 2*time.Minute)
	s, err := c.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, b := range []string{"one", "two"} {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(b), SessionID: to.Ptr("s1")}, nil); err != nil {
			t.Fatalf("send %q: %v", b, err)
		}
	}
	sr, err := c.AcceptSessionForQueue(ctx, q, "s1", nil)
	if err != nil {
		t.Fatalf("accept session s1: %v", err)
	}
	m := receiveOne(t, ctx, sr, "one")
	if err := sr.SetSessionState(ctx, []byte("after-one"), nil); err != nil {
		t.Fatalf("set session state: %v", err)
	}
	if err := sr.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete one: %v", err)
	}
	if err := sr.RenewSessionLock(ctx, nil); err != nil {
		t.Fatalf("renew session lock: %v", err)
	}
	sr.Close(ctx)

	// Another receiver takes the session over and finds its state and the rest.
	sr, err = c.AcceptSessionForQueue(ctx, q, "s1", nil)
	if err != nil {
		t.Fatalf("accept session s1 again: %v", err)
	}
	defer sr.Close(ctx)
	st, err := sr.GetSessionState(ctx, nil)
	if err != nil || !bytes.Equal(st, []byte("after-one")) {
		t.Fatalf("session state %q, %v; want after-one", st, err)
	}
	m = receiveOne(t, ctx, sr, "two")
	if err := sr.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete two: %v", err)
	}
}
