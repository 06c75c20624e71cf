package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
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
