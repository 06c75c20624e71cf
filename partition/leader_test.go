package partition

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestFollowerAnswersNotLeaderWithHint: a follower refuses writes and reads with a
// NotLeaderError naming the leader, so the cluster layer can route (S-DUR-2).
func TestFollowerAnswersNotLeaderWithHint(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 5*time.Second))
	li, _ := c.leader(1, 20*time.Second)
	for i, p := range c.group(1) {
		if i == li {
			continue
		}
		_, err := p.Enqueue(ctxT(t, 5*time.Second), nil)
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower %d Enqueue: %v", i, err)
		}
		testutil.WaitFor(t, 5*time.Second, func() error {
			if id, _ := p.Leader(); id != string(c.nodes[li].id) {
				return fmt.Errorf("follower knows leader %q, want %q", id, c.nodes[li].id)
			}
			return nil
		})
		_, err = p.Enqueue(ctxT(t, 5*time.Second), nil)
		if !errors.As(err, &nl) || nl.LeaderID != string(c.nodes[li].id) || nl.LeaderAddr != c.nodes[li].addr {
			t.Fatalf("hint = %+v, want %s at %s", nl, c.nodes[li].id, c.nodes[li].addr)
		}
		if _, err := p.Peek(ctxT(t, time.Second), fsmTarget(), 0, 1); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower Peek: %v", err)
		}
	}
}

// TestCloseAnswersPendingAndRefusesNew: after Close every call fails with ErrClosed
// and nothing blocks.
func TestCloseAnswersPendingAndRefusesNew(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.addGroup(testQueue(1, 5*time.Second))
	_, p := c.leader(1, 20*time.Second)
	c.stop(1, 0)
	if _, err := p.Enqueue(ctxT(t, time.Second), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestLeaderCutOffTimesOut: a leader that lost its quorum cannot commit: a write fails
// with ErrTimeout when the caller's deadline passes first, or ErrNotLeader once the
// leader steps down; either way the outcome is reported as unknown or not-leader, and
// after healing the replicas agree again.
func TestLeaderCutOffTimesOut(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 5*time.Second))
	li, lp := c.leader(1, 20*time.Second)
	c.isolate(1, li, true)
	_, err := lp.Enqueue(ctxT(t, 200*time.Millisecond), []*fsm.Message{{Payload: []byte("x")}})
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("enqueue on a cut-off leader: %v, want ErrTimeout or ErrNotLeader", err)
	}
	if errors.Is(err, ErrTimeout) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("timeout after submission does not say the outcome is unknown: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if lp.IsLeader() {
			return errors.New("the cut-off leader still leads")
		}
		return nil
	})
	c.isolate(1, li, false)
	c.checkConverged(1)
}
