// Package backendtest is a table of behaviour scenarios for amqp.Backend
// implementations. amqp's SDK tests run on an in-memory fake Backend
// (amqp/membackend_test.go), so the fake decides what those tests see; running the same
// scenarios against the fake (amqp/conformance_test.go) and against the real,
// fsm-backed backend over a single-node cluster (cmd/internal/bridge) holds the fake to
// the broker's behaviour. Each scenario names the rules of docs/semantics.md it checks.
//
// Scenarios use only what both backends offer: queues with default properties
// (LockDuration 30 s or more, MaxDeliveryCount 10), no waiting on lock expiry, and
// session calls that do not depend on who holds a session.
//
// Only tests import it (test/deps_test.go).
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
)

// Env is a backend under test.
type Env struct {
	Backend amqp.Backend
	// NewQueue creates a queue with default properties, session-enabled when sessions is
	// set, and returns its path. Each call gets a new name.
	NewQueue func(t *testing.T, sessions bool) string
	// NewTopic creates a topic with n subscriptions, each with only the $Default (true)
	// rule, and returns the topic's path and the subscriptions' paths.
	NewTopic func(t *testing.T, n int) (topic string, subs []string)
}

// Run runs every scenario against env, each as a subtest.
func Run(t *testing.T, env Env) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sc.run(t, &check{T: t, ctx: ctx, b: env.Backend, env: env}, env.NewQueue)
		})
	}
}

