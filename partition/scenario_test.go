package partition

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
	"github.com/quorumbus/quorumbus/test/testutil"
)

func msg(id string, payload []byte) *fsm.Message {
	return &fsm.Message{Properties: rule.Properties{MessageID: id}, Payload: payload}
}

// enqueueAll sends n single-message enqueues from `senders` goroutines to the leader of g
// and returns each acknowledged message's sequence number by index. A send refused by a
// follower is retried on the leader; so is one whose outcome is unknown (leadership lost
// after submission) when the queue detects duplicates (S-DUP-1), which makes the retry
// idempotent. Anything else fails the test.
func enqueueAll(t *testing.T, c *cluster, g uint32, n, senders int, mk func(i int) *fsm.Message) []int64 {
	t.Helper()
	c.mu.Lock()
	dedup := c.cfgs[g].RequiresDuplicateDetection
	c.mu.Unlock()
	seqs := make([]int64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				for {
					_, lp := c.leader(g, 20*time.Second)
					s, err := lp.Enqueue(ctxT(t, 30*time.Second), []*fsm.Message{mk(i)})
					if err == nil {
						seqs[i] = s[0]
						break
					}
					if !errors.Is(err, ErrNotLeader) || (errors.Is(err, ErrOutcomeUnknown) && !dedup) {
						errs <- fmt.Errorf("enqueue %d: %w", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return seqs
}

// remaining counts the messages of a target (active, locked, scheduled, deferred), read
// on the current leader.
func remaining(t *testing.T, c *cluster, g uint32, tgt fsm.Target) int64 {
	t.Helper()
	st := retry(t, c, g, func(p *Partition) (fsm.Stats, error) { return p.Stats(ctxT(t, 5*time.Second)) })
	for _, ts := range st.Targets {
		if ts.Target == tgt {
			return ts.Active + ts.Scheduled + ts.Deferred
		}
	}
	return 0
}

// complete settles tokens with Complete on the leader, across leader changes. After an
// attempt with an unknown outcome, a retry that finds every lock lost means that attempt
// committed (the batch is one command: all or nothing).
func complete(t *testing.T, c *cluster, g uint32, tgt fsm.Target, toks []fsm.LockToken) {
	t.Helper()
	unknown := false
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, p := c.leader(g, 20*time.Second)
		terrs, err := p.Settle(ctxT(t, 10*time.Second), fsm.Settle{Target: tgt, Tokens: toks, Disposition: fsm.Complete})
		if err == nil {
			return
		}
		if errors.Is(err, ErrNotLeader) && time.Now().Before(deadline) {
			unknown = unknown || errors.Is(err, ErrOutcomeUnknown)
			continue
		}
		if unknown && len(terrs) == len(toks) {
			all := true
			for _, e := range terrs {
				all = all && errors.Is(e, fsm.ErrLockLost)
			}
			if all {
				return
			}
		}
		t.Fatalf("complete %d tokens: %v", len(toks), err)
	}
}

// drain receives (peek-lock) and completes everything in a target on the leader of g
// and returns how often each message id was received. It survives leader changes: a
// receive whose outcome was unknown may have locked messages nobody saw; they come back
// when their lock expires, so drain waits until the target is empty.
func drain(t *testing.T, c *cluster, g uint32, tgt fsm.Target) map[string]int {
	t.Helper()
	got := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, p := c.leader(g, 20*time.Second)
		msgs, err := p.Receive(ctxT(t, 10*time.Second), fsm.Receive{Target: tgt, Mode: fsm.PeekLock, Max: 256}, 0)
		if errors.Is(err, ErrNotLeader) {
			continue
		}
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(msgs) == 0 {
			if remaining(t, c, g, tgt) == 0 {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("target still holds %d messages nobody can receive", remaining(t, c, g, tgt))
			}
			// Locked by a receive whose answer was lost: wait for the lock to expire.
			_, p = c.leader(g, 20*time.Second)
			msgs, err = p.Receive(ctxT(t, 10*time.Second), fsm.Receive{Target: tgt, Mode: fsm.PeekLock, Max: 256}, time.Second)
			if err != nil || len(msgs) == 0 {
				continue
			}
		}
		toks := make([]fsm.LockToken, len(msgs))
		for i, m := range msgs {
			got[m.MessageID]++
			toks[i] = m.LockToken
			if GroupOfToken(m.LockToken) != g {
				t.Fatalf("token %x does not name group %d", m.LockToken, g)
			}
		}
		complete(t, c, g, tgt, toks)
	}
}

// TestFailoverKeepsAcknowledgedEnqueues: 10k acknowledged sends survive an abrupt stop
// of the leader; the new leader delivers each exactly once (S-DUR-1, S-SEND-1, S-DUR-3).
func TestFailoverKeepsAcknowledgedEnqueues(t *testing.T) {
	c := newCluster(t, 3, nil)
	qc := testQueue(1, 5*time.Second)    // a receive lost in a leader change costs at most this
	qc.RequiresDuplicateDetection = true // retried sends stay exactly-once (S-DUP-1)
	qc.DuplicateWindowMs = time.Hour.Milliseconds()
	c.addGroup(qc)
	const n = 10000
	seqs := enqueueAll(t, c, 1, n, 64, func(i int) *fsm.Message {
		return msg("m"+strconv.Itoa(i), []byte("payload-"+strconv.Itoa(i)))
	})
	seen := map[int64]bool{}
	for i, s := range seqs {
		if s <= 0 || seen[s] {
			t.Fatalf("message %d: sequence number %d missing or reused", i, s)
		}
		seen[s] = true
	}
	li, old := c.leader(1, 20*time.Second)
	lastBefore := old.AppliedIndex()
	c.stop(1, li)

	ni, _ := c.leader(1, 20*time.Second)
	if ni == li {
		t.Fatal("stopped replica still leads")
	}
	got := drain(t, c, 1, fsm.Target{})
	if len(got) != n {
		t.Fatalf("received %d distinct messages, want %d", len(got), n)
	}
	for id, k := range got {
		if k != 1 {
			t.Fatalf("%s received %d times", id, k)
		}
	}
	// The old leader comes back and catches up.
	c.restart(1, li)
	c.checkConverged(1)
	if c.group(1)[li].AppliedIndex() <= lastBefore {
		t.Fatal("restarted replica did not apply the new leader's entries")
	}
}

// TestLockSurvivesFailover (S-LOCK-10): locks are replicated. A lock taken on the old
// leader is settled with its token on the new one; another lock is neither dropped nor
// extended: its message comes back only after LockedUntil, through the new leader's
// tick, with DeliveryCount incremented (S-LOCK-4, S-LOCK-5), and its old token is lost
// (S-LOCK-9).
func TestLockSurvivesFailover(t *testing.T) {
	const lock = 10 * time.Second
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, lock))
	li, lp := c.leader(1, 20*time.Second)
	for _, id := range []string{"A", "B"} {
		if _, err := lp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{msg(id, []byte(id))}); err != nil {
			t.Fatal(err)
		}
	}
	recv1 := func(p *Partition, wait time.Duration) []*fsm.Message {
		t.Helper()
		ms, err := p.Receive(ctxT(t, wait+10*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 1}, wait)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	a, b := recv1(lp, 0), recv1(lp, 0)
	if len(a) != 1 || len(b) != 1 || a[0].MessageID != "A" || b[0].MessageID != "B" {
		t.Fatalf("received %v then %v, want A then B", a, b)
	}
	if a[0].DeliveryCount != 1 || b[0].DeliveryCount != 1 {
		t.Fatalf("first delivery counts %d, %d; want 1 (S-LOCK-5)", a[0].DeliveryCount, b[0].DeliveryCount)
	}
	bUntil := b[0].LockedUntil

	c.stop(1, li)
	c.leader(1, 20*time.Second) // a new leader is elected
	if now := time.Now().UnixMilli(); now >= a[0].LockedUntil {
		t.Fatalf("failover took longer than the lock (%d ms past LockedUntil); test needs a longer lock", now-a[0].LockedUntil)
	}
	// Completing A with its old-leader token succeeds (retried only across a further
	// leader change), and A is gone.
	complete(t, c, 1, fsm.Target{}, []fsm.LockToken{a[0].LockToken})
	left := retry(t, c, 1, func(p *Partition) ([]*fsm.Message, error) {
		return p.Peek(ctxT(t, 5*time.Second), fsm.Target{}, 0, 10)
	})
	if len(left) != 1 || left[0].MessageID != "B" {
		t.Fatalf("after completing A the queue holds %v, want only B", left)
	}
	_, np := c.leader(1, 20*time.Second)
	// B is still locked: not receivable before its LockedUntil.
	if ms := recv1(np, 0); len(ms) != 0 && time.Now().UnixMilli() < bUntil {
		t.Fatalf("B delivered again before its lock expired: %+v", ms[0])
	}
	ms := recv1(np, lock+5*time.Second)
	at := time.Now().UnixMilli()
	if len(ms) != 1 || ms[0].MessageID != "B" {
		t.Fatalf("after lock expiry got %v, want B", ms)
	}
	if at < bUntil {
		t.Fatalf("B redelivered at %d, before LockedUntil %d", at, bUntil)
	}
	if ms[0].DeliveryCount != 2 {
		t.Fatalf("B DeliveryCount = %d, want 2 (S-LOCK-5)", ms[0].DeliveryCount)
	}
	// The expired token is lost (S-LOCK-9); the new one works.
	if _, err := np.Settle(ctxT(t, 5*time.Second), fsm.Settle{Tokens: []fsm.LockToken{b[0].LockToken}, Disposition: fsm.Complete}); !errors.Is(err, fsm.ErrLockLost) {
		t.Fatalf("settle with expired token: %v, want ErrLockLost", err)
	}
	complete(t, c, 1, fsm.Target{}, []fsm.LockToken{ms[0].LockToken})
	c.restart(1, li)
	c.checkConverged(1)
}

