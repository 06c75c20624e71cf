package partition

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// fakeClock is a manual Clock: time moves only by Advance/Set, which fire due timers in
// deadline order.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.Advance(0) // fire at once if already due
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves time forward by d and runs every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.set(c.now)
}

// Set moves time to t (possibly backwards: another leader's skewed clock).
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.set(t)
}

// set is called with mu held and releases it.
func (c *fakeClock) set(t time.Time) {
	c.now = t
	var due, keep []*fakeTimer
	for _, tm := range c.timers {
		switch {
		case tm.stopped:
		case !tm.at.After(t):
			tm.stopped = true
			due = append(due, tm)
		default:
			keep = append(keep, tm)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, tm := range due {
		tm.f()
	}
}

// TestLeaderTimerFollowsConfigClock: entry times come from Config.Clock, the leader's
// timer proposes the tick when that clock passes the fsm's next deadline (TTL expiry,
// S-TTL-1, S-TTL-4; lock expiry, S-LOCK-4/5), and a clock that jumps back does not move
// entry times back.
func TestLeaderTimerFollowsConfigClock(t *testing.T) {
	clk := &fakeClock{now: time.Now().Truncate(time.Millisecond)}
	c := newCluster(t, 1, func(cfg *Config) { cfg.Clock = clk })
	c.addGroup(testQueue(1, 30*time.Second))
	_, p := c.leader(1, 20*time.Second)
	start := clk.Now().UnixMilli()

	x := msg("X", nil)
	x.TimeToLive = 60_000
	if _, err := p.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{x}); err != nil {
		t.Fatal(err)
	}
	y := msg("Y", nil)
	if _, err := p.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{y}); err != nil {
		t.Fatal(err)
	}
	peek, err := p.Peek(ctxT(t, time.Second), fsm.Target{}, 0, 10)
	if err != nil || len(peek) != 2 {
		t.Fatalf("peek: %v %v", peek, err)
	}
	if peek[0].EnqueuedTime != start || peek[0].ExpiresAt != start+60_000 {
		t.Fatalf("X enqueued %d expires %d; want the fake clock's %d and +60s", peek[0].EnqueuedTime, peek[0].ExpiresAt, start)
	}
	active := func() int64 {
		st, err := p.Stats(ctxT(t, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return st.Targets[0].Active
	}

	// Lock both, then release X so that it is available and can expire.
	got, err := p.Receive(ctxT(t, 5*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 2}, 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("lock both: %v %v", got, err)
	}
	var yTok fsm.LockToken
	for _, m := range got {
		if m.MessageID == "Y" {
			yTok = m.LockToken
			if m.LockedUntil != start+30_000 {
				t.Fatalf("Y LockedUntil %d, want %d", m.LockedUntil, start+30_000)
			}
		}
	}
	for _, m := range got {
		if m.MessageID == "X" {
			if _, err := p.Release(ctxT(t, 5*time.Second), fsm.Target{}, []fsm.LockToken{m.LockToken}, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	}

	// advance moves the clock once the leader's timer is armed for the fsm's current
	// next deadline, so the timer is not computed from a time read before the jump.
	advance := func(d time.Duration) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if armed, next := p.armed.Load(), p.m.next.Load(); armed != next {
				return fmt.Errorf("leader timer armed for %d, next due %d", armed, next)
			}
			return nil
		})
		clk.Advance(d)
	}
	// 29s: nothing is due; the lock still holds.
	advance(29 * time.Second)
	time.Sleep(100 * time.Millisecond) // give a wrong early tick the chance to happen
	if _, err := p.RenewLock(ctxT(t, 5*time.Second), fsm.Target{}, []fsm.LockToken{yTok}); err != nil {
		t.Fatalf("renew before expiry: %v", err)
	}
	// Renewed at start+29s: now locked until start+59s. Advance to start+61s: the lock
	// and X's TTL are both due; one timer-driven tick applies them.
	advance(32 * time.Second)
	testutil.WaitFor(t, 10*time.Second, func() error {
		ms, err := p.Peek(ctxT(t, time.Second), fsm.Target{}, 0, 10)
		if err != nil {
			return err
		}
		if len(ms) != 1 || ms[0].MessageID != "Y" || ms[0].LockedUntil != 0 {
			var got []string
			for _, m := range ms {
				got = append(got, fmt.Sprintf("%s locked until %d", m.MessageID, m.LockedUntil))
			}
			return fmt.Errorf("want only Y, unlocked; peek has %v", got)
		}
		return nil
	})
	if n := active(); n != 1 {
		t.Fatalf("active = %d, want 1 (Y)", n)
	}

	// The clock jumps back an hour: entry times do not.
	before := clk.Now().UnixMilli()
	clk.Set(clk.Now().Add(-time.Hour))
	ms, err := p.Receive(ctxT(t, 5*time.Second), fsm.Receive{Mode: fsm.PeekLock, Max: 1}, 0)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive after clock jump: %v %v", ms, err)
	}
	if ms[0].DeliveryCount != 2 {
		t.Fatalf("Y DeliveryCount = %d, want 2 after lock expiry (S-LOCK-5)", ms[0].DeliveryCount)
	}
	if ms[0].LockedUntil < before+30_000 {
		t.Fatalf("lock taken after the clock jumped back ends at %d, before %d: time went back", ms[0].LockedUntil, before+30_000)
	}
}
