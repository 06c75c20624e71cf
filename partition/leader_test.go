package partition

import (
	"errors"
	"testing"
	"time"
)

// TestFollowerAnswersNotLeaderWithHint: a follower refuses writes and reads with a
// NotLeaderError naming the leader, so the cluster layer can route (S-DUR-2).
func TestFollowerAnswersNotLeaderWithHint(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 5*time.Second))
	li, _ := c.leader(1, 10*time.Second)
	for i, p := range c.group(1) {
		if i == li {
			continue
		}
		_, err := p.Enqueue(ctxT(t, 5*time.Second), nil)
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower %d Enqueue: %v", i, err)
		}
		waitFor(t, 5*time.Second, "follower to learn the leader", func() bool {
			id, _ := p.Leader()
			return id == string(c.nodes[li].id)
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
	_, p := c.leader(1, 10*time.Second)
	c.stop(1, 0)
	if _, err := p.Enqueue(ctxT(t, time.Second), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