// TestTTLAndScheduleOnNewLeader: deadlines recorded under the old leader fire on the new
// one at the right time, never early: expiry (S-TTL-1, S-TTL-4) and scheduled
// activation (S-SCH-1).
func TestTTLAndScheduleOnNewLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 30*time.Second))
	li, lp := c.leader(1, 20*time.Second)
	x := msg("X", []byte("expires"))
	x.TimeToLive = 2500
	if _, err := lp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{x}); err != nil {
		t.Fatal(err)
	}
	y := msg("Y", []byte("scheduled"))
	y.ScheduledEnqueueTime = time.Now().Add(4 * time.Second).UnixMilli()
	if _, err := lp.Schedule(ctxT(t, 5*time.Second), []*fsm.Message{y}); err != nil {
		t.Fatal(err)
	}
	peek, err := lp.Peek(ctxT(t, time.Second), fsm.Target{}, 0, 10)
	if err != nil || len(peek) == 0 || peek[0].MessageID != "X" {
		t.Fatalf("peek before failover: %v %v", peek, err)
	}
	expiresAt := peek[0].ExpiresAt
	c.stop(1, li)
	c.leader(1, 20*time.Second)

	// X disappears by the new leader's tick, not before ExpiresAt. (Y may activate in the
	// meantime when the failover is slow, so look for X itself.)
	hasX := func() bool {
		ms := retry(t, c, 1, func(p *Partition) ([]*fsm.Message, error) {
			return p.Peek(ctxT(t, 5*time.Second), fsm.Target{}, 0, 10)
		})
		for _, m := range ms {
			if m.MessageID == "X" {
				return true
			}
		}
		return false
	}
	if time.Now().UnixMilli() < expiresAt && !hasX() && time.Now().UnixMilli() < expiresAt {
		t.Fatalf("X gone before ExpiresAt")
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if hasX() {
			return errors.New("X still in the queue")
		}
		return nil
	})
	if now := time.Now().UnixMilli(); now < expiresAt {
		t.Fatalf("X expired at %d, before ExpiresAt %d", now, expiresAt)
	}
	// Y becomes receivable at its scheduled time: a waiting receive wakes on activation.
	ms := retry(t, c, 1, func(p *Partition) ([]*fsm.Message, error) {
		return p.Receive(ctxT(t, 20*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 10}, 10*time.Second)
	})
	at := time.Now().UnixMilli()
	if len(ms) != 1 || ms[0].MessageID != "Y" {
		t.Fatalf("receive after schedule: %v, want only Y", ms)
	}
	if at < y.ScheduledEnqueueTime {
		t.Fatalf("Y delivered at %d, before its scheduled time %d", at, y.ScheduledEnqueueTime)
	}
	c.restart(1, li)
	c.checkConverged(1)
}