var scenarios = []struct {
	name string
	run  func(t *testing.T, c *check, newQueue func(*testing.T, bool) string)
}{
	{"PeekLockDeliversInOrderWithLock", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SEND-5, S-RCV-2, S-LOCK-1, S-LOCK-5: sequence order, a lock, DeliveryCount 1.
		q := nq(t, false)
		c.send(q, c.msg("a", ""), c.msg("b", ""))
		ds := c.receive(q, amqp.PeekLock, 10)
		c.ids(ds, "a", "b")
		if ds[0].SequenceNumber <= 0 || ds[1].SequenceNumber <= ds[0].SequenceNumber {
			t.Errorf("sequence numbers %d, %d: want positive and increasing", ds[0].SequenceNumber, ds[1].SequenceNumber)
		}
		for _, d := range ds {
			if d.DeliveryCount != 1 || d.LockToken == (amqp.UUID{}) || !d.LockedUntil.After(d.EnqueuedTime) ||
				d.EnqueuedTime.IsZero() || d.State != amqp.StateActive || !d.ExpiresAt.IsZero() {
				t.Errorf("delivery %s: count %d, token %v, enqueued %v, locked until %v, state %v, expires %v",
					d.Message.MessageID, d.DeliveryCount, d.LockToken, d.EnqueuedTime, d.LockedUntil, d.State, d.ExpiresAt)
			}
		}
		c.ids(c.receive(q, amqp.PeekLock, 10)) // S-LOCK-1: locked, so nothing more
	}},
	{"CompleteRemovesAndOtherSettleIsLockLost", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-2, S-LOCK-9; S-LOCK-12: the same complete again (its first answer lost)
		// gets the first outcome, and changes nothing.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Complete}, nil)
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Complete}, nil)
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Abandon}, amqp.ErrLockLost)
		c.ids(c.peek(amqp.Address{Entity: q}))
	}},
	{"StaleTokenFailsAloneInABatch", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-9: each settlement of a batch stands alone.
		q := nq(t, false)
		c.send(q, c.msg("a", ""), c.msg("b", ""))
		ds := c.receive(q, amqp.PeekLock, 2)
		stale := ds[0].LockToken
		stale[15] ^= 0xff
		addr := amqp.Address{Entity: q}
		errs := c.b.Settle(c.ctx, []amqp.Settlement{
			{Address: addr, LockToken: ds[0].LockToken, Disposition: amqp.Complete},
			{Address: addr, LockToken: stale, Disposition: amqp.Complete},
			{Address: addr, LockToken: ds[1].LockToken, Disposition: amqp.Complete},
		})
		if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], amqp.ErrLockLost) || errs[2] != nil {
			t.Fatalf("settle errors %v, want nil, lock lost, nil", errs)
		}
	}},
	{"AbandonRedeliversWithCountAndProperties", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-3, S-LOCK-5, S-RCV-2: back at the front, DeliveryCount 2, properties merged.
		q := nq(t, false)
		c.send(q, c.msg("a", "kept"), c.msg("b", ""))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Abandon,
			PropertiesToModify: []amqp.Property{{Key: "hello", Value: "world"}}}, nil)
		again := c.receive(q, amqp.PeekLock, 1)[0]
		if again.Message.MessageID != "a" || again.DeliveryCount != 2 {
			t.Fatalf("after abandon got %s with count %d, want a with 2", again.Message.MessageID, again.DeliveryCount)
		}
		c.props(again, map[string]any{"k": "kept", "hello": "world"})
		if p := c.peek(amqp.Address{Entity: q}); len(p) != 2 || p[0].DeliveryCount != 2 || p[1].DeliveryCount != 0 {
			t.Errorf("peek after abandon: %s", summary(p))
		}
	}},
	{"ReleaseDoesNotCountADelivery", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-RCV-1 releaser, protocol.md §6.2: a released message comes back with the same count.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Release}, nil)
		if again := c.receive(q, amqp.PeekLock, 1)[0]; again.DeliveryCount != 1 {
			t.Fatalf("delivery count after a release: %d, want 1", again.DeliveryCount)
		}
	}},
	{"MaxDeliveryCountDeadLetters", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-5: the tenth abandon moves the message to the dead-letter sub-queue.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		for i := 1; i <= 10; i++ {
			ds := c.receive(q, amqp.PeekLock, 1)
			if len(ds) != 1 || ds[0].DeliveryCount != uint32(i) {
				t.Fatalf("delivery %d: %s", i, summary(ds))
			}
			c.settle(q, ds[0], amqp.Settlement{Disposition: amqp.Abandon}, nil)
		}
		c.ids(c.receive(q, amqp.PeekLock, 1))
		dl := c.peek(amqp.Address{Entity: q, Sub: amqp.SubQueueDeadLetter})
		c.ids(dl, "a")
		if !dl[0].DeadLettered || dl[0].DeadLetterReason != "MaxDeliveryCountExceeded" || dl[0].DeadLetterDescription == "" {
			t.Errorf("dead-lettered %v, reason %q, description %q", dl[0].DeadLettered, dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
		}
	}},
	{"DeadLetterKeepsReasonAndIsReceivable", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-6, S-DLQ-1.
		q := nq(t, false)
		c.send(q, c.msg("a", "kept"))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		c.settle(q, d, amqp.Settlement{Disposition: amqp.DeadLetter, DeadLetterReason: "bad", DeadLetterDescription: "very bad",
			PropertiesToModify: []amqp.Property{{Key: "why", Value: "test"}}}, nil)
		c.ids(c.receive(q, amqp.PeekLock, 1))
		dlq := amqp.Address{Entity: q, Sub: amqp.SubQueueDeadLetter}
		ds := c.receiveFrom(dlq, amqp.PeekLock, 1)
		c.ids(ds, "a")
		// The count a message shows on its first receive from the dead-letter sub-queue
		// (the count it had, or one more) is not pinned here yet.
		if !ds[0].DeadLettered || ds[0].DeadLetterReason != "bad" || ds[0].DeadLetterDescription != "very bad" || ds[0].DeliveryCount < 1 {
			t.Errorf("from the dead-letter queue: dead-lettered %v, reason %q, description %q, count %d",
				ds[0].DeadLettered, ds[0].DeadLetterReason, ds[0].DeadLetterDescription, ds[0].DeliveryCount)
		}
		c.props(ds[0], map[string]any{"k": "kept", "why": "test"})
		c.settleAt(dlq, ds[0], amqp.Settlement{Disposition: amqp.Complete}, nil)
		c.ids(c.peek(dlq))
	}},
	{"DeadLetterQueueNeverDeadLettersAgain", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-DLQ-1: abandoning a dead-lettered message past MaxDeliveryCount keeps it there.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		c.settle(q, c.receive(q, amqp.PeekLock, 1)[0], amqp.Settlement{Disposition: amqp.DeadLetter, DeadLetterReason: "r"}, nil)
		dlq := amqp.Address{Entity: q, Sub: amqp.SubQueueDeadLetter}
		for range 11 {
			ds := c.receiveFrom(dlq, amqp.PeekLock, 1)
			c.ids(ds, "a")
			c.settleAt(dlq, ds[0], amqp.Settlement{Disposition: amqp.Abandon}, nil)
		}
		if p := c.peek(dlq); len(p) != 1 || p[0].DeadLetterReason != "r" {
			t.Fatalf("dead-letter queue after 11 abandons: %s", summary(p))
		}
	}},
	{"SessionReceiveWithoutTheLockFails", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-2, S-SES-6: a session's messages are received only under its lock.
		q := nq(t, true)
		c.send(q, c.sessMsg("a1", "A"))
		_, err := c.b.Receive(c.ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: q}, SessionID: "A", Max: 1})
		if !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Fatalf("receive from a session nobody accepted: %v, want session lock lost", err)
		}
	}},
	{"DeferHidesUntilReceivedBySequenceNumber", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-7.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Defer}, nil)
		c.ids(c.receive(q, amqp.PeekLock, 1))
		if p := c.peek(amqp.Address{Entity: q}); len(p) != 1 || p[0].State != amqp.StateDeferred {
			t.Fatalf("peek after defer: %s", summary(p))
		}
		ds, err := c.b.ReceiveDeferred(c.ctx, amqp.Address{Entity: q}, "", amqp.PeekLock, []int64{d.SequenceNumber})
		if err != nil || len(ds) != 1 || ds[0].LockToken == (amqp.UUID{}) || ds[0].LockedUntil.IsZero() {
			t.Fatalf("receive deferred: %s %v", summary(ds), err)
		}
		c.settle(q, ds[0], amqp.Settlement{Disposition: amqp.Complete}, nil)
		c.ids(c.peek(amqp.Address{Entity: q}))
	}},
	{"PeekNeitherLocksNorCounts", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-11.
		q := nq(t, false)
		c.send(q, c.msg("a", ""), c.msg("b", ""), c.msg("c", ""))
		p := c.peek(amqp.Address{Entity: q})
		c.ids(p, "a", "b", "c")
		for _, d := range p {
			if d.LockToken != (amqp.UUID{}) || !d.LockedUntil.IsZero() || d.DeliveryCount != 0 {
				t.Errorf("peeked %s: token %v, locked until %v, count %d", d.Message.MessageID, d.LockToken, d.LockedUntil, d.DeliveryCount)
			}
		}
		from, err := c.b.Peek(c.ctx, amqp.Address{Entity: q}, "", p[1].SequenceNumber, 10)
		if err != nil {
			t.Fatal(err)
		}
		c.ids(from, "b", "c")
		c.ids(c.receive(q, amqp.PeekLock, 10), "a", "b", "c")
	}},
	{"ReceiveAndDeleteRemoves", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-RCV-1.
		q := nq(t, false)
		c.send(q, c.msg("a", ""), c.msg("b", ""))
		ds := c.receive(q, amqp.ReceiveAndDelete, 10)
		c.ids(ds, "a", "b")
		for _, d := range ds {
			if d.LockToken != (amqp.UUID{}) || !d.LockedUntil.IsZero() {
				t.Errorf("receive-and-delete %s: token %v, locked until %v", d.Message.MessageID, d.LockToken, d.LockedUntil)
			}
		}
		c.ids(c.peek(amqp.Address{Entity: q}))
	}},
	{"RenewLockExtends", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-LOCK-8, S-LOCK-9.
		q := nq(t, false)
		c.send(q, c.msg("a", ""))
		d := c.receive(q, amqp.PeekLock, 1)[0]
		until, err := c.b.RenewLock(c.ctx, amqp.Address{Entity: q}, "", []amqp.UUID{d.LockToken})
		if err != nil || len(until) != 1 || until[0].Before(d.LockedUntil) {
			t.Fatalf("renew: %v %v (was locked until %v)", until, err, d.LockedUntil)
		}
		c.settle(q, d, amqp.Settlement{Disposition: amqp.Complete}, nil)
		if _, err := c.b.RenewLock(c.ctx, amqp.Address{Entity: q}, "", []amqp.UUID{d.LockToken}); !errors.Is(err, amqp.ErrLockLost) {
			t.Fatalf("renew after complete: %v, want lock lost", err)
		}
	}},
	{"ScheduledIsPeekableNotReceivableAndCancels", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SCH-1.
		q := nq(t, false)
		m := c.msg("later", "")
		m.ScheduledEnqueueTime = time.Now().Add(time.Hour)
		seqs, err := c.b.Schedule(c.ctx, q, []*amqp.Message{m})
		if err != nil || len(seqs) != 1 || seqs[0] <= 0 {
			t.Fatalf("schedule: %v %v", seqs, err)
		}
		c.ids(c.receive(q, amqp.PeekLock, 1))
		p := c.peek(amqp.Address{Entity: q})
		if len(p) != 1 || p[0].State != amqp.StateScheduled || p[0].SequenceNumber != seqs[0] {
			t.Fatalf("peek after schedule: %s", summary(p))
		}
		if err := c.b.CancelScheduled(c.ctx, q, seqs); err != nil {
			t.Fatal(err)
		}
		c.ids(c.peek(amqp.Address{Entity: q}))
	}},
	{"TopicCopiesToEverySubscription", func(t *testing.T, c *check, _ func(*testing.T, bool) string) {
		// S-TOP-1: every matching subscription ($Default: all) gets its own copy, settled
		// independently; the topic itself is not received from.
		topic, subs := c.env.NewTopic(t, 2)
		c.send(topic, c.msg("a", ""), c.msg("b", ""))
		first := c.receiveFrom(amqp.Address{Entity: subs[0]}, amqp.PeekLock, 10)
		c.ids(first, "a", "b")
		c.settleAt(amqp.Address{Entity: subs[0]}, first[0], amqp.Settlement{Disposition: amqp.Complete}, nil)
		c.ids(c.receiveFrom(amqp.Address{Entity: subs[1]}, amqp.ReceiveAndDelete, 10), "a", "b")
		c.ids(c.peek(amqp.Address{Entity: subs[0]}), "b")
	}},
	{"TimeToLiveSetsExpiresAt", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-TTL-1: ExpiresAt is EnqueuedTime plus the message's TTL (the entity default is
		// unlimited), and a message without a TTL never expires.
		q := nq(t, false)
		m := c.msg("ttl", "")
		m.TimeToLive = time.Hour
		c.send(q, m, c.msg("forever", ""))
		p := c.peek(amqp.Address{Entity: q})
		c.ids(p, "ttl", "forever")
		if !p[0].ExpiresAt.Equal(p[0].EnqueuedTime.Add(time.Hour)) || !p[1].ExpiresAt.IsZero() {
			t.Fatalf("ExpiresAt %v for enqueued %v + 1h, and %v for no TTL (want zero)", p[0].ExpiresAt, p[0].EnqueuedTime, p[1].ExpiresAt)
		}
	}},
	{"SendWithScheduledTimeIsScheduled", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SCH-1, protocol.md §5: a plain send carrying a future scheduled time is
		// scheduled, not delivered.
		q := nq(t, false)
		m := c.msg("later", "")
		m.ScheduledEnqueueTime = time.Now().Add(time.Hour)
		c.send(q, m, c.msg("now", ""))
		c.ids(c.receive(q, amqp.PeekLock, 10), "now")
		if p := c.peek(amqp.Address{Entity: q}); len(p) != 2 || p[0].State != amqp.StateScheduled {
			t.Fatalf("peek: %s", summary(p))
		}
	}},
	{"PeekBySession", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-1, S-LOCK-11: peek works on a session entity, also restricted to one session.
		q := nq(t, true)
		c.send(q, c.sessMsg("a1", "A"), c.sessMsg("b1", "B"), c.sessMsg("a2", "A"))
		c.ids(c.peek(amqp.Address{Entity: q}), "a1", "b1", "a2")
		ds, err := c.b.Peek(c.ctx, amqp.Address{Entity: q}, "A", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		c.ids(ds, "a1", "a2")
	}},
	{"UnknownEntityIsNotFound", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SEND-2: not found, not retryable.
		if _, err := c.b.Entity(c.ctx, "no-such-queue"); !errors.Is(err, amqp.ErrNotFound) {
			t.Errorf("entity: %v", err)
		}
		if err := c.b.Send(c.ctx, "no-such-queue", []*amqp.Message{c.msg("a", "")}); !errors.Is(err, amqp.ErrNotFound) {
			t.Errorf("send: %v", err)
		}
		if _, err := c.b.Receive(c.ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: "no-such-queue"}, Max: 1}); !errors.Is(err, amqp.ErrNotFound) {
			t.Errorf("receive: %v", err)
		}
	}},
	{"EntityLookupIgnoresCase", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		q := nq(t, true)
		info, err := c.b.Entity(c.ctx, upper(q))
		if err != nil || info.Path != q || info.Kind != amqp.KindQueue || !info.RequiresSession {
			t.Fatalf("entity %q: %+v %v", upper(q), info, err)
		}
	}},
	{"SessionAcceptReceivesItsMessagesInOrder", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-1, S-SES-2, S-SES-3.
		q := nq(t, true)
		c.send(q, c.sessMsg("a1", "A"), c.sessMsg("b1", "B"), c.sessMsg("a2", "A"))
		id, until, err := c.b.AcceptSession(c.ctx, amqp.Address{Entity: q}, "A", 0)
		if err != nil || id != "A" || until.IsZero() {
			t.Fatalf("accept A: %q %v %v", id, until, err)
		}
		ds, err := c.b.Receive(c.ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: q}, SessionID: "A", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		c.ids(ds, "a1", "a2")
		c.settleSession(q, "A", ds[0], amqp.Abandon)
		ds, err = c.b.Receive(c.ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: q}, SessionID: "A", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		c.ids(ds, "a1")
		if err := c.b.ReleaseSession(c.ctx, amqp.Address{Entity: q}, "A"); err != nil {
			t.Fatal(err)
		}
		if id, _, err := c.b.AcceptSession(c.ctx, amqp.Address{Entity: q}, "", time.Second); err != nil || id == "" {
			t.Fatalf("accept next after a release: %q %v", id, err)
		}
	}},
	{"SessionBelongsToTheConnectionThatAcceptedIt", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-2: one holder (the accepting connection, amqp.ConnectionID) for the
		// session's messages; another connection can neither accept the session nor
		// receive, settle, renew, set state in or release it.
		q := nq(t, true)
		a := amqp.Address{Entity: q}
		c.send(q, c.sessMsg("s1", "S"), c.sessMsg("s2", "S"))
		ctxA, ctxB := amqp.WithConnectionID(c.ctx, "conn-A"), amqp.WithConnectionID(c.ctx, "conn-B")
		if _, _, err := c.b.AcceptSession(ctxA, a, "S", 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.b.AcceptSession(ctxB, a, "S", 0); !errors.Is(err, amqp.ErrSessionCannotBeLocked) {
			t.Errorf("B accepts A's session: %v, want session cannot be locked", err)
		}
		ds, err := c.b.Receive(ctxA, amqp.ReceiveRequest{Address: a, SessionID: "S", Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		c.ids(ds, "s1")
		if got, err := c.b.Receive(ctxB, amqp.ReceiveRequest{Address: a, SessionID: "S", Max: 1}); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("B receives from A's session: %s, %v; want session lock lost", summary(got), err)
		}
		errs := c.b.Settle(ctxB, []amqp.Settlement{{Address: a, SessionID: "S", LockToken: ds[0].LockToken, Disposition: amqp.Complete}})
		if len(errs) != 1 || !errors.Is(errs[0], amqp.ErrSessionLockLost) {
			t.Errorf("B completes A's message: %v, want session lock lost", errs)
		}
		if _, err := c.b.RenewSessionLock(ctxB, a, "S"); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("B renews A's session: %v, want session lock lost", err)
		}
		if err := c.b.SetSessionState(ctxB, a, "S", []byte("B")); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("B sets A's session state: %v, want session lock lost", err)
		}
		if err := c.b.ReleaseSession(ctxB, a, "S"); err != nil {
			t.Errorf("B releases A's session: %v, want a no-op", err)
		}
		if _, err := c.b.RenewSessionLock(ctxA, a, "S"); err != nil {
			t.Errorf("A renews after B's release: %v (A must still hold the session)", err)
		}
		if errs := c.b.Settle(ctxA, []amqp.Settlement{{Address: a, SessionID: "S", LockToken: ds[0].LockToken, Disposition: amqp.Complete}}); errs[0] != nil {
			t.Errorf("A completes its message: %v", errs[0])
		}
	}},
	{"AcceptNextWithNoSessionTimesOut", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-2: next-available waits up to its timeout, then fails with a timeout.
		q := nq(t, true)
		start := time.Now()
		_, _, err := c.b.AcceptSession(c.ctx, amqp.Address{Entity: q}, "", 200*time.Millisecond)
		if !errors.Is(err, amqp.ErrTimeout) || time.Since(start) < 200*time.Millisecond {
			t.Fatalf("accept next on an empty queue: %v after %v, want a timeout after 200ms", err, time.Since(start))
		}
	}},
	{"SessionState", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-SES-5: null until set, kept, cleared by an empty state.
		q := nq(t, true)
		a := amqp.Address{Entity: q}
		if _, _, err := c.b.AcceptSession(c.ctx, a, "S", 0); err != nil {
			t.Fatal(err)
		}
		if st, err := c.b.SessionState(c.ctx, a, "S"); err != nil || st != nil {
			t.Fatalf("state before any set: %q %v, want nil", st, err)
		}
		if err := c.b.SetSessionState(c.ctx, a, "S", []byte("st")); err != nil {
			t.Fatal(err)
		}
		if st, err := c.b.SessionState(c.ctx, a, "S"); err != nil || string(st) != "st" {
			t.Fatalf("state: %q %v", st, err)
		}
		if ids, err := c.b.ListSessions(c.ctx, a, 0, 100); err != nil || !slices.Contains(ids, "S") {
			t.Fatalf("list sessions: %v %v, want S (it has state)", ids, err)
		}
		if err := c.b.SetSessionState(c.ctx, a, "S", nil); err != nil {
			t.Fatal(err)
		}
		if st, err := c.b.SessionState(c.ctx, a, "S"); err != nil || st != nil {
			t.Fatalf("state after clearing: %q %v, want nil", st, err)
		}
	}},
	{"TransactionAllOrNothing", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// Transactions (AMQP part 4) on one queue: a commit with a lost lock applies
		// nothing; a valid one applies a complete, an abandon and a send together.
		tx, ok := c.b.(amqp.Transactor)
		if !ok {
			t.Fatal("the backend does not implement amqp.Transactor")
		}
		q := nq(t, false)
		a := amqp.Address{Entity: q}
		c.send(q, c.msg("a", ""), c.msg("b", ""))
		ds := c.receive(q, amqp.PeekLock, 2)
		c.ids(ds, "a", "b")
		stale := ds[1].LockToken
		stale[15] ^= 0xff
		complete := amqp.TxnOp{Settlement: &amqp.Settlement{Address: a, LockToken: ds[0].LockToken, Disposition: amqp.Complete}}
		err := tx.Commit(c.ctx, []amqp.TxnOp{complete, {Entity: q, Messages: []*amqp.Message{c.msg("x", "")}},
			{Settlement: &amqp.Settlement{Address: a, LockToken: stale, Disposition: amqp.Complete}}})
		if !errors.Is(err, amqp.ErrLockLost) {
			t.Fatalf("commit with a stale lock: %v, want ErrLockLost", err)
		}
		c.ids(c.peek(a), "a", "b")
		err = tx.Commit(c.ctx, []amqp.TxnOp{complete,
			{Settlement: &amqp.Settlement{Address: a, LockToken: ds[1].LockToken, Disposition: amqp.Abandon}},
			{Entity: q, Messages: []*amqp.Message{c.msg("c", "")}}})
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		c.ids(c.receive(q, amqp.PeekLock, 10), "b", "c")
	}},
	{"BatchDeleteInSequenceOrder", func(t *testing.T, c *check, nq func(*testing.T, bool) string) {
		// S-DEL-1..4: up to n, in sequence order, enqueued before the cutoff; locked
		// messages stay, deferred ones go, a scheduled one counts from its scheduled time;
		// a session's only with its id; the dead-letter queue on its own.
		del, ok := c.b.(amqp.MessageDeleter)
		if !ok {
			t.Fatal("the backend does not implement amqp.MessageDeleter")
		}
		deleteN := func(a amqp.Address, session string, n int, before time.Time, want int) {
			t.Helper()
			got, err := del.DeleteMessages(c.ctx, a, session, n, before)
			if err != nil || got != want {
				t.Fatalf("delete %d from %s (session %q) before %v: %d, %v; want %d", n, a, session, before, got, err, want)
			}
		}
		q := nq(t, false)
		a := amqp.Address{Entity: q}
		c.send(q, c.msg("a", ""), c.msg("b", ""), c.msg("c", ""), c.msg("d", ""))
		locked := c.receive(q, amqp.PeekLock, 2)
		c.settle(q, locked[1], amqp.Settlement{Disposition: amqp.Defer}, nil)
		later := time.Now().Add(time.Hour)
		if _, err := c.b.Schedule(c.ctx, q, []*amqp.Message{c.scheduled("s", later)}); err != nil {
			t.Fatal(err)
		}
		soon := time.Now().Add(time.Minute)
		deleteN(a, "", 2, soon, 2) // b (deferred) and c; a is locked
		c.ids(c.peek(a), "a", "d", "s")
		deleteN(a, "", 10, time.Now().Add(-time.Hour), 0)
		deleteN(a, "", 4000, soon, 1) // d; s is enqueued at its scheduled time
		c.ids(c.peek(a), "a", "s")
		deleteN(a, "", 4000, later.Add(time.Minute), 1)
		c.ids(c.peek(a), "a")
		c.settle(q, locked[0], amqp.Settlement{Disposition: amqp.DeadLetter}, nil)
		deleteN(amqp.Address{Entity: q, Sub: amqp.SubQueueDeadLetter}, "", 10, soon, 1)
		c.ids(c.peek(amqp.Address{Entity: q, Sub: amqp.SubQueueDeadLetter}))

		sq := nq(t, true)
		sa := amqp.Address{Entity: sq}
		c.send(sq, c.sessMsg("x1", "S1"), c.sessMsg("y", "S2"), c.sessMsg("x2", "S1"))
		deleteN(sa, "S1", 10, soon, 2)
		c.ids(c.peek(sa), "y")
		if _, err := del.DeleteMessages(c.ctx, a, "S1", 1, soon); !errors.Is(err, amqp.ErrNotAllowed) {
			t.Fatalf("a session id on a queue without sessions: %v, want ErrNotAllowed", err)
		}
	}},
}

