package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// shortLock is the minimum LockDuration (S-ENT-2); tests that wait for a lock to expire
// use it so the package stays fast.
const shortLock = 5 * time.Second

func shortLockQueue(extra func(*admin.QueueProperties)) *admin.QueueProperties {
	p := &admin.QueueProperties{LockDuration: to.Ptr("PT5S")}
	if extra != nil {
		extra(p)
	}
	return p
}

// TestSettlement covers receive modes, peek and every settlement through the SDK.
func TestSettlement(t *testing.T) {
	e := newEnv(t)

	// S-RCV-1: ReceiveAndDelete consumes on delivery: nothing is left to peek or receive,
	// and settling such a message is refused by the SDK.
	t.Run("ReceiveAndDelete", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "rad", nil)
		send(t, e.sender(t, q), body("a"), body("b"), body("c"))
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		msgs := receiveN(t, r, 3, 10*time.Second)
		if got := bodies(msgs); fmt.Sprint(got) != "[a b c]" {
			t.Fatalf("got %v", got)
		}
		if err := r.CompleteMessage(testCtx(t), msgs[0], nil); err == nil {
			t.Errorf("completing a receive-and-delete message succeeded")
		}
		if p := peekAll(t, r); len(p) != 0 {
			t.Fatalf("%d messages left after receive-and-delete", len(p))
		}
		expectNothing(t, e.receiver(t, q, nil), time.Second)
	})

	// S-LOCK-11: peek returns messages from a sequence number, takes no lock and does
	// not change DeliveryCount; S-RCV-2: browsing continues where the last peek ended.
	t.Run("Peek", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "peek", nil)
		s := e.sender(t, q)
		for i := range 5 {
			send(t, s, body(fmt.Sprint(i)))
		}
		r := e.receiver(t, q, nil)
		first := peekAll(t, r)
		if got := fmt.Sprint(bodies(first)); got != "[0 1 2 3 4]" {
			t.Fatalf("peek got %v", got)
		}
		for _, m := range first {
			if m.LockedUntil != nil && !m.LockedUntil.IsZero() && m.LockedUntil.After(time.Now()) {
				t.Errorf("peeked message %s is locked until %v", m.Body, m.LockedUntil)
			}
		}
		// Peek again: same messages, same delivery counts (peek does not count).
		again := peekAll(t, r)
		for i := range again {
			if again[i].DeliveryCount != first[i].DeliveryCount {
				t.Errorf("DeliveryCount changed by peek: %d then %d", first[i].DeliveryCount, again[i].DeliveryCount)
			}
		}
		// From a sequence number.
		from := *first[2].SequenceNumber
		tail, err := r.PeekMessages(testCtx(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(bodies(tail)); got != "[2 3 4]" {
			t.Fatalf("peek from seq %d got %v", from, got)
		}
		// Paging: the next peek without a start continues after the last one peeked.
		r2 := e.receiver(t, q, nil)
		p1, err := r2.PeekMessages(testCtx(t), 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := r2.PeekMessages(testCtx(t), 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(bodies(p1), bodies(p2)); got != "[0 1] [2 3]" {
			t.Fatalf("paged peek got %v", got)
		}
		// No lock was taken: a receiver gets all five at once, each on its first delivery.
		msgs := receiveN(t, r, 5, 10*time.Second)
		for _, m := range msgs {
			if m.DeliveryCount != 1 {
				t.Errorf("message %s: DeliveryCount %d after peeks, want 1", m.Body, m.DeliveryCount)
			}
		}
		// Peeking a locked message still shows it, and does not disturb the lock.
		if p := peekAll(t, r); len(p) != 5 {
			t.Fatalf("peek of locked messages returned %d, want 5", len(p))
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
				t.Fatalf("complete after peek: %v", err)
			}
		}
	})

	// S-LOCK-1: a locked message is not given to another receiver; others get the next
	// unlocked ones.
	t.Run("ExclusiveLock", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "exclusive", nil)
		send(t, e.sender(t, q), body("first"), body("second"))
		r1, r2 := e.receiver(t, q, nil), e.receiver(t, q, nil)
		m1 := receiveOne(t, r1, 10*time.Second)
		m2 := receiveOne(t, r2, 10*time.Second)
		if string(m1.Body) != "first" || string(m2.Body) != "second" {
			t.Fatalf("got %q and %q", m1.Body, m2.Body)
		}
		expectNothing(t, r2, time.Second)
		for _, c := range []struct {
			r *azservicebus.Receiver
			m *azservicebus.ReceivedMessage
		}{{r1, m1}, {r2, m2}} {
			if err := c.r.CompleteMessage(testCtx(t), c.m, nil); err != nil {
				t.Fatal(err)
			}
		}
	})

	// S-LOCK-3, S-LOCK-5: abandon releases the lock at once, with modified properties,
	// and the redelivery has DeliveryCount 2.
	t.Run("AbandonWithProperties", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "abandon", nil) // 60 s lock: redelivery within seconds proves the release
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"keep": "me", "hello": "old"}})
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), m, &azservicebus.AbandonMessageOptions{
			PropertiesToModify: map[string]any{"hello": "world", "n": int64(42)},
		}); err != nil {
			t.Fatal(err)
		}
		m2 := receiveOne(t, r, 5*time.Second)
		if *m2.SequenceNumber != *m.SequenceNumber {
			t.Fatalf("got sequence %d, want the abandoned %d", *m2.SequenceNumber, *m.SequenceNumber)
		}
		if m2.DeliveryCount != 2 {
			t.Errorf("DeliveryCount after abandon = %d, want 2", m2.DeliveryCount)
		}
		if m2.ApplicationProperties["hello"] != "world" || m2.ApplicationProperties["n"] != int64(42) || m2.ApplicationProperties["keep"] != "me" {
			t.Errorf("properties after abandon = %v", m2.ApplicationProperties)
		}
		if err := r.CompleteMessage(testCtx(t), m2, nil); err != nil {
			t.Fatal(err)
		}
	})

	// S-RCV-2: an abandoned message goes back to the front of the queue.
	t.Run("AbandonedGoesFirst", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "front", nil)
		send(t, e.sender(t, q), body("a"), body("b"), body("c"))
		r := e.receiver(t, q, nil)
		a := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), a, nil); err != nil {
			t.Fatal(err)
		}
		// S-LOCK-9: the abandoned lock is gone.
		wantCode(t, r.RenewMessageLock(testCtx(t), a, nil), azservicebus.CodeLockLost)
		msgs := receiveN(t, r, 3, 10*time.Second)
		if got := fmt.Sprint(bodies(msgs)); got != "[a b c]" {
			t.Fatalf("order after abandon: %v", got)
		}
	})

	// S-LOCK-4, S-LOCK-5, S-LOCK-9: an expired lock has the effect of abandon (redelivered
	// with DeliveryCount 2), and settling with the stale lock fails with lock-lost.
	t.Run("LockExpiryRedeliversAndLockLost", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "expiry", shortLockQueue(nil))
		send(t, e.sender(t, q), body("x"))
		r1 := e.receiver(t, q, nil)
		start := time.Now()
		m := receiveOne(t, r1, 10*time.Second)
		if m.LockedUntil == nil || m.LockedUntil.Before(start.Add(shortLock-time.Second)) || m.LockedUntil.After(time.Now().Add(shortLock+time.Second)) {
			t.Errorf("LockedUntil = %v, want about now+5s", m.LockedUntil)
		}
		r2 := e.receiver(t, q, nil)
		// Within the lock nothing is given to another receiver; after it, the message is.
		m2 := receiveOne(t, r2, shortLock+10*time.Second)
		if waited := time.Since(start); waited < shortLock-500*time.Millisecond {
			t.Errorf("redelivered after %v, before the %v lock expired", waited, shortLock)
		}
		if *m2.SequenceNumber != *m.SequenceNumber || m2.DeliveryCount != 2 {
			t.Errorf("redelivery: sequence %d (want %d), DeliveryCount %d (want 2)", *m2.SequenceNumber, *m.SequenceNumber, m2.DeliveryCount)
		}
		// go-amqp treats a delivery as settled once the broker has answered one
		// disposition (even with an error), so each message is settled on its link only
		// once here; renew and lock-token settlement go through the management link.
		wantCode(t, r1.CompleteMessage(testCtx(t), m, nil), azservicebus.CodeLockLost)
		wantCode(t, r1.RenewMessageLock(testCtx(t), m, nil), azservicebus.CodeLockLost)
		wantCode(t, r1.AbandonMessage(testCtx(t), &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil), azservicebus.CodeLockLost)
		if err := r2.CompleteMessage(testCtx(t), m2, nil); err != nil {
			t.Fatalf("complete with the current lock: %v", err)
		}
		// S-LOCK-12: the repeat of the complete (as after a lost answer) gets its first
		// outcome; S-LOCK-9: any other settlement of the ended lock is lost.
		if err := r2.CompleteMessage(testCtx(t), &azservicebus.ReceivedMessage{LockToken: m2.LockToken}, nil); err != nil {
			t.Fatalf("repeated complete: %v, want the first outcome (ok)", err)
		}
		wantCode(t, r2.AbandonMessage(testCtx(t), &azservicebus.ReceivedMessage{LockToken: m2.LockToken}, nil), azservicebus.CodeLockLost)
		wantCode(t, r2.RenewMessageLock(testCtx(t), m2, nil), azservicebus.CodeLockLost)
		expectNothing(t, r2, time.Second)
	})

	// S-LOCK-9: dead-letter and defer on an expired lock also fail with lock-lost, and
	// the message is not lost.
	t.Run("LockLostOnDeadLetterAndDefer", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "lostdl", shortLockQueue(nil))
		send(t, e.sender(t, q), body("a"), body("b"))
		r := e.receiver(t, q, nil)
		msgs := receiveN(t, r, 2, 10*time.Second)
		// Wait out the locks without receiving again (that would take new locks).
		time.Sleep(time.Until(*msgs[1].LockedUntil) + 500*time.Millisecond) // the locks must have expired
		wantCode(t, r.DeadLetterMessage(testCtx(t), msgs[0], nil), azservicebus.CodeLockLost)
		wantCode(t, r.DeferMessage(testCtx(t), msgs[1], nil), azservicebus.CodeLockLost)
		again := receiveN(t, r, 2, 10*time.Second)
		if fmt.Sprint(bodies(again)) != "[a b]" {
			t.Fatalf("after lock-lost got %v, want both messages back", bodies(again))
		}
		for _, m := range again {
			if m.DeliveryCount != 2 {
				t.Errorf("DeliveryCount %d, want 2", m.DeliveryCount)
			}
			if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
	})

	// S-LOCK-8: renewing sets LockedUntil = now + LockDuration; a renewed lock outlives
	// the original LockDuration and can still complete.
	t.Run("RenewLock", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "renew", shortLockQueue(nil))
		send(t, e.sender(t, q), body("x"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		first := *m.LockedUntil
		other := e.receiver(t, q, nil)
		end := time.Now().Add(2 * shortLock)
		for time.Now().Before(end) {
			// Renew at half the lock duration, as a lock-renewing client does.
			time.Sleep(shortLock / 2) // keeping the lock alive is the point of the test
			before := time.Now()
			if err := r.RenewMessageLock(testCtx(t), m, nil); err != nil {
				t.Fatalf("renew: %v", err)
			}
			if m.LockedUntil.Before(before.Add(shortLock-time.Second)) || m.LockedUntil.After(time.Now().Add(shortLock+time.Second)) {
				t.Fatalf("LockedUntil after renew = %v, want about now+5s", m.LockedUntil)
			}
		}
		if !m.LockedUntil.After(first.Add(shortLock)) {
			t.Errorf("LockedUntil %v not extended past %v", m.LockedUntil, first.Add(shortLock))
		}
		// Ten seconds after receiving, the 5 s lock still holds: nobody else got the message.
		expectNothing(t, other, 500*time.Millisecond)
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatalf("complete after renewals: %v", err)
		}
	})

	// S-LOCK-5: abandoning a message that was delivered MaxDeliveryCount times moves it
	// to the dead-letter sub-queue with reason MaxDeliveryCountExceeded.
	t.Run("MaxDeliveryCountByAbandon", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "maxdc", &admin.QueueProperties{MaxDeliveryCount: to.Ptr[int32](3)})
		send(t, e.sender(t, q), body("poison"))
		r := e.receiver(t, q, nil)
		for i := 1; i <= 3; i++ {
			m := receiveOne(t, r, 10*time.Second)
			if m.DeliveryCount != uint32(i) {
				t.Fatalf("delivery %d has DeliveryCount %d", i, m.DeliveryCount)
			}
			if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
		expectNothing(t, r, time.Second)
		d := receiveOne(t, e.dlq(t, q), 10*time.Second)
		if string(d.Body) != "poison" || deref(d.DeadLetterReason) != "MaxDeliveryCountExceeded" {
			t.Fatalf("dead-lettered %q with reason %v", d.Body, deref(d.DeadLetterReason))
		}
		if d.DeadLetterErrorDescription == nil {
			t.Errorf("no DeadLetterErrorDescription")
		}
	})

	// S-LOCK-4, S-LOCK-5: lock expiry counts as a delivery too: with MaxDeliveryCount 1 an
	// expired lock dead-letters the message.
	t.Run("MaxDeliveryCountByLockExpiry", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "maxdcexp", shortLockQueue(func(p *admin.QueueProperties) { p.MaxDeliveryCount = to.Ptr[int32](1) }))
		send(t, e.sender(t, q), body("slow"))
		r := e.receiver(t, q, nil)
		receiveOne(t, r, 10*time.Second)
		d := receiveOne(t, e.dlq(t, q), shortLock+10*time.Second)
		if deref(d.DeadLetterReason) != "MaxDeliveryCountExceeded" {
			t.Fatalf("reason %v", deref(d.DeadLetterReason))
		}
		expectNothing(t, r, 500*time.Millisecond)
	})

	// S-LOCK-6, S-DLQ-1: dead-letter with reason, description and properties; the DLQ is
	// received like a queue and supports every settlement; a dead-lettered message is
	// never dead-lettered again, however often it is abandoned.
	t.Run("DeadLetterAndDLQ", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "dl", &admin.QueueProperties{MaxDeliveryCount: to.Ptr[int32](1)})
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("bad"), MessageID: to.Ptr("m-bad"), ApplicationProperties: map[string]any{"orig": "yes"}},
			body("second"))
		r := e.receiver(t, q, nil)
		msgs := receiveN(t, r, 2, 10*time.Second)
		if err := r.DeadLetterMessage(testCtx(t), msgs[0], &azservicebus.DeadLetterOptions{
			Reason:             to.Ptr("Validation"),
			ErrorDescription:   to.Ptr("field x is missing"),
			PropertiesToModify: map[string]any{"extra": int64(7)},
		}); err != nil {
			t.Fatal(err)
		}
		// Dead-letter without reason or description.
		if err := r.DeadLetterMessage(testCtx(t), msgs[1], nil); err != nil {
			t.Fatal(err)
		}
		expectNothing(t, r, 500*time.Millisecond)

		dlq := e.dlq(t, q)
		ds := receiveN(t, dlq, 2, 10*time.Second)
		d := ds[0]
		if string(d.Body) != "bad" || d.MessageID != "m-bad" || *d.SequenceNumber != *msgs[0].SequenceNumber {
			t.Errorf("DLQ message: body %q id %q seq %d", d.Body, d.MessageID, *d.SequenceNumber)
		}
		if deref(d.DeadLetterReason) != "Validation" || deref(d.DeadLetterErrorDescription) != "field x is missing" {
			t.Errorf("reason %v description %v", deref(d.DeadLetterReason), deref(d.DeadLetterErrorDescription))
		}
		if d.ApplicationProperties["orig"] != "yes" || d.ApplicationProperties["extra"] != int64(7) {
			t.Errorf("properties %v", d.ApplicationProperties)
		}
		if d.DeadLetterSource != nil {
			t.Errorf("DeadLetterSource = %q for a message dead-lettered in place", *d.DeadLetterSource)
		}
		if string(ds[1].Body) != "second" {
			t.Errorf("second DLQ message %q", ds[1].Body)
		}
		// Abandon in the DLQ more often than MaxDeliveryCount: it stays in the DLQ.
		for range 2 {
			if err := dlq.AbandonMessage(testCtx(t), d, nil); err != nil {
				t.Fatal(err)
			}
			d = receiveOne(t, dlq, 10*time.Second)
			if string(d.Body) != "bad" {
				t.Fatalf("after abandon in the DLQ got %q", d.Body)
			}
		}
		if err := dlq.CompleteMessage(testCtx(t), d, nil); err != nil {
			t.Fatal(err)
		}
		// Dead-lettering inside the DLQ is accepted and leaves it there (S-DLQ-1).
		if err := dlq.DeadLetterMessage(testCtx(t), ds[1], &azservicebus.DeadLetterOptions{Reason: to.Ptr("again")}); err != nil {
			t.Fatal(err)
		}
		// ReceiveAndDelete on the DLQ.
		rad := e.receiver(t, q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		last := receiveOne(t, rad, 10*time.Second)
		if string(last.Body) != "second" {
			t.Fatalf("got %q", last.Body)
		}
		if p := peekAll(t, dlq); len(p) != 0 {
			t.Fatalf("DLQ not empty: %v", bodies(p))
		}
		if p := peekAll(t, r); len(p) != 0 {
			t.Fatalf("queue not empty: %v", bodies(p))
		}
	})

	// S-LOCK-7: a deferred message is no longer received normally, is visible to peek as
	// deferred, is received by sequence number (locked again) and then settled through the
	// management link as usual.
	t.Run("Defer", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "defer", nil)
		send(t, e.sender(t, q), body("later"), body("now"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "later" {
			t.Fatalf("got %q", m.Body)
		}
		if err := r.DeferMessage(testCtx(t), m, &azservicebus.DeferMessageOptions{PropertiesToModify: map[string]any{"deferred": true}}); err != nil {
			t.Fatal(err)
		}
		n := receiveOne(t, r, 10*time.Second)
		if string(n.Body) != "now" {
			t.Fatalf("normal receive got %q, want the non-deferred message", n.Body)
		}
		if err := r.CompleteMessage(testCtx(t), n, nil); err != nil {
			t.Fatal(err)
		}
		expectNothing(t, r, time.Second)

		p := peekAll(t, r)
		if len(p) != 1 || p[0].State != azservicebus.MessageStateDeferred {
			t.Fatalf("peek: %d messages, state %v", len(p), p[0].State)
		}

		seq := *m.SequenceNumber
		ds, err := r.ReceiveDeferredMessages(testCtx(t), []int64{seq}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || string(ds[0].Body) != "later" || ds[0].State != azservicebus.MessageStateDeferred {
			t.Fatalf("deferred receive: %d messages %v", len(ds), bodies(ds))
		}
		d := ds[0]
		if d.ApplicationProperties["deferred"] != true {
			t.Errorf("properties %v", d.ApplicationProperties)
		}
		if d.LockedUntil == nil || !d.LockedUntil.After(time.Now()) {
			t.Errorf("deferred message LockedUntil = %v, want a lock", d.LockedUntil)
		}
		if d.DeliveryCount < 2 {
			t.Errorf("DeliveryCount of deferred receive = %d, want >= 2", d.DeliveryCount)
		}
		// Renewing and abandoning work by lock token; abandon keeps it deferred.
		if err := r.RenewMessageLock(testCtx(t), d, nil); err != nil {
			t.Fatalf("renew deferred: %v", err)
		}
		if err := r.AbandonMessage(testCtx(t), d, nil); err != nil {
			t.Fatalf("abandon deferred: %v", err)
		}
		expectNothing(t, r, time.Second)
		ds, err = r.ReceiveDeferredMessages(testCtx(t), []int64{seq}, nil)
		if err != nil || len(ds) != 1 {
			t.Fatalf("second deferred receive: %v, %d messages", err, len(ds))
		}
		if err := r.CompleteMessage(testCtx(t), ds[0], nil); err != nil {
			t.Fatalf("complete deferred: %v", err)
		}
		if p := peekAll(t, r); len(p) != 0 {
			t.Fatalf("queue not empty after completing the deferred message: %v", bodies(p))
		}
	})

	// S-LOCK-7: a deferred message can be dead-lettered by lock token.
	t.Run("DeferThenDeadLetter", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "deferdl", nil)
		send(t, e.sender(t, q), body("d"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.DeferMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		ds, err := r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err != nil || len(ds) != 1 {
			t.Fatalf("deferred receive: %v, %d", err, len(ds))
		}
		if err := r.DeadLetterMessage(testCtx(t), ds[0], &azservicebus.DeadLetterOptions{Reason: to.Ptr("r"), ErrorDescription: to.Ptr("d")}); err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, e.dlq(t, q), 10*time.Second)
		if deref(d.DeadLetterReason) != "r" || deref(d.DeadLetterErrorDescription) != "d" {
			t.Fatalf("reason %v description %v", deref(d.DeadLetterReason), deref(d.DeadLetterErrorDescription))
		}
	})

	// S-LOCK-10, protocol.md §6.4: a lock token stays valid after its receiving link is
	// closed; the SDK then settles through the management link.
	t.Run("SettleAfterReceiverClosed", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "mgmtsettle", nil)
		send(t, e.sender(t, q), body("a"), body("b"), body("c"))
		r1 := e.receiver(t, q, nil)
		msgs := receiveN(t, r1, 3, 10*time.Second)
		if err := r1.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		r2 := e.receiver(t, q, nil)
		// msgs[0]: settled with the original message (its link is gone).
		if err := r2.CompleteMessage(testCtx(t), msgs[0], nil); err != nil {
			t.Fatalf("complete after close: %v", err)
		}
		// msgs[1]: settled by lock token alone, as after a process restart.
		if err := r2.CompleteMessage(testCtx(t), &azservicebus.ReceivedMessage{LockToken: msgs[1].LockToken}, nil); err != nil {
			t.Fatalf("complete by lock token: %v", err)
		}
		// msgs[2]: by lock token from another connection (another client).
		other, err := e.n.Client(t).NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.CompleteMessage(testCtx(t), &azservicebus.ReceivedMessage{LockToken: msgs[2].LockToken}, nil); err != nil {
			t.Fatalf("complete by lock token from another connection: %v", err)
		}
		expectNothing(t, r2, time.Second)
		if p := peekAll(t, r2); len(p) != 0 {
			t.Fatalf("left: %v", bodies(p))
		}
	})

	// S-LOCK-10: closing a receiver does not release its locks; the messages come back
	// only when the locks expire.
	t.Run("CloseKeepsLocks", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "closelocks", shortLockQueue(nil))
		send(t, e.sender(t, q), body("a"))
		r1 := e.receiver(t, q, nil)
		m := receiveOne(t, r1, 10*time.Second)
		if err := r1.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		r2 := e.receiver(t, q, nil)
		expectNothing(t, r2, time.Until(*m.LockedUntil)-time.Second)
		m2 := receiveOne(t, r2, 10*time.Second)
		if m2.DeliveryCount != 2 {
			t.Errorf("DeliveryCount %d, want 2", m2.DeliveryCount)
		}
	})
	// S-LOCK-1, S-DUR-3: receivers competing on one queue each get distinct messages;
	// every message is delivered and completed exactly once.
	t.Run("CompetingReceivers", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "compete", nil)
		s := e.sender(t, q)
		const total = 200
		b, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range total {
			if err := b.AddMessage(body(fmt.Sprint(i)), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SendMessageBatch(testCtx(t), b, nil); err != nil {
			t.Fatal(err)
		}
		type result struct {
			bodies []string
			err    error
		}
		results := make(chan result, 4)
		for range 4 {
			r := e.receiver(t, q, nil)
			go func() {
				var res result
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					msgs, err := r.ReceiveMessages(ctx, 7, nil)
					cancel()
					if len(msgs) == 0 {
						if err != nil && ctx.Err() == nil {
							res.err = err
						}
						results <- res
						return
					}
					for _, m := range msgs {
						if err := r.CompleteMessage(context.Background(), m, nil); err != nil {
							res.err = err
							results <- res
							return
						}
						res.bodies = append(res.bodies, string(m.Body))
					}
				}
			}()
		}
		seen := map[string]int{}
		for range 4 {
			res := <-results
			if res.err != nil {
				t.Errorf("receiver: %v", res.err)
			}
			for _, b := range res.bodies {
				seen[b]++
			}
		}
		for i := range total {
			if n := seen[fmt.Sprint(i)]; n != 1 {
				t.Errorf("message %d completed %d times", i, n)
			}
		}
	})

	// protocol.md §6.2, S-LOCK-5: messages the SDK releases (delivered on credit left over
	// after a receive call returned) are available again at once, and a release is not a
	// delivery attempt: DeliveryCount stays 1.
	t.Run("ReleasedDoesNotCount", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "release", nil)
		s := e.sender(t, q)
		send(t, s, body("first"))
		r1 := e.receiver(t, q, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := r1.ReceiveMessages(ctx, 10, nil) // returns with 1; 9 credits stay open
		cancel()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("first receive: %d messages, %v", len(msgs), err)
		}
		send(t, s, body("a"), body("b"), body("c"))
		r2 := e.receiver(t, q, nil)
		got := receiveN(t, r2, 3, 15*time.Second)
		for _, m := range got {
			if m.DeliveryCount != 1 {
				t.Errorf("%s: DeliveryCount %d after a release, want 1", m.Body, m.DeliveryCount)
			}
		}
		if err := r1.CompleteMessage(testCtx(t), msgs[0], nil); err != nil {
			t.Fatal(err)
		}
	})
	// S-LOCK-7, S-LOCK-4: when the lock of a message received by sequence number expires,
	// it stays deferred: not receivable normally, receivable again by sequence number.
	t.Run("DeferredLockExpiryStaysDeferred", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "deferexp", shortLockQueue(nil))
		send(t, e.sender(t, q), body("d"))
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if err := r.DeferMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		ds, err := r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err != nil || len(ds) != 1 {
			t.Fatalf("deferred receive: %v, %d", err, len(ds))
		}
		expectNothing(t, r, time.Until(*ds[0].LockedUntil)+time.Second) // the lock expires meanwhile
		ds2, err := r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err != nil || len(ds2) != 1 {
			t.Fatalf("deferred receive after lock expiry: %v, %d", err, len(ds2))
		}
		if ds2[0].DeliveryCount <= ds[0].DeliveryCount || ds2[0].State != azservicebus.MessageStateDeferred {
			t.Errorf("DeliveryCount %d then %d, state %v", ds[0].DeliveryCount, ds2[0].DeliveryCount, ds2[0].State)
		}
		wantCode(t, r.CompleteMessage(testCtx(t), ds[0], nil), azservicebus.CodeLockLost)
		if err := r.CompleteMessage(testCtx(t), ds2[0], nil); err != nil {
			t.Fatal(err)
		}
	})
	// S-RCV-2, S-LOCK-4: a message whose lock expired goes back to the front.
	t.Run("LockExpiredGoesFirst", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "expfront", shortLockQueue(nil))
		send(t, e.sender(t, q), body("a"), body("b"), body("c"))
		r := e.receiver(t, q, nil)
		a := receiveOne(t, r, 10*time.Second)
		b := receiveOne(t, r, 10*time.Second)
		if string(a.Body) != "a" || string(b.Body) != "b" {
			t.Fatalf("got %q %q", a.Body, b.Body)
		}
		if err := r.CompleteMessage(testCtx(t), b, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(*a.LockedUntil) + 500*time.Millisecond) // a's lock must expire
		msgs := receiveN(t, r, 2, 10*time.Second)
		if got := fmt.Sprint(bodies(msgs)); got != "[a c]" {
			t.Fatalf("after a's lock expired got %v, want [a c]", got)
		}
	})
	// S-RCV-1: in ReceiveAndDelete, messages delivered on credit left open by an earlier
	// receive are not lost: the next receives return them.
	t.Run("ReceiveAndDeleteLeftoverCredit", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "radcredit", nil)
		s := e.sender(t, q)
		send(t, s, body("0"))
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := r.ReceiveMessages(ctx, 10, nil) // 1 message; 9 credits stay open
		cancel()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("first receive: %d, %v", len(msgs), err)
		}
		send(t, s, body("1"), body("2"), body("3"))
		got := receiveN(t, r, 3, 10*time.Second)
		if fmt.Sprint(bodies(got)) != "[1 2 3]" {
			t.Fatalf("got %v", bodies(got))
		}
		if p := peekAll(t, r); len(p) != 0 {
			t.Fatalf("left: %v", bodies(p))
		}
	})

	// S-LOCK-3, S-LOCK-6: properties modified by abandon keep their wire types, add to the
	// existing ones, and dead-letter properties override existing ones.
	t.Run("ModifiedPropertyTypes", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "abtypes", nil)
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"over": "old"}})
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := r.AbandonMessage(testCtx(t), m, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{
			"ts": ts, "bin": []byte{1, 2}, "i32": int32(5), "f": 1.5, "b": false}}); err != nil {
			t.Fatal(err)
		}
		m = receiveOne(t, r, 10*time.Second)
		ap := m.ApplicationProperties
		if gt, ok := ap["ts"].(time.Time); !ok || !gt.Equal(ts) {
			t.Errorf("ts %#v", ap["ts"])
		}
		if b, ok := ap["bin"].([]byte); !ok || !bytes.Equal(b, []byte{1, 2}) {
			t.Errorf("bin %#v", ap["bin"])
		}
		if ap["i32"] != int32(5) || ap["f"] != 1.5 || ap["b"] != false || ap["over"] != "old" {
			t.Errorf("props %#v", ap)
		}
		if err := r.DeadLetterMessage(testCtx(t), m, &azservicebus.DeadLetterOptions{PropertiesToModify: map[string]any{"over": "new"}}); err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, e.dlq(t, q), 10*time.Second)
		if d.ApplicationProperties["over"] != "new" || d.ApplicationProperties["i32"] != int32(5) {
			t.Errorf("dlq props %#v", d.ApplicationProperties)
		}
	})
}