// TestRestartAllFromDisk: every replica stops at once without a clean handover and comes
// back on new ports; nothing acknowledged is lost: messages, locks (settled afterwards
// with their tokens), a session lock and session state (S-DUR-1, S-LOCK-10, S-SES-5).
// Snapshots are frequent, so recovery goes through snapshot restore plus log replay.
func TestRestartAllFromDisk(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = 200 * time.Millisecond
	})
	c.addGroup(testQueue(1, 60*time.Second))
	sc := testQueue(2, 60*time.Second)
	sc.Queue.RequiresSession = true
	c.addGroup(sc)

	const n = 600
	enqueueAll(t, c, 1, n, 16, func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), []byte{byte(i)}) })
	_, lp := c.leader(1, 20*time.Second)
	locked, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 10}, 0)
	if err != nil || len(locked) != 10 {
		t.Fatalf("lock 10: %d %v", len(locked), err)
	}
	// A snapshot, then more log after it.
	if err := lp.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	toks := func(ms []*fsm.Message) []fsm.LockToken {
		var out []fsm.LockToken
		for _, m := range ms {
			out = append(out, m.LockToken)
		}
		return out
	}
	if _, err := lp.Settle(ctxT(t, 5*time.Second), fsm.Settle{Tokens: toks(locked[:5]), Disposition: fsm.Complete}); err != nil {
		t.Fatal(err)
	}

	_, sp := c.leader(2, 20*time.Second)
	s1 := msg("s1-0", []byte("s"))
	s1.SessionID = "s1"
	if _, err := sp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{s1}); err != nil {
		t.Fatal(err)
	}
	if id, _, err := sp.AcceptSession(ctxT(t, 5*time.Second), fsm.AcceptSession{SessionID: "s1", Owner: "link-a"}, 0); err != nil || id != "s1" {
		t.Fatalf("accept s1: %q %v", id, err)
	}
	if err := sp.SetSessionState(ctxT(t, 5*time.Second), fsm.SetSessionState{SessionID: "s1", Owner: "link-a", State: []byte("state-1")}); err != nil {
		t.Fatal(err)
	}

	// Everything stops at once (Close does not transfer leadership or snapshot).
	var wg sync.WaitGroup
	for g := uint32(1); g <= 2; g++ {
		for i := range c.nodes {
			wg.Add(1)
			go func() { defer wg.Done(); c.stop(g, i) }()
		}
	}
	wg.Wait()
	for i := range c.nodes {
		c.restartNode(i)
	}
	for g := uint32(1); g <= 2; g++ {
		for i := range c.nodes {
			c.restart(g, i)
		}
	}

	// The five remaining locks are still held and settle with their tokens.
	terrs := retry(t, c, 1, func(p *Partition) ([]error, error) {
		return p.Settle(ctxT(t, 5*time.Second), fsm.Settle{Tokens: toks(locked[5:]), Disposition: fsm.Complete})
	})
	for i, e := range terrs {
		if e != nil {
			t.Fatalf("settle lock %d after restart: %v", i, e)
		}
	}
	got := drain(t, c, 1, fsm.Target{})
	if len(got) != n-10 {
		t.Fatalf("after restart received %d, want %d", len(got), n-10)
	}
	for i := range n {
		id := "m" + strconv.Itoa(i)
		wasLocked := false
		for _, m := range locked {
			wasLocked = wasLocked || m.MessageID == id
		}
		if !wasLocked && got[id] != 1 {
			t.Fatalf("%s received %d times", id, got[id])
		}
		if wasLocked && got[id] != 0 {
			t.Fatalf("completed %s delivered again", id)
		}
	}
	// Session: state and lock survived.
	st := retry(t, c, 2, func(p *Partition) ([]byte, error) {
		return p.SessionState(ctxT(t, 5*time.Second), fsm.Target{}, "s1")
	})
	if !bytes.Equal(st, []byte("state-1")) {
		t.Fatalf("session state after restart = %q", st)
	}
	_, sp = c.leader(2, 20*time.Second)
	if _, _, err := sp.AcceptSession(ctxT(t, 5*time.Second), fsm.AcceptSession{SessionID: "s1", Owner: "link-b"}, 0); !errors.Is(err, fsm.ErrSessionCannotBeLocked) {
		t.Fatalf("accept of a held session after restart: %v, want ErrSessionCannotBeLocked (S-SES-2)", err)
	}
	c.checkConverged(1)
	c.checkConverged(2)
}