// scheduled is a message with id id scheduled for at.
func (c *check) scheduled(id string, at time.Time) *amqp.Message {
	c.Helper()
	m := &amqp.Message{MessageID: id, ScheduledEnqueueTime: at}
	if err := m.Reencode(); err != nil {
		c.Fatalf("encode %s: %v", id, err)
	}
	return m
}

// check holds what the scenarios share.
type check struct {
	*testing.T
	ctx context.Context
	b   amqp.Backend
	env Env
}

// msg is a message with id id and, unless k is "", the application property k=k. Raw
// is a real encoding, as a client would have sent it.
func (c *check) msg(id, k string) *amqp.Message {
	c.Helper()
	m := &amqp.Message{MessageID: id}
	if k != "" {
		m.ApplicationProperties = []amqp.Property{{Key: "k", Value: k}}
	}
	if err := m.Reencode(); err != nil {
		c.Fatalf("encode %s: %v", id, err)
	}
	return m
}

func (c *check) sessMsg(id, session string) *amqp.Message {
	c.Helper()
	m := &amqp.Message{MessageID: id, SessionID: session}
	if err := m.Reencode(); err != nil {
		c.Fatalf("encode %s: %v", id, err)
	}
	return m
}

func (c *check) send(q string, ms ...*amqp.Message) {
	c.Helper()
	if err := c.b.Send(c.ctx, q, ms); err != nil {
		c.Fatalf("send to %s: %v", q, err)
	}
}

