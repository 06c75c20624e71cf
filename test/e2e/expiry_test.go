package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// TestExpiryScheduleDuplicates covers time to live, scheduled messages and duplicate
// detection as a client sees them.
func TestExpiryScheduleDuplicates(t *testing.T) {
	e := newEnv(t)

	// S-TTL-1: ExpiresAt = EnqueuedTime + min(message TTL, entity default); the entity
	// default applies to messages that set none.
	t.Run("EffectiveTTL", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "ttl", &admin.QueueProperties{DefaultMessageTimeToLive: to.Ptr("PT30S")})
		s := e.sender(t, q)
		send(t, s,
			&azservicebus.Message{Body: []byte("longer"), TimeToLive: to.Ptr(time.Hour)},
			&azservicebus.Message{Body: []byte("none")},
			&azservicebus.Message{Body: []byte("shorter"), TimeToLive: to.Ptr(10 * time.Second)})
		msgs := receiveN(t, e.receiver(t, q, nil), 3, 10*time.Second)
		for i, want := range []time.Duration{30 * time.Second, 30 * time.Second, 10 * time.Second} {
			m := msgs[i]
			if m.EnqueuedTime == nil || m.ExpiresAt == nil {
				t.Errorf("%s: EnqueuedTime %v ExpiresAt %v", m.Body, m.EnqueuedTime, m.ExpiresAt)
				continue
			}
			if got := m.ExpiresAt.Sub(*m.EnqueuedTime); got != want {
				t.Errorf("%s: ExpiresAt - EnqueuedTime = %v, want %v", m.Body, got, want)
			}
		}
	})

	// S-TTL-3, S-TTL-4: an expired message is never delivered; without
	// DeadLetteringOnMessageExpiration it is dropped.
	t.Run("ExpiredIsDropped", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "drop", nil)
		s := e.sender(t, q)
		send(t, s, &azservicebus.Message{Body: []byte("short"), TimeToLive: to.Ptr(time.Second)}, body("stays"))
		time.Sleep(2 * time.Second) // let the first message's TTL pass
		r := e.receiver(t, q, nil)
		if m := receiveOne(t, r, 5*time.Second); string(m.Body) != "stays" {
			t.Fatalf("received %q, want only the unexpired message", m.Body)
		}
		expectNothing(t, r, time.Second)
		expectNothing(t, e.dlq(t, q), time.Second)
	})

	// S-TTL-4, S-DLQ-1: with DeadLetteringOnMessageExpiration the expired message moves to
	// the DLQ with reason TTLExpiredException, and there it does not expire again.
	t.Run("ExpiredToDLQ", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "ttldlq", &admin.QueueProperties{DeadLetteringOnMessageExpiration: to.Ptr(true)})
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("short"), TimeToLive: to.Ptr(time.Second)})
		d := receiveOne(t, e.dlq(t, q), 10*time.Second)
		if string(d.Body) != "short" || deref(d.DeadLetterReason) != "TTLExpiredException" {
			t.Fatalf("DLQ got %q reason %v", d.Body, deref(d.DeadLetterReason))
		}
		if d.ExpiresAt != nil && d.ExpiresAt.After(time.Now()) {
			t.Errorf("ExpiresAt %v is in the future for an expired message", d.ExpiresAt)
		}
		expectNothing(t, e.receiver(t, q, nil), 500*time.Millisecond)
	})

	// S-TTL-3, S-TTL-4: a message locked when it passes ExpiresAt can still be completed,
	// and is then not dead-lettered; one abandoned after expiry expires at once.
	t.Run("LockedPastExpiry", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "lockedexp", &admin.QueueProperties{DeadLetteringOnMessageExpiration: to.Ptr(true)})
		send(t, e.sender(t, q),
			&azservicebus.Message{Body: []byte("complete-me"), TimeToLive: to.Ptr(2 * time.Second)},
			&azservicebus.Message{Body: []byte("abandon-me"), TimeToLive: to.Ptr(2 * time.Second)})
		r := e.receiver(t, q, nil) // 60 s lock: outlives the TTL
		msgs := receiveN(t, r, 2, 5*time.Second)
		time.Sleep(time.Until(*msgs[1].ExpiresAt) + 500*time.Millisecond) // both pass ExpiresAt while locked
		if err := r.CompleteMessage(testCtx(t), msgs[0], nil); err != nil {
			t.Fatalf("complete of a locked, expired message: %v", err)
		}
		if err := r.AbandonMessage(testCtx(t), msgs[1], nil); err != nil {
			t.Fatal(err)
		}
		expectNothing(t, r, time.Second)
		dlq := e.dlq(t, q)
		d := receiveOne(t, dlq, 10*time.Second)
		if string(d.Body) != "abandon-me" || deref(d.DeadLetterReason) != "TTLExpiredException" {
			t.Fatalf("DLQ got %q reason %v", d.Body, deref(d.DeadLetterReason))
		}
		expectNothing(t, dlq, 500*time.Millisecond)
	})

	// S-SCH-1, S-TTL-2: ScheduleMessages returns sequence numbers; the messages are
	// visible to peek as scheduled but not receivable until their time, and then carry
	// EnqueuedTime = the scheduled time.
	t.Run("ScheduleMessages", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sched", nil)
		s := e.sender(t, q)
		at := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
		seqs, err := s.ScheduleMessages(testCtx(t), []*azservicebus.Message{
			{Body: []byte("s1"), TimeToLive: to.Ptr(time.Hour)}, {Body: []byte("s2")},
		}, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) != 2 || seqs[0] == seqs[1] {
			t.Fatalf("sequence numbers %v", seqs)
		}
		r := e.receiver(t, q, nil)
		p := peekAll(t, r)
		if len(p) != 2 || p[0].State != azservicebus.MessageStateScheduled || *p[0].SequenceNumber != seqs[0] {
			t.Fatalf("peek of scheduled: %d messages %v", len(p), p)
		}
		if p[0].ScheduledEnqueueTime == nil || !p[0].ScheduledEnqueueTime.Equal(at) {
			t.Errorf("ScheduledEnqueueTime %v, want %v", p[0].ScheduledEnqueueTime, at)
		}
		expectNothing(t, r, time.Until(at)-time.Second)
		msgs := receiveN(t, r, 2, 10*time.Second)
		if time.Now().Before(at) {
			t.Fatalf("received before the scheduled time")
		}
		m := msgs[0]
		if string(m.Body) != "s1" || *m.SequenceNumber != seqs[0] {
			t.Errorf("got %q seq %d", m.Body, *m.SequenceNumber)
		}
		if m.EnqueuedTime == nil || m.EnqueuedTime.Before(at) || m.EnqueuedTime.After(at.Add(2*time.Second)) {
			t.Errorf("EnqueuedTime %v, want the scheduled time %v", m.EnqueuedTime, at)
		} else if !m.ExpiresAt.Equal(m.EnqueuedTime.Add(time.Hour)) {
			t.Errorf("ExpiresAt %v, want EnqueuedTime + 1h", m.ExpiresAt)
		}
	})

	// S-SCH-1: a scheduled message can be cancelled before its time, and then never arrives.
	t.Run("CancelScheduled", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "cancel", nil)
		s := e.sender(t, q)
		at := time.Now().Add(3 * time.Second)
		seqs, err := s.ScheduleMessages(testCtx(t), []*azservicebus.Message{body("keep"), body("cancel")}, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CancelScheduledMessages(testCtx(t), seqs[1:], nil); err != nil {
			t.Fatal(err)
		}
		r := e.receiver(t, q, nil)
		if p := peekAll(t, r); len(p) != 1 || string(p[0].Body) != "keep" {
			t.Fatalf("peek after cancel: %v", bodies(p))
		}
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "keep" {
			t.Fatalf("got %q", m.Body)
		}
		expectNothing(t, r, time.Second)
	})

	// S-SCH-1: a plain send carrying ScheduledEnqueueTime is scheduled, not delivered at once.
	t.Run("SendWithScheduledEnqueueTime", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sendsched", nil)
		at := time.Now().Add(3 * time.Second)
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("later"), ScheduledEnqueueTime: &at}, body("now"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 5*time.Second)
		if string(m.Body) != "now" {
			t.Fatalf("first received %q, want the unscheduled message", m.Body)
		}
		expectNothing(t, r, time.Until(at)-time.Second)
		m = receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "later" || time.Now().Before(at) {
			t.Fatalf("got %q at %v (scheduled %v)", m.Body, time.Now(), at)
		}
		if m.ScheduledEnqueueTime == nil || m.ScheduledEnqueueTime.Sub(at).Abs() > time.Millisecond {
			t.Errorf("ScheduledEnqueueTime %v, want %v", m.ScheduledEnqueueTime, at)
		}
	})

	// S-DUP-1: within the window a repeated MessageId is acknowledged but not stored again,
	// whether sent alone or in a batch, and even after the first copy was completed.
	t.Run("DuplicateDetection", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "dup", &admin.QueueProperties{
			RequiresDuplicateDetection:          to.Ptr(true),
			DuplicateDetectionHistoryTimeWindow: to.Ptr("PT1M"),
		})
		s := e.sender(t, q)
		msg := func(id, b string) *azservicebus.Message {
			return &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(b)}
		}
		send(t, s, msg("a", "a1"), msg("a", "a2"), msg("b", "b1"), msg("a", "a3"))
		batch, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []*azservicebus.Message{msg("b", "b2"), msg("c", "c1"), msg("c", "c2")} {
			if err := batch.AddMessage(m, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SendMessageBatch(testCtx(t), batch, nil); err != nil {
			t.Fatal(err)
		}
		r := e.receiver(t, q, nil)
		msgs := receiveN(t, r, 3, 10*time.Second)
		expectNothing(t, r, time.Second)
		if fmt.Sprint(bodies(msgs)) != "[a1 b1 c1]" {
			t.Fatalf("stored %v, want [a1 b1 c1]", bodies(msgs))
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
		send(t, s, msg("a", "a4"), msg("d", "d1"))
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "d1" {
			t.Fatalf("after completing, resend of id a was stored again: got %q", m.Body)
		}
		expectNothing(t, r, time.Second)
	})

	// S-DUP-1 (converse): without duplicate detection, equal MessageIds are all stored.
	t.Run("NoDuplicateDetection", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "nodup", nil)
		send(t, e.sender(t, q), &azservicebus.Message{MessageID: to.Ptr("x"), Body: []byte("1")},
			&azservicebus.Message{MessageID: to.Ptr("x"), Body: []byte("2")})
		receiveN(t, e.receiver(t, q, nil), 2, 10*time.Second)
	})
	// S-TTL-2: a scheduled message's TTL counts from its scheduled time: scheduled 3 s
	// ahead with a 2 s TTL it is still delivered (it would have expired at +2 s if the TTL
	// counted from the send).
	t.Run("ScheduledTTLFromScheduledTime", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "schedttl", nil)
		at := time.Now().Add(3 * time.Second)
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("x"), TimeToLive: to.Ptr(2 * time.Second), ScheduledEnqueueTime: &at})
		m := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		if m.ExpiresAt == nil || m.ExpiresAt.Before(at.Add(2*time.Second-10*time.Millisecond)) {
			t.Errorf("ExpiresAt %v, want scheduled time %v + 2s", m.ExpiresAt, at)
		}
	})
	// S-DUP-1: after DuplicateDetectionHistoryTimeWindow (20 s, the minimum) a MessageId
	// is accepted again; duplicate detection also works on topics.
	t.Run("DuplicateWindowEndsAndTopics", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "dupwin", &admin.QueueProperties{
			RequiresDuplicateDetection:          to.Ptr(true),
			DuplicateDetectionHistoryTimeWindow: to.Ptr("PT20S"),
		})
		s := e.sender(t, q)
		msg := func(b string) *azservicebus.Message {
			return &azservicebus.Message{MessageID: to.Ptr("same"), Body: []byte(b)}
		}
		start := time.Now()
		send(t, s, msg("1"), msg("2"))

		tp := name("duptopic")
		if _, err := e.admin.CreateTopic(testCtx(t), tp, &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
			RequiresDuplicateDetection: to.Ptr(true)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "s", nil); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, tp), msg("t1"), msg("t2"))
		sr := e.subReceiver(t, tp, "s", nil)
		if m := receiveOne(t, sr, 10*time.Second); string(m.Body) != "t1" {
			t.Fatalf("topic got %q", m.Body)
		}
		expectNothing(t, sr, time.Second)

		time.Sleep(time.Until(start.Add(22 * time.Second))) // the 20 s window must have passed
		send(t, s, msg("3"))
		r := e.receiver(t, q, nil)
		if got := fmt.Sprint(bodies(receiveN(t, r, 2, 10*time.Second))); got != "[1 3]" {
			t.Fatalf("got %v, want [1 3]", got)
		}
	})
}