// TestIsolatedFollowerCatchesUp: a follower cut off while the leader writes and
// truncates its log far past the follower's last index is healed and catches up through
// an InstallSnapshot, then through the log.
func TestIsolatedFollowerCatchesUp(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 100 * time.Millisecond
	})
	c.addGroup(testQueue(1, 30*time.Second))
	li, lp := c.leader(1, 20*time.Second)
	fi := (li + 1) % 3
	f := c.group(1)[fi]
	c.isolate(1, fi, true)
	followerLast := f.raft.LastIndex()

	// One sender: every enqueue is its own entry, so the log grows fast.
	for i := range 200 {
		if _, err := lp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg("m"+strconv.Itoa(i), nil)}); err != nil {
			t.Fatalf("enqueue %d with one follower cut: %v", i, err)
		}
	}
	if err := lp.raft.Snapshot().Error(); err != nil && !strings.Contains(err.Error(), "nothing new") {
		t.Fatalf("snapshot: %v", err)
	}
	first, err := lp.store.FirstIndex()
	if err != nil || first <= followerLast+1 {
		t.Fatalf("leader log starts at %d (%v); need > %d to force a snapshot install", first, err, followerLast+1)
	}
	c.isolate(1, fi, false)
	testutil.WaitFor(t, 20*time.Second, func() error {
		idx, _ := strconv.ParseUint(f.raft.Stats()["last_snapshot_index"], 10, 64)
		if idx <= followerLast {
			return fmt.Errorf("follower's last snapshot index %d, want > %d", idx, followerLast)
		}
		return nil
	})
	// More writes after the heal go through the log.
	if _, err := lp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{msg("after", nil)}); err != nil {
		t.Fatal(err)
	}
	c.checkConverged(1)
	if got := drain(t, c, 1, fsm.Target{}); len(got) != 201 {
		t.Fatalf("received %d, want 201", len(got))
	}
	c.checkConverged(1)
}

