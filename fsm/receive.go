package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// ---- Receive ----

func (f *FSM) token(m *msg) LockToken {
	var t LockToken
	binary.BigEndian.PutUint32(t[0:4], f.cfg.GroupID)
	binary.BigEndian.PutUint32(t[4:8], m.salt)
	binary.BigEndian.PutUint64(t[8:16], m.lockCtr)
	return t
}

// deliver hands m (already out of the available heap) to a receiver.
func (f *FSM) deliver(m *msg, mode ReceiveMode, salt uint32, s *session, out *Message) *Message {
	m.st.ev.Outgoing++
	if m.flags&fSkipCount != 0 {
		m.flags &^= fSkipCount
	} else {
		m.dcount++ // S-LOCK-5: the first delivery is 1
	}
	if mode == ReceiveAndDelete { // S-RCV-1
		f.exportTo(m, out)
		f.remove(m)
		return out
	}
	f.lockCtr++
	m.lockCtr, m.salt = f.lockCtr, salt
	m.flags |= fLocked
	m.st.nLocked++
	f.locks[m.lockCtr] = m
	if s != nil {
		if s.locked == nil {
			s.locked = map[uint64]*msg{}
		}
		s.locked[m.lockCtr] = m
	} else {
		m.lockedUntil = satAdd(f.now, m.st.ent.cfg.LockDurationMs) // S-LOCK-1
	}
	f.dl.set(m, m.deadlineOf())
	f.exportTo(m, out)
	return out
}

// export builds the Message view of m. Strings are sliced from m's packed strings and
// App and Payload are shared: the fsm never writes into them (it copies on write).
func (f *FSM) export(m *msg) *Message {
	out := &Message{}
	f.exportTo(m, out)
	return out
}

// exportTo is export into out, a zero Message.
func (f *FSM) exportTo(m *msg, out *Message) {
	out.Payload, out.Spilled = m.payload, m.sp
	unpackStrings(m.strs, &out.Properties)
	out.TimeToLive, out.ScheduledEnqueueTime = m.ttl, m.sched
	out.SequenceNumber, out.EnqueuedTime, out.Size = m.seq, m.enq, m.size
	out.App = m.app
	out.ExpiresAt = m.expires
	out.DeliveryCount = m.dcount
	out.State = m.state
	if m.locked() {
		out.LockToken = f.token(m)
		out.LockedUntil = m.lockedUntil
		if m.flags&fSession != 0 {
			if s := f.session(m); s != nil {
				out.LockedUntil = s.lockedUntil
			}
		}
	}
	if m.dl != nil {
		d := *m.dl
		out.DeadLetter = &d
	}
	out.Modified = m.flags&fModified != 0
}

// heldSession checks that owner holds the named session of e (S-SES-2, S-SES-6).
func (f *FSM) heldSession(e *entity, id, owner string) (*session, error) {
	s := e.sessions[id]
	if s == nil || !s.held || (owner != "" && s.holder != owner) {
		return nil, fmt.Errorf("%w: session %q is not held by %q", ErrSessionLockLost, id, owner)
	}
	return s, nil
}

// sessionFor resolves a session-aware command's target: for a session entity's main
// store the session must be held by owner.
func (f *FSM) sessionFor(e *entity, st *store, id, owner string) (*session, error) {
	if st.dlq || !e.cfg.RequiresSession {
		if id != "" {
			return nil, fmt.Errorf("%w: %q", ErrSessionNotAllowed, e.name)
		}
		return nil, nil
	}
	if id == "" {
		return nil, ErrSessionRequired // S-SES-1
	}
	return f.heldSession(e, id, owner)
}

// expireSession applies S-TTL-5 when a receiver holds or accepts a session.
func (f *FSM) expireSession(s *session) {
	through := s.expireThrough
	for through > 0 {
		m := s.avail.peek()
		if m == nil || m.seq > through {
			break
		}
		s.avail.remove(m)
		f.expire(m)
	}
	s.expireThrough = 0
}

// receivable resolves what a receive takes from: the target's store, and its session
// when one is named (held by owner, S-SES-2). It fails for an unknown target, an entity
// that does not allow receives (S-ENT-2 Status), or a session not held by owner.
func (f *FSM) receivable(t Target, sessionID, owner string) (*store, *session, error) {
	e, st, err := f.lookup(t)
	if err != nil {
		return nil, nil, err
	}
	if f.receiveDisabled(e) {
		return nil, nil, ErrEntityDisabled
	}
	s, err := f.sessionFor(e, st, sessionID, owner)
	if err != nil {
		return nil, nil, err
	}
	return st, s, nil
}

func (f *FSM) receive(c *Receive, r *Result) {
	st, s, err := f.receivable(c.Target, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	h := &st.avail
	if s != nil {
		f.expireSession(s)
		h = &s.avail
	}
	// The messages it can take, allocated together: they travel as one result.
	var block []Message
	if k := min(int(c.Max), h.n); k > 0 {
		block = make([]Message, k)
		r.Messages = make([]*Message, 0, k)
	}
	for n := int32(0); n < c.Max; {
		m := h.peek()
		if m == nil {
			break
		}
		h.remove(m)
		if !st.dlq && m.expires <= f.now { // S-TTL-3
			f.expire(m)
			continue
		}
		var out *Message
		if int(n) < len(block) {
			out = &block[n]
		} else {
			out = &Message{}
		}
		r.Messages = append(r.Messages, f.deliver(m, c.Mode, c.Salt, s, out))
		n++
	}
	if s != nil {
		f.gcSession(s)
	}
}

func (f *FSM) receiveDeferred(c *ReceiveDeferred, r *Result) {
	st, s, err := f.receivable(c.Target, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	ms := make([]*msg, 0, len(c.SeqNos))
	for _, seq := range c.SeqNos { // all or nothing
		m := st.idx.Get(seq)
		if m == nil || m.state != StateDeferred || m.locked() || (s != nil && m.sessionID() != s.id) ||
			slices.Contains(ms, m) {
			r.Err = fmt.Errorf("%w: no deferred message with sequence number %d", ErrNotFound, seq)
			return
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		f.dl.remove(m)
		r.Messages = append(r.Messages, f.deliver(m, c.Mode, c.Salt, s, &Message{}))
	}
}
