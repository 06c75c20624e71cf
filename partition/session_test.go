package partition

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestSessionHolderSurvivesLeaderChange: the session-lock holder is replicated state
// (S-SES-2, S-LOCK-10). A session accepted by owner X on one leader is still X's after
// leadership moves: on the new leader X receives, settles, renews and sets the state,
// while owner Y gets ErrSessionLockLost for each of these and cannot accept the session.
func TestSessionHolderSurvivesLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	cfg := testQueue(1, 30*time.Second)
	cfg.Queue.RequiresSession = true
	c.addGroup(cfg)
	li, lp := c.leader(1, 20*time.Second)
	var ms []*fsm.Message
	for _, id := range []string{"a", "b"} {
		m := msg(id, nil)
		m.SessionID = "s"
		ms = append(ms, m)
	}
	if _, err := lp.Enqueue(ctxT(t, 5*time.Second), ms); err != nil {
		t.Fatal(err)
	}
	if id, _, err := lp.AcceptSession(ctxT(t, 5*time.Second), fsm.AcceptSession{SessionID: "s", Owner: "X"}, 0); err != nil || id != "s" {
		t.Fatalf("accept: %q %v", id, err)
	}
	got, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{SessionID: "s", Owner: "X", Max: 1}, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	tok := got[0].LockToken

	if err := lp.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	var np *Partition
	testutil.WaitFor(t, 20*time.Second, func() error {
		for i, p := range c.group(1) {
			if i != li && p.IsLeader() {
				np = p
				return nil
			}
		}
		return errors.New("no new leader yet")
	})

	// Y, on the new leader: every session-scoped command is refused.
	ctx := ctxT(t, 20*time.Second)
	if _, _, err := np.AcceptSession(ctx, fsm.AcceptSession{SessionID: "s", Owner: "Y"}, 0); !errors.Is(err, fsm.ErrSessionCannotBeLocked) {
		t.Errorf("Y accepts X's session: %v", err)
	}
	if _, err := np.Receive(ctx, fsm.Receive{SessionID: "s", Owner: "Y", Max: 1}, 0); !errors.Is(err, fsm.ErrSessionLockLost) {
		t.Errorf("Y receives: %v", err)
	}
	for _, sid := range []string{"s", ""} {
		if _, err := np.Settle(ctx, fsm.Settle{Tokens: []fsm.LockToken{tok}, Disposition: fsm.Complete, SessionID: sid, Owner: "Y"}); !errors.Is(err, fsm.ErrSessionLockLost) {
			t.Errorf("Y settles X's message (session %q): %v", sid, err)
		}
	}
	if _, err := np.RenewSession(ctx, fsm.Target{}, "s", "Y"); !errors.Is(err, fsm.ErrSessionLockLost) {
		t.Errorf("Y renews: %v", err)
	}
	if err := np.SetSessionState(ctx, fsm.SetSessionState{SessionID: "s", Owner: "Y", State: []byte("y")}); !errors.Is(err, fsm.ErrSessionLockLost) {
		t.Errorf("Y sets the state: %v", err)
	}
	if err := np.ReleaseSession(ctx, fsm.Target{}, "s", "Y"); !errors.Is(err, fsm.ErrSessionLockLost) {
		t.Errorf("Y releases: %v", err)
	}

	// X, on the new leader: still the holder.
	if _, err := np.RenewSession(ctx, fsm.Target{}, "s", "X"); err != nil {
		t.Fatalf("X renews: %v", err)
	}
	if err := np.SetSessionState(ctx, fsm.SetSessionState{SessionID: "s", Owner: "X", State: []byte("x")}); err != nil {
		t.Fatalf("X sets the state: %v", err)
	}
	if _, err := np.Settle(ctx, fsm.Settle{Tokens: []fsm.LockToken{tok}, Disposition: fsm.Complete, SessionID: "s", Owner: "X"}); err != nil {
		t.Fatalf("X settles: %v", err)
	}
	got, err = np.Receive(ctx, fsm.Receive{SessionID: "s", Owner: "X", Max: 1}, 0)
	if err != nil || len(got) != 1 || got[0].MessageID != "b" {
		t.Fatalf("X receives: %v %v", got, err)
	}
	if err := np.ReleaseSession(ctx, fsm.Target{}, "s", "X"); err != nil {
		t.Fatalf("X releases: %v", err)
	}
	if _, _, err := np.AcceptSession(ctx, fsm.AcceptSession{SessionID: "s", Owner: "Y"}, 0); err != nil {
		t.Fatalf("Y accepts after X released: %v", err)
	}
	c.checkConverged(1)
}
