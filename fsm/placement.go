package fsm

import (
	"fmt"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// ---- message placement ----

// deadlineOf is the deadline a message waits for in its current state.
func (m *msg) deadlineOf() int64 {
	switch {
	case m.locked():
		if m.flags&(fSession|fPinned) != 0 {
			return NeverMs // the session lock governs (S-SES-4), or the prepared transaction
		}
		return m.lockedUntil
	case m.state == StateScheduled:
		return m.enq // S-TTL-2: a scheduled message is enqueued at its scheduled time
	case m.st.dlq:
		return NeverMs // S-DLQ-1
	}
	return m.expires
}

func (f *FSM) session(m *msg) *session {
	return m.st.ent.sessions[m.sessionID()]
}

func (f *FSM) getSession(st *store, id string) *session {
	s := st.ent.sessions[id]
	if s == nil {
		s = &session{id: id, st: st, hidx: -1}
		s.avail.owner = st
		st.ent.sessions[id] = s
	}
	return s
}

// gcSession forgets a session that has nothing left (S-SES-1).
func (f *FSM) gcSession(s *session) {
	if s != nil && !s.held && s.count == 0 && s.state == nil && s.avail.empty() {
		delete(s.st.ent.sessions, s.id)
	}
}

func (st *store) countState(s MessageState, d int64) {
	switch s {
	case StateActive:
		st.nActive += d
	case StateDeferred:
		st.nDeferred += d
	case StateScheduled:
		st.nScheduled += d
	}
}

// insert adds m to st and places it by its state.
func (f *FSM) insert(st *store, m *msg) {
	m.st = st
	m.hidx, m.aidx = -1, -1
	st.idx.Put(m)
	st.countState(m.state, 1)
	b := m.bytes()
	st.bytes += b
	f.bytes += b
	f.memBytes += int64(len(m.payload))
	if m.flags&fSession != 0 {
		f.getSession(st, m.sessionID()).count++
	}
	f.place(m)
}

// place puts an unlocked message where its state says: available heap and deadline.
func (f *FSM) place(m *msg) {
	if m.state == StateActive && !m.locked() {
		if m.flags&fSession != 0 {
			s := f.session(m)
			s.avail.push(m)
			if s.avail.peek() == m {
				f.offerSession(s)
			}
		} else {
			m.st.avail.push(m)
		}
	}
	f.dl.set(m, m.deadlineOf())
}

func (f *FSM) unavail(m *msg) {
	if m.aidx < 0 && m.flags&fRing == 0 {
		return
	}
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			s.avail.remove(m)
			f.offerSession(s) // its first available message may have changed
		}
		return
	}
	m.st.avail.remove(m)
}

// offerSession records that s may be the next available session (S-SES-2). The entity's
// free heap holds (first available seq, session) entries; entries that no longer match
// their session (held, emptied, head changed, forgotten) are dropped when they reach the
// top, and the heap is rebuilt when stale entries outnumber the sessions.
func (f *FSM) offerSession(s *session) {
	if s.held || s.avail.empty() {
		return
	}
	e := s.st.ent
	e.free.push(freeEnt{seq: s.avail.peek().seq, s: s})
	if len(e.free) > 2*len(e.sessions)+64 {
		e.free = e.free[:0]
		for _, id := range sortedKeys(e.sessions) {
			if c := e.sessions[id]; !c.held && !c.avail.empty() {
				e.free.push(freeEnt{seq: c.avail.peek().seq, s: c})
			}
		}
	}
}

// nextFreeSession returns the free session whose first available message has the lowest
// sequence number, or nil.
func (f *FSM) nextFreeSession(e *entity) *session {
	for len(e.free) > 0 {
		top := e.free[0]
		s := top.s
		if !s.held && e.sessions[s.id] == s && !s.avail.empty() && s.avail.peek().seq == top.seq {
			return s
		}
		e.free.pop()
	}
	return nil
}

// remove deletes m from its store and every index.
func (f *FSM) remove(m *msg) {
	st := m.st
	f.unavail(m)
	f.dl.remove(m)
	if m.locked() {
		f.unlock(m)
	}
	st.idx.Delete(m.seq)
	st.countState(m.state, -1)
	b := m.bytes()
	st.bytes -= b
	f.bytes -= b
	f.memBytes -= int64(len(m.payload))
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			s.count--
			f.gcSession(s)
		}
	}
}

func (f *FSM) unlock(m *msg) {
	delete(f.locks, m.lockCtr)
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			delete(s.locked, m.lockCtr)
		}
	}
	m.flags &^= fLocked
	m.lockedUntil = 0
	m.st.nLocked--
}

// requeue returns an unlocked message to its store after abandon, lock expiry or
// release. counted is false for release (S-SES-6, Release disposition): the next
// delivery then does not increment DeliveryCount, and S-LOCK-5 does not apply. In a
// dead-letter sub-queue no delivery is counted (S-DLQ-1): Service Bus keeps the count a
// message had when it was dead-lettered.
func (f *FSM) requeue(m *msg, counted bool) {
	if !counted || m.st.dlq {
		m.flags |= fSkipCount
	}
	if !m.st.dlq {
		if max := m.st.ent.cfg.MaxDeliveryCount; counted && max > 0 && m.dcount >= max {
			f.deadLetter(m, "MaxDeliveryCountExceeded", // S-LOCK-5
				fmt.Sprintf("Message could not be consumed after %d delivery attempts.", max), nil)
			return
		}
		if m.expires <= f.now { // S-TTL-3
			f.expire(m)
			return
		}
	}
	f.place(m)
}

// expire applies S-TTL-4 to an unlocked message of a main store.
func (f *FSM) expire(m *msg) {
	m.st.ev.Expired++
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil && f.lastSeq > s.expireThrough {
			s.expireThrough = f.lastSeq // S-TTL-5
		}
	}
	if m.st.ent.cfg.DeadLetterOnExpiration {
		f.deadLetter(m, "TTLExpiredException", "The message expired and was dead lettered.", nil)
		return
	}
	f.remove(m)
}

// deadLetter moves m from a main store to its dead-letter sub-queue (S-LOCK-6). The
// reason and description go into DeadLetter and into the application properties
// DeadLetterReason and DeadLetterErrorDescription, as Service Bus stores them.
func (f *FSM) deadLetter(m *msg, reason, desc string, props []rule.Property) {
	e := m.st.ent
	m.st.ev.DeadLettered++
	f.remove(m)
	p := rule.Properties{App: m.app}
	for _, pr := range props {
		p.Set(pr.Key, pr.Value)
	}
	p.Set("DeadLetterReason", rule.Value{Kind: rule.KindString, S: reason})
	p.Set("DeadLetterErrorDescription", rule.Value{Kind: rule.KindString, S: desc})
	m.app = p.App
	m.dl = &DeadLetterInfo{Reason: reason, Description: desc}
	m.state = StateActive
	// Dead-lettering is not a failed delivery: the first receive from the dead-letter
	// sub-queue shows the count the message had (S-DLQ-1).
	m.flags = (m.flags &^ fSession) | fSkipCount | fModified
	f.insert(e.dlq, m)
}
