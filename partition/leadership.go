package partition

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// Leadership and the leader's deadline timer, without a goroutine per group.
//
// raft tells a replica of its state changes through an observer on one channel shared by
// every replica of the node (LeadershipHub, Config.Leadership), read by one goroutine; the replica's own
// duties then run on the goroutine that has cause for them: the hub's on a leadership
// change, raft's FSM goroutine when an apply moves the next deadline, a short-lived
// goroutine when the timer fires (it proposes fsm.Tick and waits for the answer) or
// when a new leader waits for its Barrier. So an idle group has no goroutine of the
// partition's; hashicorp/raft's own stay.
//
// On gaining leadership (or a new term as leader) the replica waits for a Barrier, so
// its fsm holds every committed entry, before it serves reads (ready) and arms a timer
// at the fsm's next deadline; when that passes it proposes fsm.Tick and re-arms after
// the answer, and after every apply that moves the deadline. Receive waiters are woken
// on every leadership change.

// leaderState is the leader-only state (owner: mu). Lock order: mu before the clock's
// own locks (AfterFunc); nothing that waits for raft or the fsm runs under mu.
type leaderState struct {
	mu        sync.Mutex
	leader    bool
	term      uint64 // the term leader holds
	gen       uint64 // leadership generation, to discard stale barriers
	timerSeq  uint64 // the armed timer's number, to discard stale firings
	stopTimer func() bool
	ticking   bool // a Tick is in flight
	lastTick  time.Time
}

// leadershipChanged reads raft's state and acts on a change of leadership: it runs for
// every state change raft reports (LeadershipHub) and once after Open, so the state it reads
// last is raft's latest. A new term as leader counts as a change, even if no
// observation in between said this replica was not leader.
func (p *Partition) leadershipChanged() {
	l := p.raft.State() == raft.Leader
	term := p.raft.CurrentTerm()
	ls := &p.ls
	ls.mu.Lock()
	if l == ls.leader && (!l || term == ls.term) {
		ls.mu.Unlock()
		return
	}
	ls.gen++
	ls.leader, ls.term = l, term
	g := ls.gen
	p.ready.Store(false)
	p.disarmLocked()
	ls.mu.Unlock()
	p.avail.broadcast() // waiters re-propose: on a follower they fail with ErrNotLeader
	p.notifyLeadership()
	if l {
		p.goTracked(func() { p.awaitBarrier(g) })
	}
}

// notifyLeadership calls Config.LeadershipChanged, if set.
func (p *Partition) notifyLeadership() {
	if f := p.cfg.LeadershipChanged; f != nil {
		f()
	}
}

// awaitBarrier makes the replica ready once a Barrier of leadership generation g has
// applied, if it still leads in that generation.
func (p *Partition) awaitBarrier(g uint64) {
	if err := p.raft.Barrier(0).Error(); err != nil {
		return // leadership lost or shutdown: a change follows
	}
	ls := &p.ls
	ls.mu.Lock()
	if g != ls.gen || !ls.leader {
		ls.mu.Unlock()
		return
	}
	p.ready.Store(true)
	p.armLocked()
	ls.mu.Unlock()
	p.avail.broadcast()
	p.notifyLeadership()
}

// deadlineMoved re-arms the timer after an apply moved the fsm's next deadline (raft's
// FSM goroutine), unless a Tick is in flight (its answer re-arms).
func (p *Partition) deadlineMoved() {
	ls := &p.ls
	ls.mu.Lock()
	if !ls.ticking {
		p.armLocked()
	}
	ls.mu.Unlock()
}

func (p *Partition) disarmLocked() {
	ls := &p.ls
	ls.timerSeq++
	if ls.stopTimer != nil {
		ls.stopTimer()
		ls.stopTimer = nil
	}
	p.armed.Store(-1)
}

// armLocked arms the timer at the fsm's next deadline, if this replica is a ready
// leader with no Tick in flight.
func (p *Partition) armLocked() {
	p.disarmLocked()
	ls := &p.ls
	if !ls.leader || !p.ready.Load() || ls.ticking {
		return
	}
	nd := p.m.next.Load()
	// armed is stored only once the timer exists; an apply that races with this sees
	// a stale value and calls deadlineMoved, which re-arms (harmless).
	defer p.armed.Store(nd)
	if nd == fsm.NeverMs {
		return
	}
	now := p.clock.Now()
	// Cap the wait (a far deadline would overflow a Duration); the timer re-arms.
	d := time.Duration(min(nd-now.UnixMilli(), maxTimerMs)) * time.Millisecond
	if floor := ls.lastTick.Add(p.cfg.TickMinInterval).Sub(now); floor > d {
		d = floor
	}
	seq := ls.timerSeq
	// The callback only starts a goroutine: a test clock may run it inside AfterFunc,
	// under mu.
	ls.stopTimer = p.clock.AfterFunc(max(d, 0), func() { p.goTracked(func() { p.timerFired(seq) }) })
}

