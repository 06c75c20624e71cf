package partition

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// A receive whose answer is lost (its leader died after committing it) is found again by
// the salt its caller chose: LockedWithSalt returns exactly the locks it took, so the
// caller can release them instead of leaving them locked until they expire.
func TestLockedWithSaltFindsALostReceive(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(11, time.Minute))
	_, lp := c.leader(11, 20*time.Second)
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg(id, nil)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := lp.Receive(ctxT(t, 10*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 2, Salt: 777}, 0)
	if err != nil || len(first) != 2 {
		t.Fatalf("receive: %d messages, %v", len(first), err)
	}
	if _, err := lp.Receive(ctxT(t, 10*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 2, Salt: 778}, 0); err != nil {
		t.Fatal(err)
	}
	// The leader changes: the new one finds the same locks.
	if err := lp.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	var got []fsm.LockToken
	testutil.WaitFor(t, 20*time.Second, func() error {
		for _, p := range c.group(11) {
			if p != nil && p.IsLeader() && p != lp {
				got, err = p.LockedWithSalt(ctxT(t, 5*time.Second), fsm.Target{}, 777)
				return err
			}
		}
		return errors.New("no new leader yet")
	})
	want := []fsm.LockToken{first[0].LockToken, first[1].LockToken}
	slices.SortFunc(want, func(a, b fsm.LockToken) int { return slices.Compare(a[:], b[:]) })
	if !slices.Equal(got, want) {
		t.Fatalf("LockedWithSalt(777) = %x, want the first receive's tokens %x", got, want)
	}
}
