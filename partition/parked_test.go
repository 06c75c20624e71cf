package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

type recvResult struct {
	msgs []*fsm.Message
	err  error
}

// parkedReceive starts a peek-lock receive of up to max on p that waits up to a minute,
// and waits until it is parked.
func parkedReceive(t *testing.T, p *Partition, max int32) <-chan recvResult {
	t.Helper()
	before := p.parkedCount()
	out := make(chan recvResult, 1)
	go func() {
		msgs, err := p.Receive(ctxT(t, 2*time.Minute), fsm.Receive{Max: max}, time.Minute)
		out <- recvResult{msgs, err}
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := p.parkedCount(); n != before+1 {
			return errParked(n)
		}
		return nil
	})
	return out
}

type errParked int

func (e errParked) Error() string { return fmt.Sprintf("%d receives parked", int(e)) }

func (p *Partition) parkedCount() int {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	return len(p.parked)
}

// A receive waiting on an empty queue is served by the send's own Raft entry: the
// message is locked in the round that stores it, one entry for both.
func TestParkedReceiveRidesTheSend(t *testing.T) {
	c := newCluster(t, 3, nil)
	const g = 51
	c.addGroup(testQueue(g, time.Minute))
	_, lp := c.leader(g, 20*time.Second)
	got := parkedReceive(t, lp, 10)
	entries := lp.ctr.entries.Load()
	if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: []byte("ride")}}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || len(r.msgs) != 1 || string(r.msgs[0].Payload) != "ride" || r.msgs[0].DeliveryCount != 1 ||
		r.msgs[0].LockToken == (fsm.LockToken{}) {
		t.Fatalf("receive: %+v, %v; want the message, locked, delivery count 1", r.msgs, r.err)
	}
	if n := lp.ctr.entries.Load() - entries; n != 1 {
		t.Fatalf("%d Raft entries for the send and the waiting receive, want 1", n)
	}
	c.checkConverged(g)
}

// Several receives parked on one queue: each message goes to one of them, and the others
// keep waiting for the next.
func TestParkedReceivesShareMessages(t *testing.T) {
	c := newCluster(t, 1, nil)
	const g = 52
	c.addGroup(testQueue(g, time.Minute))
	_, lp := c.leader(g, 20*time.Second)
	waiting := []<-chan recvResult{parkedReceive(t, lp, 1), parkedReceive(t, lp, 1), parkedReceive(t, lp, 1)}
	seen := map[string]bool{}
	for round, body := range []string{"a", "b", "c"} {
		if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: []byte(body)}}); err != nil {
			t.Fatal(err)
		}
		var done int
		testutil.WaitFor(t, 10*time.Second, func() error {
			for i, ch := range waiting {
				select {
				case r := <-ch:
					if r.err != nil || len(r.msgs) != 1 {
						t.Fatalf("round %d: %+v, %v", round, r.msgs, r.err)
					}
					seen[string(r.msgs[0].Payload)] = true
					done = i
					return nil
				default:
				}
			}
			return errParked(lp.parkedCount())
		})
		waiting = append(waiting[:done], waiting[done+1:]...)
		for _, ch := range waiting { // the others are parked again
			select {
			case r := <-ch:
				t.Fatalf("round %d: a second receiver got %+v, %v", round, r.msgs, r.err)
			default:
			}
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			if n := lp.parkedCount(); n != len(waiting) {
				return errParked(n)
			}
			return nil
		})
	}
	if len(seen) != 3 {
		t.Fatalf("received %v, want a, b and c once each", seen)
	}
}

// A parked receive whose wait ends returns nothing and leaves the queue as it was; the
// next send is then not charged a receive.
func TestParkedReceiveWaitEnds(t *testing.T) {
	c := newCluster(t, 1, nil)
	const g = 53
	c.addGroup(testQueue(g, time.Minute))
	_, lp := c.leader(g, 20*time.Second)
	msgs, err := lp.Receive(context.Background(), fsm.Receive{Max: 5}, 200*time.Millisecond)
	if err != nil || len(msgs) != 0 || lp.parkedCount() != 0 {
		t.Fatalf("receive on an empty queue: %d messages, %v, %d parked", len(msgs), err, lp.parkedCount())
	}
	if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	st, err := lp.Stats(ctxT(t, 10*time.Second))
	if err != nil || st.Targets[0].Active != 1 || st.Targets[0].Locked != 0 {
		t.Fatalf("stats %+v, %v: want one active message, unlocked", st.Targets, err)
	}
}

// A receive whose caller goes away while its lock is in a Raft entry not yet committed
// (a forwarding node cancelled it because its connection broke, or the AMQP link went)
// waits for that entry and releases what it locked before it returns: nobody will see
// those messages, and a session's holder must get them first on its next receive
// (S-SES-3). Before, they stayed locked until the lock expired.
func TestCancelledReceiveReleasesWhatItsEntryLocked(t *testing.T) {
	c := newCluster(t, 3, nil)
	const g = 54
	c.addGroup(testQueue(g, time.Minute))
	li, lp := c.leader(g, 20*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan recvResult, 1)
	go func() {
		msgs, err := lp.Receive(ctx, fsm.Receive{Max: 1}, time.Minute)
		out <- recvResult{msgs, err}
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := lp.parkedCount(); n != 1 {
			return errParked(n)
		}
		return nil
	})
	// The followers stop hearing the leader (for less than its lease): the send's entry,
	// which carries the parked receive, cannot commit yet.
	for i := range c.nodes {
		if i != li {
			c.isolate(g, i, true)
		}
	}
	sent := make(chan error, 1)
	go func() {
		_, err := lp.Enqueue(ctxT(t, 30*time.Second), []*fsm.Message{{Payload: []byte("x")}})
		sent <- err
	}()
	testutil.WaitFor(t, 10*time.Second, func() error { // the proposer took the receive
		if n := lp.parkedCount(); n != 0 {
			return errParked(n)
		}
		return nil
	})
	cancel()
	for i := range c.nodes {
		if i != li {
			c.isolate(g, i, false)
		}
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	r := <-out
	if r.err == nil || len(r.msgs) != 0 {
		t.Fatalf("cancelled receive: %d messages, %v; want none and its context's error", len(r.msgs), r.err)
	}
	if !lp.IsLeader() {
		t.Fatal("the leader lost its leadership during the test: the scenario did not happen")
	}
	msgs, err := lp.Receive(ctxT(t, 10*time.Second), fsm.Receive{Max: 1}, 0)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != "x" {
		t.Fatalf("next receive: %d messages, %v; want x, released by the cancelled receive", len(msgs), err)
	}
}
