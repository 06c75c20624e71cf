package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// createQueue creates queue name through node n's admin API.
func createQueue(t *testing.T, n *harness.Node, name string, props *admin.QueueProperties) {
	t.Helper()
	// 60 s: the server acknowledges a committed create after at most its own 30 s
	// (commit, then up to ServeWait for the partitions); a 16-partition queue on a
	// loaded machine took longer than the 30 s this helper gave.
	if _, err := n.AdminClient(t).CreateQueue(ctxT(t, 60*time.Second), name, &admin.CreateQueueOptions{Properties: props}); err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
}

// mostLeading returns the node that leads most groups of entity.
func mostLeading(t *testing.T, c *harness.Cluster, entity string) *harness.Node {
	t.Helper()
	counts := leadersOf(t, c, entity)
	var ids []string
	for id := range counts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		return counts[ids[i]] > counts[ids[j]] || counts[ids[i]] == counts[ids[j]] && ids[i] < ids[j]
	})
	t.Logf("leaders of %s's groups: %v", entity, counts)
	return c.Node(ids[0])
}

func others(c *harness.Cluster, not ...*harness.Node) []*harness.Node {
	var out []*harness.Node
	for _, n := range c.Nodes {
		keep := true
		for _, x := range not {
			keep = keep && n != x
		}
		if keep {
			out = append(out, n)
		}
	}
	return out
}

// S-DUR-1, S-DUR-2, S-DUR-3: kill -9 of the node leading most partitions of a
// partitioned queue, under load from clients on the other nodes: no acknowledged send is
// lost, every message is completed once (a second delivery only after a settlement
// error the receiver saw, or a send retried after an error), the clients go on after
// retries, and the killed node, restarted, converges with its peers.
func TestKillLeaderUnderLoad(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "kill-leader"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	victim := mostLeading(t, c, q)
	alive := others(c, victim)
	t.Logf("will kill %s; clients on %s and %s", victim.ID, alive[0].ID, alive[1].ID)

	w := newWorkload(t, q)
	var workers []string
	for i := range 4 {
		s, r := fmt.Sprint("s", i), fmt.Sprint("r", i)
		w.startSender(s, alive[i%2], 600, 20*time.Millisecond)
		w.startReceiver(r, alive[(i+1)%2])
		workers = append(workers, s, r)
	}
	start := w.mark()
	c.WaitFor(t, 30*time.Second, func() error { return w.progressed(start, 20, workers...) })

	victim.Kill()
	killed := time.Now()
	atKill := w.mark()
	t.Logf("killed %s with %v done", victim.ID, atKill)
	// Every client goes on through the failover, after retries.
	c.WaitFor(t, 30*time.Second, func() error { return w.progressed(atKill, 30, workers...) })
	t.Logf("clients recovered %v after the kill; %d errors since", time.Since(killed).Round(time.Millisecond), len(w.errorsSince(killed)))

	w.stopSenders()
	p := peeker(t, alive[0], q)
	c.WaitFor(t, 60*time.Second, func() error { return w.drained(p) })
	w.stopReceivers()
	w.check(t)
	for _, e := range w.errorsSince(time.Time{}) {
		t.Logf("client error: %s", e)
	}

	victim.Restart()
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, "", 3, nil) })
}

