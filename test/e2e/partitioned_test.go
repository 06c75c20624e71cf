package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
)

// TestPartitioned covers entities created with EnablePartitioning (several partitions,
// each its own Raft group): the same client-visible rules must hold.
func TestPartitioned(t *testing.T) {
	e := newEnv(t)
	partitioned := func(p *admin.QueueProperties) *admin.QueueProperties {
		if p == nil {
			p = &admin.QueueProperties{}
		}
		p.EnablePartitioning = to.Ptr(true)
		return p
	}

	// S-SEND-5, S-RCV-2: every message is stored exactly once; messages with the same
	// PartitionKey share a partition and so keep their order; sequence numbers are unique.
	t.Run("PartitionKeysAndOrder", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "pq", partitioned(nil))
		s := e.sender(t, q)
		const keys, per = 8, 6
		for i := range per {
			for k := range keys {
				send(t, s, &azservicebus.Message{Body: []byte(fmt.Sprintf("k%d-%d", k, i)), PartitionKey: to.Ptr(fmt.Sprint("k", k))})
			}
			send(t, s, body(fmt.Sprint("nokey-", i)))
		}
		total := keys*per + per
		r := e.receiver(t, q, nil)
		p := peekAll(t, r)
		if len(p) != total {
			t.Errorf("peek across partitions returned %d of %d", len(p), total)
		}
		msgs := receiveN(t, r, total, 20*time.Second)
		expectNothing(t, r, 500*time.Millisecond)
		next := map[string]int{}
		seqs := map[int64]bool{}
		for _, m := range msgs {
			if seqs[*m.SequenceNumber] {
				t.Errorf("sequence number %d used twice", *m.SequenceNumber)
			}
			seqs[*m.SequenceNumber] = true
			var k, i int
			if _, err := fmt.Sscanf(string(m.Body), "k%d-%d", &k, &i); err != nil {
				continue // no partition key: no order promised across partitions
			}
			key := fmt.Sprint("k", k)
			if deref(m.PartitionKey) != key {
				t.Errorf("%s: PartitionKey %v", m.Body, deref(m.PartitionKey))
			}
			if i != next[key] {
				t.Errorf("partition key %s: got message %d, want %d", key, i, next[key])
			}
			next[key] = i + 1
			if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
	})

	// S-SES-8, S-SES-3: in a partitioned session queue every session is FIFO and
	// accept-next finds every session, whatever partition it lives in.
	t.Run("Sessions", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "psess", partitioned(sessionQueue("")))
		s := e.sender(t, q)
		const sessions, per = 6, 4
		for i := range per {
			for k := range sessions {
				send(t, s, sessMsg(fmt.Sprint("s", k), fmt.Sprint(i)))
			}
		}
		var seen []string
		for range sessions {
			r, err := e.c.AcceptNextSessionForQueue(testCtx(t), q, nil)
			if err != nil {
				t.Fatalf("accept-next after %v: %v", seen, err)
			}
			seen = append(seen, r.SessionID())
			msgs := receiveN(t, r, per, 10*time.Second)
			if got := fmt.Sprint(bodies(msgs)); got != "[0 1 2 3]" {
				t.Errorf("session %s: %v", r.SessionID(), got)
			}
			for _, m := range msgs {
				if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.SetSessionState(testCtx(t), []byte(r.SessionID()), nil); err != nil {
				t.Fatal(err)
			}
			r.Close(context.Background())
		}
		slices.Sort(seen)
		if fmt.Sprint(seen) != "[s0 s1 s2 s3 s4 s5]" {
			t.Fatalf("accepted sessions %v", seen)
		}
		r := e.accept(t, q, "s3")
		if st, err := r.GetSessionState(testCtx(t), nil); err != nil || string(st) != "s3" {
			t.Fatalf("state of s3: %q, %v", st, err)
		}
	})

	// S-LOCK-7, S-SCH-1 by sequence number on a partitioned entity: deferred receive and
	// cancel find the right partition.
	t.Run("DeferAndScheduleBySequenceNumber", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "pdefer", partitioned(nil))
		s := e.sender(t, q)
		for k := range 8 {
			send(t, s, &azservicebus.Message{Body: []byte(fmt.Sprint("d", k)), PartitionKey: to.Ptr(fmt.Sprint("pk", k))})
		}
		r := e.receiver(t, q, nil)
		msgs := receiveN(t, r, 8, 10*time.Second)
		var seqs []int64
		for _, m := range msgs {
			if err := r.DeferMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, *m.SequenceNumber)
		}
		ds, err := r.ReceiveDeferredMessages(testCtx(t), seqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 8 {
			t.Fatalf("deferred receive returned %d of 8", len(ds))
		}
		for _, d := range ds {
			if err := r.CompleteMessage(testCtx(t), d, nil); err != nil {
				t.Fatal(err)
			}
		}

		at := time.Now().Add(3 * time.Second)
		var sched []*azservicebus.Message
		for k := range 8 {
			sched = append(sched, &azservicebus.Message{Body: []byte(fmt.Sprint("s", k)), PartitionKey: to.Ptr(fmt.Sprint("pk", k))})
		}
		sseqs, err := s.ScheduleMessages(testCtx(t), sched, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CancelScheduledMessages(testCtx(t), sseqs[1:], nil); err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "s0" {
			t.Fatalf("got %q, want the one message not cancelled", m.Body)
		}
		expectNothing(t, r, time.Second)
	})

	// S-DUP-1 on partitioned entities: with duplicate detection on and neither SessionId
	// nor PartitionKey set, the MessageId picks the partition (as in Service Bus), so
	// copies of one MessageId meet in one partition and are dropped there. Before, they
	// went round-robin and every partition kept its own copy.
	t.Run("DuplicateDetection", func(t *testing.T) {
		t.Parallel()
		const ids, copies = 10, 3 // 10: copies of one id do not land on one partition by round-robin chance
		sendCopies := func(s *azservicebus.Sender) {
			for c := range copies {
				for i := range ids {
					send(t, s, &azservicebus.Message{Body: []byte(fmt.Sprint(i, "/", c)), MessageID: to.Ptr(fmt.Sprint("dup-", i))})
				}
			}
		}
		firstCopies := func(t *testing.T, msgs []*azservicebus.ReceivedMessage) {
			t.Helper()
			got := bodies(msgs)
			slices.Sort(got)
			var want []string
			for i := range ids {
				want = append(want, fmt.Sprint(i, "/0"))
			}
			slices.Sort(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stored %v, want the first copy of each MessageId once: %v", got, want)
			}
		}
		q := e.queue(t, "pdup", partitioned(&admin.QueueProperties{RequiresDuplicateDetection: to.Ptr(true)}))
		sendCopies(e.sender(t, q))
		// A second client (its own connection; through another node under E2E_CLUSTER).
		sendCopies(e.isolated(t).sender(t, q))
		firstCopies(t, drain(t, e.receiver(t, q, nil), ids))

		tp := e.topic(t, "ptdup", &admin.TopicProperties{EnablePartitioning: to.Ptr(true), RequiresDuplicateDetection: to.Ptr(true)}, "a")
		sendCopies(e.sender(t, tp))
		firstCopies(t, drain(t, e.subReceiver(t, tp, "a", nil), ids))
	})

	// A partitioned entity has 16 partitions, as in Service Bus Standard, each holding
	// MaxSizeInMegabytes: it reports 16 times the size it was created with and accepts
	// that much (before, it reported 16 times and accepted 4 times).
	t.Run("SixteenPartitionsHoldTheReportedSize", func(t *testing.T) {
		t.Parallel()
		q := name("pfull")
		created, err := e.admin.CreateQueue(testCtx(t), q, &admin.CreateQueueOptions{Properties: partitioned(&admin.QueueProperties{MaxSizeInMegabytes: to.Ptr(int32(1))})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.DeleteQueue(context.Background(), q, nil) })
		if got := *created.MaxSizeInMegabytes; got != 16 {
			t.Fatalf("MaxSizeInMegabytes %d, want 16 (16 partitions of 1 MB)", got)
		}
		s := e.isolated(t).sender(t, q)
		payload := make([]byte, 60_000)
		accepted := 0
		for accepted < 1000 {
			if err := s.SendMessage(testCtx(t), &azservicebus.Message{Body: payload}, nil); err != nil {
				var ae *amqp.Error
				if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded {
					t.Fatalf("after %d messages: %v, want the quota condition", accepted, err)
				}
				break
			}
			accepted++
		}
		// Each send goes round-robin to one partition; the first refusal comes when one of
		// them is full, so the entity then holds close to 16 x 1 MB, far more than 4 x 1 MB.
		if mb := float64(accepted*len(payload)) / (1 << 20); mb < 12 || mb > 16.5 {
			t.Fatalf("accepted %d messages (%.1f MB) before the quota refusal, want about 16 MB", accepted, mb)
		}
	})

	// S-TOP-1 with a partitioned topic: every subscription gets every message once.
	t.Run("Topic", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "ptopic", &admin.TopicProperties{EnablePartitioning: to.Ptr(true)}, "a", "b")
		s := e.sender(t, tp)
		for k := range 10 {
			send(t, s, &azservicebus.Message{Body: []byte(fmt.Sprint(k)), PartitionKey: to.Ptr(fmt.Sprint("pk", k))})
		}
		for _, sub := range []string{"a", "b"} {
			msgs := drain(t, e.subReceiver(t, tp, sub, nil), 10)
			got := bodies(msgs)
			slices.Sort(got)
			if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9]" {
				t.Errorf("subscription %s got %v", sub, got)
			}
		}
	})
}