func (c *check) receive(q string, mode amqp.ReceiveMode, max int) []*amqp.Delivery {
	c.Helper()
	return c.receiveFrom(amqp.Address{Entity: q}, mode, max)
}

func (c *check) receiveFrom(a amqp.Address, mode amqp.ReceiveMode, max int) []*amqp.Delivery {
	c.Helper()
	ds, err := c.b.Receive(c.ctx, amqp.ReceiveRequest{Address: a, Mode: mode, Max: max})
	if err != nil {
		c.Fatalf("receive from %s: %v", a, err)
	}
	return ds
}

func (c *check) peek(a amqp.Address) []*amqp.Delivery {
	c.Helper()
	ds, err := c.b.Peek(c.ctx, a, "", 0, 100)
	if err != nil {
		c.Fatalf("peek %s: %v", a, err)
	}
	return ds
}

func (c *check) settle(q string, d *amqp.Delivery, s amqp.Settlement, want error) {
	c.Helper()
	c.settleAt(amqp.Address{Entity: q}, d, s, want)
}

func (c *check) settleAt(a amqp.Address, d *amqp.Delivery, s amqp.Settlement, want error) {
	c.Helper()
	s.Address, s.LockToken = a, d.LockToken
	errs := c.b.Settle(c.ctx, []amqp.Settlement{s})
	if len(errs) != 1 || (want == nil && errs[0] != nil) || (want != nil && !errors.Is(errs[0], want)) {
		c.Fatalf("%v of %s: %v, want %v", s.Disposition, d.Message.MessageID, errs, want)
	}
}