// S-LOCK-10: a lock taken through node A stays valid when the partition's leader (neither
// A nor B) is killed; a client on node B completes the message by its lock token. The
// completion succeeds, or fails only with lock-lost (and then the message comes back);
// once completed, the message is gone for good.
func TestLockSettledThroughAnotherNodeAfterLeaderKill(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "lock-across"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{LockDuration: to.Ptr("PT15S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	leader := mostLeading(t, c, q)
	ab := others(c, leader)
	a, b := ab[0], ab[1]
	t.Logf("leader %s, receive through %s, complete through %s", leader.ID, a.ID, b.ID)

	ctx := ctxT(t, 90*time.Second)
	ca := a.Client(t)
	s, err := ca.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("held"), Body: []byte("held")}, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	ra, err := ca.NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, ctx, ra, "held")
	t.Logf("locked until %v", m.LockedUntil)

	leader.Kill()
	rb, err := b.Client(t).NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	// By lock token alone, so that the SDK settles on node B's connection (management
	// link), not on A's receiving link.
	var completeErr error
	killed := time.Now()
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		completeErr = rb.CompleteMessage(cctx, &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil)
		cancel()
		if completeErr == nil || !retriable(completeErr) || attempt == 5 {
			break
		}
		t.Logf("complete through %s, attempt %d: %v (retrying)", b.ID, attempt, completeErr)
	}
	t.Logf("complete through %s returned %v, %v after the kill", b.ID, completeErr, time.Since(killed).Round(time.Millisecond))
	var sbErr *azservicebus.Error
	switch {
	case completeErr == nil:
		// Gone for good: not in the queue (peeked through the new leader), not received
		// again through either node, even after the lock would have expired.
		for _, n := range []*azservicebus.Receiver{rb, ra} {
			if left, err := n.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))}); err != nil {
				t.Fatalf("peek: %v", err)
			} else if len(left) != 0 {
				t.Fatalf("after a successful complete the queue still holds %d messages (delivery count %d)", len(left), left[0].DeliveryCount)
			}
		}
		wait := time.Until(*m.LockedUntil) + 2*time.Second
		rctx, cancel := context.WithTimeout(ctx, wait)
		again, err := rb.ReceiveMessages(rctx, 1, nil) // blocks until the old lock's expiry has passed
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive: %v", err)
		}
		if len(again) != 0 {
			t.Fatalf("completed message delivered again (delivery count %d)", again[0].DeliveryCount)
		}
	case errors.As(completeErr, &sbErr) && sbErr.Code == azservicebus.CodeLockLost:
		t.Logf("complete through %s failed with lock-lost: %v", b.ID, completeErr)
		// S-LOCK-9: not lost, redelivered (at the latest when the lock expires), unless an
		// earlier attempt completed it: the SDK retries a settlement whose outcome was
		// unknown on its own, and the broker answers the retry of an applied complete
		// with lock-lost ("already settled"). Then the message is gone for good.
		rctx, cancel := context.WithTimeout(ctx, time.Until(*m.LockedUntil)+10*time.Second)
		defer cancel()
		again, err := rb.ReceiveMessages(rctx, 1, nil) // waits past the lock's expiry
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive: %v", err)
		}
		if len(again) == 1 {
			if m2 := again[0]; m2.MessageID != "held" || m2.DeliveryCount != 2 {
				t.Errorf("redelivered %q with delivery count %d, want held with 2", m2.MessageID, m2.DeliveryCount)
			}
			break
		}
		left, err := rb.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))})
		if err != nil || len(left) != 0 {
			t.Fatalf("after lock-lost the message was neither redelivered by its lock's expiry + 10s nor gone: peek %d, %v", len(left), err)
		}
		t.Logf("the message is gone: an attempt the SDK retried had completed it")
	default:
		t.Fatalf("complete through %s after the leader's kill: %v (want success or lock-lost)", b.ID, completeErr)
	}
}

// S-DUR-1, S-DUR-2: every node in turn is stopped with SIGTERM (it hands its leaderships
// over first) and restarted, while SDK clients on every node send and receive. No
// acknowledged message is lost, every error a client sees during a restart is one a user
// retries, the clients go on after each restart, and all replicas converge at the end.
func TestRollingRestartUnderLoad(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "rolling"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })

	w := newWorkload(t, q)
	workers := w.startRing(c.Nodes)
	start := w.mark()
	c.WaitFor(t, 30*time.Second, func() error { return w.progressed(start, 20, workers...) })

	for _, n := range c.Nodes {
		began, before := time.Now(), w.mark()
		if err := n.Stop(); err != nil {
			t.Errorf("%s after SIGTERM: exit status %v", n.ID, err)
		}
		stopped := time.Since(began)
		n.Restart()
		restarted := time.Since(began)
		c.WaitFor(t, 60*time.Second, func() error {
			if err := formed(t, c); err != nil {
				return err
			}
			return serving(t, c, "", 3)
		})
		c.WaitFor(t, 30*time.Second, func() error { return w.progressed(before, 10, workers...) })
		errs := w.errorsSince(began)
		kinds := map[string]int{}
		for _, e := range errs {
			kinds[e.worker+" "+e.op+":"+errCode(e.err)]++
			// A lock-lost answer to a settlement retried after one whose outcome is
			// unknown is what a completed message gets (S-LOCK-9); the checker below
			// verifies that such a message did not come back.
			if !retriable(e.err) && !e.afterUnknown {
				t.Errorf("restart of %s: a client saw an error a user cannot retry: %s", n.ID, e)
			} else {
				t.Logf("restart of %s: %s", n.ID, e)
			}
		}
		t.Logf("restart of %s at %s: stopped in %v, serving again %v and clients going again %v after SIGTERM; %d client errors: %v",
			n.ID, began.Format("15:04:05.000"), stopped.Round(time.Millisecond), restarted.Round(time.Millisecond),
			time.Since(began).Round(time.Millisecond), len(errs), kinds)
	}

	w.stopSenders()
	p := peeker(t, c.Nodes[0], q)
	c.WaitFor(t, 60*time.Second, func() error { return w.drained(p) })
	w.stopReceivers()
	w.check(t)
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, "", 3, nil) })
}

