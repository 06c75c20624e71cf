package fsm

import (
	"fmt"
	"slices"
)

// ---- Sessions ----

func (f *FSM) sessionEntity(t Target) (*entity, error) {
	e, st, err := f.lookup(t)
	if err != nil {
		return nil, err
	}
	if st.dlq || !e.cfg.RequiresSession {
		return nil, fmt.Errorf("%w: %q", ErrSessionNotAllowed, e.name)
	}
	return e, nil
}

func (f *FSM) acceptSession(c *AcceptSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if f.receiveDisabled(e) {
		r.Err = ErrEntityDisabled
		return
	}
	var s *session
	if c.SessionID == "" { // next available: the free session with the lowest available seq
		best := f.nextFreeSession(e)
		if best == nil {
			r.Err = ErrNoSessionAvailable
			return
		}
		s = best
	} else {
		s = f.getSession(e.main, c.SessionID)
		if s.held && s.holder != c.Owner { // S-SES-2
			r.Err = fmt.Errorf("%w: session %q is held", ErrSessionCannotBeLocked, c.SessionID)
			return
		}
	}
	s.held, s.holder = true, c.Owner
	s.lockedUntil = satAdd(f.now, e.cfg.LockDurationMs) // S-SES-4
	f.sh.fix(s)
	f.expireSession(s) // S-TTL-5
	r.SessionID = s.id
	r.LockedUntil = []int64{s.lockedUntil}
}

func (f *FSM) releaseSession(c *ReleaseSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	s, err := f.heldSession(e, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	f.endSession(s, false) // S-SES-6: closing does not increment
}

func (f *FSM) renewSession(c *RenewSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	s, err := f.heldSession(e, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	s.lockedUntil = satAdd(f.now, e.cfg.LockDurationMs) // S-SES-4
	f.sh.fix(s)
	r.SessionID = s.id
	r.LockedUntil = []int64{s.lockedUntil}
}

func (f *FSM) setSessionState(c *SetSessionState, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if c.SessionID == "" {
		r.Err = ErrSessionRequired
		return
	}
	s := e.sessions[c.SessionID]
	if c.Owner != "" {
		if s, err = f.heldSession(e, c.SessionID, c.Owner); err != nil {
			r.Err = err
			return
		}
	}
	n := int64(len(c.State))
	if max := f.cfg.MaxMessageSizeBytes; max > 0 && n > max { // S-SES-5
		r.Err = fmt.Errorf("%w: session state of %d bytes", ErrMessageTooLarge, n)
		return
	}
	var old int64
	if s != nil {
		old = int64(len(s.state))
	}
	if max := f.cfg.MaxSizeBytes; max > 0 && n > old && f.bytes+n-old > max {
		r.Err = ErrQuotaExceeded
		return
	}
	if s == nil {
		if n == 0 {
			return
		}
		s = f.getSession(e.main, c.SessionID)
	}
	f.bytes += n - old
	if n == 0 {
		s.state, s.stateAt = nil, 0 // SetState(null) clears it
		f.gcSession(s)
		return
	}
	s.state = slices.Clone(c.State)
	s.stateAt = f.now
}