// TestGroupCommitCoalesces: concurrent proposals share raft entries, and each caller
// gets its own result.
func TestGroupCommitCoalesces(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.MaxInflight = 1
		cfg.Linger = 20 * time.Millisecond
	})
	c.addGroup(testQueue(1, 30*time.Second))
	_, lp := c.leader(1, 20*time.Second)
	before := lp.raft.LastIndex()
	const n = 400
	seqs := enqueueAll(t, c, 1, n, n, func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), nil) })
	entries := lp.raft.LastIndex() - before
	if entries >= n/4 {
		t.Fatalf("%d proposals took %d raft entries; want them coalesced", n, entries)
	}
	t.Logf("%d concurrent enqueues in %d raft entries", n, entries)
	seen := map[int64]bool{}
	for _, s := range seqs {
		if seen[s] {
			t.Fatalf("sequence number %d returned to two callers", s)
		}
		seen[s] = true
	}
	c.checkConverged(1)
}

// TestReceiveWaitsForEnqueue: a long-poll receive on the leader wakes on an enqueue; a
// next-available session accept wakes when a session gets a message (S-SES-2); an
// unanswered wait ends empty without error.
func TestReceiveWaitsForEnqueue(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 30*time.Second))
	sc := testQueue(2, 30*time.Second)
	sc.Queue.RequiresSession = true
	c.addGroup(sc)
	_, lp := c.leader(1, 20*time.Second)
	_, sp := c.leader(2, 20*time.Second)

	if ms, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 1}, 200*time.Millisecond); err != nil || len(ms) != 0 {
		t.Fatalf("empty long-poll: %v %v", ms, err)
	}
	type recv struct {
		ms  []*fsm.Message
		err error
	}
	got := make(chan recv, 1)
	go func() {
		ms, err := lp.Receive(ctxT(t, 30*time.Second), fsm.Receive{Mode: fsm.ReceiveAndDelete, Max: 5}, 20*time.Second)
		got <- recv{ms, err}
	}()
	type acc struct {
		id  string
		err error
	}
	accepted := make(chan acc, 1)
	go func() {
		id, _, err := sp.AcceptSession(ctxT(t, 30*time.Second), fsm.AcceptSession{Owner: "link"}, 20*time.Second)
		accepted <- acc{id, err}
	}()
	// Both have found nothing and wait for a change: the enqueues below must wake them.
	testutil.WaitFor(t, 10*time.Second, func() error {
		n := 0
		for _, g := range testutil.Blocked("github.com/quorumbus/quorumbus/partition.(*Partition).waitLoop") {
			if strings.Contains(g, "TestReceiveWaitsForEnqueue") {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d of 2 waiters (receive, accept-session) blocked in waitLoop", n)
		}
		return nil
	})
	if _, err := lp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{msg("late", nil)}); err != nil {
		t.Fatal(err)
	}
	s := msg("s-msg", nil)
	s.SessionID = "s7"
	if _, err := sp.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{s}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil || len(r.ms) != 1 || r.ms[0].MessageID != "late" {
			t.Fatalf("woken receive: %v %v", r.ms, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("receive did not wake on enqueue")
	}
	select {
	case a := <-accepted:
		if a.err != nil || a.id != "s7" {
			t.Fatalf("next-available accept: %q %v", a.id, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("accept did not wake on a session message")
	}
	c.checkConverged(1)
	c.checkConverged(2)
}

// TestPurgeAndUpdateEntity: operator purge removes every message of a target; an entity
// update releases every lock (S-ENT-3: the holder's old token is lost).
func TestPurgeAndUpdateEntity(t *testing.T) {
	c := newCluster(t, 3, nil)
	cfg := testQueue(1, 30*time.Second)
	c.addGroup(cfg)
	_, lp := c.leader(1, 20*time.Second)
	enqueueAll(t, c, 1, 20, 4, func(i int) *fsm.Message { return msg("m"+strconv.Itoa(i), nil) })
	ms, err := lp.Receive(ctxT(t, 5*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 1}, 0)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	cfg.Queue.MaxDeliveryCount = 5
	if err := lp.UpdateEntity(ctxT(t, 5*time.Second), cfg); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.GroupID = 99
	if err := lp.UpdateEntity(ctxT(t, 5*time.Second), bad); err == nil {
		t.Fatal("UpdateEntity accepted a different GroupID")
	}
	if _, err := lp.Settle(ctxT(t, 5*time.Second), fsm.Settle{Tokens: []fsm.LockToken{ms[0].LockToken}, Disposition: fsm.Complete}); !errors.Is(err, fsm.ErrLockLost) {
		t.Fatalf("settle after entity update: %v, want ErrLockLost (S-ENT-3)", err)
	}
	n, err := lp.Purge(ctxT(t, 5*time.Second), fsm.Target{})
	if err != nil || n != 20 {
		t.Fatalf("purge: %d %v, want 20", n, err)
	}
	if got := drain(t, c, 1, fsm.Target{}); len(got) != 0 {
		t.Fatalf("received %d after purge", len(got))
	}
	c.checkConverged(1)
}