// sendIDs sends one message per ID through node n, in batches, failing the test on any
// error (no fault is injected while it runs).
func sendIDs(t *testing.T, n *harness.Node, queue string, ids []string) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	s, err := n.Client(t).NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for len(ids) > 0 {
		k := min(20, len(ids))
		b, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[:k] {
			if err := b.AddMessage(&azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SendMessageBatch(ctx, b, nil); err != nil {
			t.Fatalf("send batch from %s: %v", ids[0], err)
		}
		ids = ids[k:]
	}
}

func idRange(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// receiveAll receives and completes messages through node n until it has every ID of
// want, failing on a missing, unknown or repeated one; it returns the messages.
func receiveAll(t *testing.T, n *harness.Node, queue string, want []string) map[string]*azservicebus.ReceivedMessage {
	t.Helper()
	ctx := ctxT(t, 90*time.Second)
	r, err := n.Client(t).NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	got := map[string]*azservicebus.ReceivedMessage{}
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		msgs, err := r.ReceiveMessages(rctx, 50, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive through %s: %v", n.ID, err)
		}
		for _, m := range msgs {
			switch {
			case !wanted[m.MessageID]:
				t.Errorf("received %q, which is not expected here", m.MessageID)
			case got[m.MessageID] != nil:
				t.Errorf("received %q twice (delivery count %d)", m.MessageID, m.DeliveryCount)
			}
			got[m.MessageID] = m
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete %s through %s: %v", m.MessageID, n.ID, err)
			}
		}
	}
	var missing []string
	for _, id := range want {
		if got[id] == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d messages never received through %s, e.g. %v", len(missing), len(want), n.ID, missing[:min(10, len(missing))])
	}
	if left, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))}); err != nil || len(left) != 0 {
		t.Fatalf("after receiving everything, peek: %d messages, %v", len(left), err)
	}
	return got
}

// S-DUR-1: a node whose disk is lost (kill -9, data directory wiped, restarted with the
// same ID) gets its replicas rebuilt from its peers: every group ends with its full
// replica set and equal digests, and the rebuilt node, leading every partition, serves
// every message sent before.
func TestNodeReplacedWithEmptyDisk(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "rebuilt"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	victim := mostLeading(t, c, q)
	sender := others(c, victim)[0]
	sendIDs(t, sender, q, idRange("gone", 50))
	receiveAll(t, sender, q, idRange("gone", 50)) // state beyond enqueues: completed messages
	kept := idRange("kept", 300)
	sendIDs(t, sender, q, kept)
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, "", 3, nil) })

	victim.WipeAndRestart()
	t.Logf("%s wiped and restarted", victim.ID)
	c.WaitFor(t, 90*time.Second, func() error { return converged(t, c, "", 3, nil) })
	transferAll(t, c, q, victim.ID)
	receiveAll(t, victim, q, kept)
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, "", 3, nil) })
}