func (c *check) settleSession(q, session string, d *amqp.Delivery, disp amqp.Disposition) {
	c.Helper()
	errs := c.b.Settle(c.ctx, []amqp.Settlement{{Address: amqp.Address{Entity: q}, SessionID: session, LockToken: d.LockToken, Disposition: disp}})
	if len(errs) != 1 || errs[0] != nil {
		c.Fatalf("%v of %s in session %s: %v", disp, d.Message.MessageID, session, errs)
	}
}

// ids checks the deliveries' message ids, in order.
func (c *check) ids(ds []*amqp.Delivery, want ...string) {
	c.Helper()
	got := make([]string, len(ds))
	for i, d := range ds {
		got[i] = d.Message.MessageID
	}
	if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
		c.Fatalf("got messages %q, want %q", got, want)
	}
}

// props checks a delivery's effective application properties: those a client would
// receive, whether the backend re-encoded the message or left the rewrite to amqp.
func (c *check) props(d *amqp.Delivery, want map[string]any) {
	c.Helper()
	ps := d.Message.ApplicationProperties
	if d.PropertiesModified {
		ps = d.Properties
	}
	got := map[string]any{}
	for _, p := range ps {
		// A backend may store a dead-letter's reason and description as properties
		// (S-LOCK-6); amqp adds them on delivery when it does not.
		if d.DeadLettered && (p.Key == "DeadLetterReason" && p.Value == d.DeadLetterReason ||
			p.Key == "DeadLetterErrorDescription" && p.Value == d.DeadLetterDescription) {
			continue
		}
		got[p.Key] = p.Value
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		c.Errorf("%s: application properties %v, want %v", d.Message.MessageID, got, want)
	}
}

func summary(ds []*amqp.Delivery) string {
	s := fmt.Sprintf("%d messages", len(ds))
	for _, d := range ds {
		s += fmt.Sprintf("; %s seq %d count %d state %v", d.Message.MessageID, d.SequenceNumber, d.DeliveryCount, d.State)
	}
	return s
}

func upper(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			b[i] = ch - 'a' + 'A'
		}
	}
	return string(b)
}