// timerFired proposes fsm.Tick if the deadline the timer seq was armed for has passed,
// waits for the answer and re-arms.
func (p *Partition) timerFired(seq uint64) {
	ls := &p.ls
	ls.mu.Lock()
	if seq != ls.timerSeq {
		ls.mu.Unlock()
		return // disarmed or re-armed since
	}
	ls.stopTimer = nil
	if !ls.leader || !p.ready.Load() || ls.ticking {
		ls.mu.Unlock()
		return
	}
	now := p.clock.Now()
	if now.UnixMilli() < p.m.next.Load() {
		p.armLocked()
		ls.mu.Unlock()
		return
	}
	ls.lastTick = now
	ls.ticking = true
	p.disarmLocked()
	ls.mu.Unlock()

	if done := p.submitTick(); done != nil {
		select {
		case <-done:
		case <-p.closing:
		}
	}
	ls.mu.Lock()
	ls.ticking = false
	p.armLocked()
	ls.mu.Unlock()
}

// maxTimerMs bounds one leader-timer wait; a later deadline is re-checked when it fires.
const maxTimerMs = int64(time.Hour / time.Millisecond)

// submitTick queues an fsm.Tick without waiting for it; the returned channel closes when
// it has been answered.
func (p *Partition) submitTick() <-chan struct{} {
	pr := &proposal{cmd: &fsm.Tick{}, size: 16, done: make(chan struct{})}
	select {
	case p.propCh <- pr:
		p.kickProposer()
		return pr.done
	case <-p.closing:
		return nil
	}
}

// goTracked runs f on a goroutine Close waits for, unless Close has begun.
func (p *Partition) goTracked(f func()) {
	p.startMu.Lock()
	if p.stopped {
		p.startMu.Unlock()
		return
	}
	p.wg.Go(f)
	p.startMu.Unlock()
}

// LeadershipHub delivers raft's state changes of the replicas that share it on one
// goroutine: the node builds one and hands it to every replica it opens
// (Config.Leadership), so a node's idle groups need no goroutine of their own. Its
// observers block raft until the hub has read the observation (a dropped one would
// leave a replica unaware it leads); the hub only calls leadershipChanged, which never
// waits for raft.
//
// Goroutines: one, running while a replica is registered: the first replica to open
// starts it, the last to close ends it and waits for it. Lock order: mu is a leaf
// (leadershipChanged runs after it is released).
type LeadershipHub struct {
	mu  sync.Mutex
	by  map[*raft.Raft]*Partition // owner: mu
	ch  chan raft.Observation     // nil while no replica is registered (owner: mu)
	run *sync.WaitGroup           // the running goroutine's (owner: mu)
}

// NewLeadershipHub returns a hub with no replica; its creator closes it after the
// replicas it handed it to.
func NewLeadershipHub() *LeadershipHub { return &LeadershipHub{} }

// Close waits for the hub's goroutine, which ends when the last replica using the hub
// has closed: close them first.
func (h *LeadershipHub) Close() {
	h.mu.Lock()
	wg := h.run
	h.mu.Unlock()
	if wg != nil {
		wg.Wait()
	}
}

// watchLeadership registers p's raft with its hub and reads its state once, for a change
// before the observer was in place.
func (p *Partition) watchLeadership() {
	h := p.hub
	h.mu.Lock()
	if h.by == nil {
		h.by = make(map[*raft.Raft]*Partition)
		h.ch = make(chan raft.Observation, 256)
		h.run = new(sync.WaitGroup)
		ch := h.ch
		h.run.Go(func() { h.deliver(ch) })
	}
	h.by[p.raft] = p
	p.observer = raft.NewObserver(h.ch, true, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	h.mu.Unlock()
	p.raft.RegisterObserver(p.observer)
	p.leadershipChanged()
}

// unwatchLeadership ends what watchLeadership began, once p's raft has shut down.
func (p *Partition) unwatchLeadership() {
	p.raft.DeregisterObserver(p.observer)
	h := p.hub
	h.mu.Lock()
	delete(h.by, p.raft)
	var ch chan raft.Observation
	var wg *sync.WaitGroup
	if len(h.by) == 0 && h.ch != nil {
		ch, wg = h.ch, h.run
		h.by, h.ch, h.run = nil, nil, nil
	}
	h.mu.Unlock()
	if ch != nil {
		close(ch) // no registered raft is left to send on it
		wg.Wait()
	}
}

func (h *LeadershipHub) deliver(ch <-chan raft.Observation) {
	for o := range ch {
		h.mu.Lock()
		p := h.by[o.Raft]
		h.mu.Unlock()
		if p != nil {
			p.leadershipChanged()
		}
	}
}