// expiresIn sends a probe message through s and returns how long after its enqueue it
// expires, as peeked through r (S-TTL-1).
func expiresIn(t *testing.T, s *azservicebus.Sender, r *azservicebus.Receiver, id string) (time.Duration, error) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil); err != nil {
		return 0, fmt.Errorf("send probe %s: %w", id, err)
	}
	var from int64
	for {
		ms, err := r.PeekMessages(ctx, 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(from)})
		if err != nil {
			return 0, err
		}
		if len(ms) == 0 {
			return 0, fmt.Errorf("probe %s not found by peek", id)
		}
		for _, m := range ms {
			if m.MessageID == id {
				if m.ExpiresAt == nil || m.EnqueuedTime == nil {
					return 0, fmt.Errorf("probe %s has no ExpiresAt or EnqueuedTime", id)
				}
				return m.ExpiresAt.Sub(*m.EnqueuedTime), nil
			}
			from = *m.SequenceNumber + 1
		}
	}
}

// senderPeeker opens a sender and a receiver (for peeking) on queue through node n.
func senderPeeker(t *testing.T, n *harness.Node, queue string) (*azservicebus.Sender, *azservicebus.Receiver) {
	t.Helper()
	cl := n.Client(t)
	s, err := cl.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, peeker(t, n, queue)
}

// updateTTL sets the queue's DefaultMessageTimeToLive (and MaxDeliveryCount) through
// node n's admin API.
func updateTTL(t *testing.T, n *harness.Node, queue, ttl string, maxDelivery int32) {
	t.Helper()
	ac := n.AdminClient(t)
	ctx := ctxT(t, 30*time.Second)
	got, err := ac.GetQueue(ctx, queue, nil)
	if err != nil || got == nil {
		t.Fatalf("get queue %s: %v %v", queue, got, err)
	}
	props := got.QueueProperties
	props.DefaultMessageTimeToLive = to.Ptr(ttl)
	props.MaxDeliveryCount = to.Ptr(maxDelivery)
	if _, err := ac.UpdateQueue(ctx, queue, props, nil); err != nil {
		t.Fatalf("update queue %s: %v", queue, err)
	}
}

// S-TTL-1, S-ENT-2: once UpdateQueue has returned, the next message sent through the SDK
// (here through another node) takes the queue's new DefaultMessageTimeToLive.
func TestUpdateAppliesToNextSend(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "update-next"
	createQueue(t, c.Nodes[0], q, nil)
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	leader := mostLeading(t, c, q)
	via := others(c, leader)
	s, r := senderPeeker(t, via[1], q) // links open before the update, as a running application's are
	if ttl, err := expiresIn(t, s, r, "first"); err != nil || ttl == time.Hour {
		t.Fatalf("before the update: expires %v after enqueue, %v; want the default (not 1h)", ttl, err)
	}
	updateTTL(t, via[0], q, "PT1H", 7)
	updated := time.Now()
	ttl, err := expiresIn(t, s, r, "next")
	if err != nil {
		t.Fatal(err)
	}
	if ttl != time.Hour {
		t.Errorf("a message sent through %s right after UpdateQueue(DefaultMessageTimeToLive=1h) through %s returned expires %v after its enqueue, want 1h",
			via[1].ID, via[0].ID, ttl)
		c.WaitFor(t, 30*time.Second, func() error {
			if ttl, err := expiresIn(t, s, r, fmt.Sprint("later-", time.Now().UnixNano())); err != nil || ttl != time.Hour {
				return fmt.Errorf("expires %v after enqueue, %v", ttl, err)
			}
			return nil
		})
		t.Logf("the update took effect for sends %v after UpdateQueue returned", time.Since(updated).Round(time.Millisecond))
	}
}

