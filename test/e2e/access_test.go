package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestAccessedAt: the runtime properties' AccessedAt is the entity's last send or
// receive, as Service Bus defines it, and reading the properties is not an access.
func TestAccessedAt(t *testing.T) {
	e := newEnv(t)

	// laterThan waits until read reports an AccessedAt after prev and returns it.
	laterThan := func(t *testing.T, what string, prev time.Time, read func() (time.Time, error)) time.Time {
		t.Helper()
		var got time.Time
		testutil.WaitFor(t, 10*time.Second, func() error {
			at, err := read()
			if err != nil {
				return err
			}
			if !at.After(prev) {
				return fmt.Errorf("%s: AccessedAt %v, want after %v", what, at, prev)
			}
			got = at
			return nil
		})
		return got
	}
	// unchanged reads twice more and wants the same AccessedAt: a GET is no access.
	unchanged := func(t *testing.T, want time.Time, read func() (time.Time, error)) {
		t.Helper()
		for range 2 {
			if at, err := read(); err != nil || !at.Equal(want) {
				t.Fatalf("after a GET: AccessedAt %v (%v), want %v", at, err, want)
			}
		}
	}
	// tick waits until the wall clock has passed at, so that the next access is stamped
	// later than it (the broker records milliseconds).
	tick := func(t *testing.T, at time.Time) {
		testutil.WaitFor(t, 5*time.Second, func() error {
			if !time.Now().After(at.Add(time.Millisecond)) {
				return fmt.Errorf("clock at %v", at)
			}
			return nil
		})
	}

	t.Run("Queue", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "accessed", nil)
		read := func() (time.Time, error) {
			rp, err := e.admin.GetQueueRuntimeProperties(testCtx(t), q, nil)
			if err != nil {
				return time.Time{}, err
			}
			return rp.AccessedAt, nil
		}
		if at, err := read(); err != nil || !at.IsZero() {
			t.Fatalf("new queue: AccessedAt %v (%v), want zero", at, err)
		}
		send(t, e.sender(t, q), body("x"))
		sent := laterThan(t, "after a send", time.Time{}, read)
		if d := time.Since(sent); d < 0 || d > time.Minute {
			t.Fatalf("AccessedAt %v is not the send's time (now %v)", sent, time.Now())
		}
		unchanged(t, sent, read)
		tick(t, sent)
		receiveOne(t, e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}), 10*time.Second)
		received := laterThan(t, "after a receive", sent, read)
		unchanged(t, received, read)
	})

	t.Run("TopicAndSubscription", func(t *testing.T) {
		t.Parallel()
		topic, sub := name("accessedt"), "s"
		if _, err := e.admin.CreateTopic(testCtx(t), topic, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CreateSubscription(testCtx(t), topic, sub, nil); err != nil {
			t.Fatal(err)
		}
		readTopic := func() (time.Time, error) {
			rp, err := e.admin.GetTopicRuntimeProperties(testCtx(t), topic, nil)
			if err != nil {
				return time.Time{}, err
			}
			return rp.AccessedAt, nil
		}
		readSub := func() (time.Time, error) {
			rp, err := e.admin.GetSubscriptionRuntimeProperties(testCtx(t), topic, sub, nil)
			if err != nil {
				return time.Time{}, err
			}
			return rp.AccessedAt, nil
		}
		if at, err := readTopic(); err != nil || !at.IsZero() {
			t.Fatalf("new topic: AccessedAt %v (%v), want zero", at, err)
		}
		subBefore, err := readSub() // a new subscription reports its creation, as on Service Bus
		if err != nil || subBefore.IsZero() {
			t.Fatalf("new subscription: AccessedAt %v (%v)", subBefore, err)
		}
		tick(t, subBefore)
		send(t, e.sender(t, topic), body("x"))
		sent := laterThan(t, "topic after a send", time.Time{}, readTopic)
		unchanged(t, sent, readTopic)
		tick(t, sent)
		receiveOne(t, e.subReceiver(t, topic, sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}), 10*time.Second)
		received := laterThan(t, "subscription after a receive", sent, readSub)
		unchanged(t, received, readSub)
		laterThan(t, "topic after a receive from its subscription", sent, readTopic)
	})
}
