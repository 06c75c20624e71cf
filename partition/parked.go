package partition

import (
	"github.com/quorumbus/quorumbus/fsm"
)

// A parked receive is a peek-lock Receive long-polling on the leader with nothing to
// take. The proposer adds its command to the next entry that stores messages, after the
// sends, so a message sent to an idle receiver is locked in the Raft round that stores
// it: one commit between a send and its delivery instead of two (the waiter would
// otherwise wake after the send's commit and propose its receive in the next one).
//
// The handover happens under parkMu together with the removal from the list, so a
// waiter that unparks either was still parked (and nothing of it is in the log) or finds
// the proposal in pr; it then owns that proposal's result: the messages it locked bear
// the receive's salt like any other of its locks.
type parked struct {
	req fsm.Receive
	pr  chan *proposal // capacity 1: the proposal made for it
	on  bool           // in Partition.parked (under parkMu)
}

// park registers w, unless it is registered already or holds a proposal not yet taken
// (the waiter takes it on its next round, which the entry's apply wakes).
func (p *Partition) park(w *parked) {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	if w.on || len(w.pr) > 0 {
		return
	}
	w.on = true
	p.parked = append(p.parked, w)
	p.hasParked.Store(true)
}

// unpark removes w if it is parked, and returns the proposal the proposer made for it
// and its waiter has not taken yet, if any: from then on no proposal is made for w
// until it parks again.
func (p *Partition) unpark(w *parked) *proposal {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	if w.on {
		w.on = false
		for i, o := range p.parked {
			if o == w {
				p.parked = append(p.parked[:i], p.parked[i+1:]...)
				break
			}
		}
		p.hasParked.Store(len(p.parked) > 0)
	}
	select {
	case pr := <-w.pr:
		return pr
	default:
		return nil
	}
}

// piggyback appends a receive proposal for every parked waiter to live when live stores
// messages, and hands each its proposal. The proposer calls it before encoding an entry.
func (p *Partition) piggyback(live []*proposal) []*proposal {
	if !p.hasParked.Load() || !storesMessages(live) {
		return live
	}
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	for _, w := range p.parked {
		w.on = false
		r := w.req
		pr := &proposal{cmd: &r, size: cmdSize(&r), done: make(chan struct{})}
		pr.taken.Store(true)
		select {
		case w.pr <- pr: // empty: park registers no waiter holding a proposal
			live = append(live, pr)
		default:
		}
	}
	clear(p.parked)
	p.parked = p.parked[:0]
	p.hasParked.Store(false)
	return live
}

// storesMessages reports whether an entry of these proposals may make messages
// available at once: a send.
func storesMessages(live []*proposal) bool {
	for _, pr := range live {
		switch pr.cmd.(type) {
		case *fsm.Enqueue, *fsm.EnqueueUploaded:
			return true
		}
	}
	return false
}