// A replica added after the queue was updated catches up to the same state: three nodes
// hold a queue that receives messages (some abandoned, dead-lettered, or locked across
// the update), a property update, and more messages; a fourth node joins, and `qbctl node
// remove` of one of the first three moves its replica there. The new replica ends with
// the digest of the others and, as leader, serves every message, those sent after the
// update with the new time to live.
func TestDivergenceAfterUpdate(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "diverge"
	n1 := c.Nodes[0]
	createQueue(t, n1, q, &admin.QueueProperties{LockDuration: to.Ptr("PT20S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	before, after := idRange("before", 100), idRange("after", 100)
	sendIDs(t, n1, q, before)
	// State beyond enqueues for the new replica to rebuild: abandoned (delivery counts),
	// dead-lettered, and locked across the update (which releases the locks, S-ENT-3).
	r1, err := n1.Client(t).NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := r1.ReceiveMessages(ctxT(t, 10*time.Second), 10, nil)
	if err != nil || len(held) < 5 {
		t.Fatalf("peek-lock receive: %d messages, %v", len(held), err)
	}
	var deadLettered []string
	for i, m := range held {
		switch {
		case i < 2:
			deadLettered = append(deadLettered, m.MessageID)
			err = r1.DeadLetterMessage(ctxT(t, 10*time.Second), m, nil)
		case i < 5:
			err = r1.AbandonMessage(ctxT(t, 10*time.Second), m, nil)
		}
		if err != nil {
			t.Fatalf("settle %s: %v", m.MessageID, err)
		}
	}
	before = slices.DeleteFunc(before, func(id string) bool { return slices.Contains(deadLettered, id) })

	// UpdateQueue returns once the partitions have the update (TestUpdateAppliesToNextSend),
	// so every message below is sent under it.
	updateTTL(t, n1, q, "PT1H", 7)
	sendIDs(t, n1, q, after)
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, q, 3, nil) })

	n4 := c.AddNode(t)
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	var st status
	if err := qbctlJSON(t, n1, &st, "cluster", "status"); err != nil {
		t.Fatal(err)
	}
	var gone *harness.Node
	var stay []string
	for _, n := range c.Nodes[:3] {
		if gone == nil && n.ID != st.MetadataLeader {
			gone = n
		} else {
			stay = append(stay, n.ID)
		}
	}
	stay = append(stay, n4.ID)
	t.Logf("removing %s (metadata leader %s); the queue's replicas should move to %v", gone.ID, st.MetadataLeader, stay)
	if out, err := n4.Qbctl(t, "node", "remove", gone.ID); err != nil {
		t.Fatalf("node remove %s: %v\n%s", gone.ID, err, out)
	}
	if err := gone.Stop(); err != nil {
		t.Errorf("%s after SIGTERM: %v", gone.ID, err)
	}
	c.WaitFor(t, 90*time.Second, func() error { return converged(t, c, q, 3, stay) })

	transferAll(t, c, q, n4.ID)
	msgs := receiveAll(t, n4, q, append(append([]string(nil), before...), after...))
	var stale []string
	for _, id := range after {
		m := msgs[id]
		if m.ExpiresAt == nil || m.EnqueuedTime == nil || m.ExpiresAt.Sub(*m.EnqueuedTime) != time.Hour {
			stale = append(stale, fmt.Sprintf("%s (enqueued %v, expires %v)", id, m.EnqueuedTime, m.ExpiresAt))
		}
	}
	if len(stale) > 0 {
		t.Errorf("S-TTL-1: %d of %d messages sent under DefaultMessageTimeToLive=1h do not expire 1h after their enqueue on the new replica, e.g. %v",
			len(stale), len(after), stale[:min(3, len(stale))])
	}
	c.WaitFor(t, 60*time.Second, func() error { return converged(t, c, q, 3, stay) })
}

// S-LOCK-2, S-DUR-1: completions in flight through node A when the partition's leader
// is killed. A complete the SDK reports as successful must have removed the message: it
// must not come back when its lock expires. (The broker answers a settlement it forwarded
// to the dying leader with a retryable condition; the SDK retries a settlement on the
// receive link by returning success without sending anything, since the broker's answer
// settled the delivery.)
func TestCompleteInFlightAtLeaderKill(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "complete-at-kill"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{LockDuration: to.Ptr("PT10S")})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	leader := mostLeading(t, c, q)
	a := others(c, leader)[0]
	const n = 300
	sendIDs(t, a, q, idRange("m", n))

	r, err := a.Client(t).NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held []*azservicebus.ReceivedMessage
	for len(held) < n {
		msgs, err := r.ReceiveMessages(ctxT(t, 10*time.Second), n-len(held), nil)
		if err != nil {
			t.Fatalf("receive: %v (after %d)", err, len(held))
		}
		held = append(held, msgs...)
	}
	lockedUntil := *held[len(held)-1].LockedUntil

	// Eight completers work through the held messages; the leader dies once a quarter of
	// them are done, with others in flight.
	var mu sync.Mutex
	results := map[string]error{}
	next := make(chan *azservicebus.ReceivedMessage, n)
	for _, m := range held {
		next <- m
	}
	close(next)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				err := r.CompleteMessage(ctx, m, nil)
				cancel()
				mu.Lock()
				results[m.MessageID] = err
				mu.Unlock()
			}
		}()
	}
	c.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(results) < n/4 {
			return fmt.Errorf("%d of %d completed", len(results), n)
		}
		return nil
	})
	leader.Kill()
	killed := time.Now()
	wg.Wait()
	failed := 0
	for _, err := range results {
		if err != nil {
			failed++
		}
	}
	t.Logf("killed %s at %s; %d completes failed: %s", leader.ID, killed.Format("15:04:05.000"), failed, summarize(results))

	// Past every lock's expiry, whatever was not completed comes back; nothing whose
	// complete succeeded may.
	rctx, cancel := context.WithTimeout(context.Background(), time.Until(lockedUntil)+10*time.Second)
	defer cancel()
	var back, redelivered []string
	for {
		msgs, err := r.ReceiveMessages(rctx, 50, nil)
		for _, m := range msgs {
			redelivered = append(redelivered, m.MessageID)
			if results[m.MessageID] == nil {
				back = append(back, fmt.Sprintf("%s (delivery count %d)", m.MessageID, m.DeliveryCount))
			}
			if err := r.CompleteMessage(ctxT(t, 10*time.Second), m, nil); err != nil {
				t.Errorf("complete %s on its redelivery: %v", m.MessageID, err)
			}
		}
		if err != nil || rctx.Err() != nil {
			break
		}
	}
	if len(back) > 0 {
		sort.Strings(back)
		t.Errorf("S-LOCK-2: %d messages whose CompleteMessage returned success came back after their lock expired, e.g. %v",
			len(back), back[:min(5, len(back))])
	}
	// S-LOCK-12: a complete reported lock-lost did not apply, so its message comes back;
	// one that applied but was reported lost (the retry found the lock gone) never would,
	// and an application waiting for the redelivery would wait forever.
	var lostForGood []string
	for id, err := range results {
		if errCode(err) == string(azservicebus.CodeLockLost) && !slices.Contains(redelivered, id) {
			lostForGood = append(lostForGood, id)
		}
	}
	if len(lostForGood) > 0 {
		sort.Strings(lostForGood)
		t.Errorf("S-LOCK-12: %d completes reported lock-lost whose messages never came back (the complete had applied), e.g. %v",
			len(lostForGood), lostForGood[:min(5, len(lostForGood))])
	}
}

// S-DUP-1 on a partitioned queue, across a leader failover: with duplicate detection on
// and no SessionId or PartitionKey, a MessageId always goes to one partition (as in
// Service Bus), whose replicated history drops a copy sent through any node, also after
// the node leading most partitions was killed (the copies went round-robin, and
// one MessageId sent through three nodes was stored three times).
func TestDuplicateDetectionPartitionedAcrossFailover(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "dedupe-partitioned"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true), RequiresDuplicateDetection: to.Ptr(true)})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	ids := idRange("d", 40)
	for _, n := range c.Nodes {
		sendEach(t, n, q, ids)
	}
	victim := mostLeading(t, c, q)
	alive := others(c, victim)
	victim.Kill()
	t.Logf("killed %s", victim.ID)
	for _, n := range alive {
		sendEach(t, n, q, ids)
	}
	receiveAll(t, alive[0], q, ids) // each MessageId once: a second copy fails the test
}

// sendEach sends one message per ID through n, one send each, retrying a send that
// fails (a failover in progress) until it is acknowledged.
func sendEach(t *testing.T, n *harness.Node, queue string, ids []string) {
	t.Helper()
	ctx := ctxT(t, 120*time.Second)
	s, err := n.Client(t).NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, id := range ids {
		for {
			err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("send %s through %s: %v", id, n.ID, err)
			}
			t.Logf("send %s through %s: %v (retrying)", id, n.ID, err)
			time.Sleep(200 * time.Millisecond) // the SDK already retried with backoff; do not spin
		}
	}
}

// summarize counts errors by kind.
func summarize(results map[string]error) string {
	kinds := map[string]int{}
	for _, err := range results {
		if err != nil {
			kinds[errCode(err)]++
		}
	}
	return fmt.Sprint(kinds)
}
