package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// ---- Settle / RenewLock ----

// locked finds the message a token locks in st. A token that is stale, settled or
// expired yields ErrLockLost, or ErrSessionLockLost in a session store (S-LOCK-9, S-SES-6).
func (f *FSM) lockedMsg(st *store, t LockToken, sessID, owner string) (*msg, error) {
	ctr := binary.BigEndian.Uint64(t[8:16])
	m := f.locks[ctr]
	lost := ErrLockLost
	if !st.dlq && st.ent.cfg.RequiresSession {
		lost = ErrSessionLockLost
	}
	if m == nil || m.st != st || f.token(m) != t {
		return nil, lost
	}
	if m.flags&fSession != 0 {
		sid := m.sessionID()
		if sessID != "" && sessID != sid {
			return nil, lost
		}
		if _, err := f.heldSession(st.ent, sid, owner); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func setProps(m *msg, props []rule.Property) {
	if len(props) == 0 {
		return
	}
	p := rule.Properties{App: m.app}
	for _, pr := range props {
		p.Set(pr.Key, pr.Value)
	}
	m.app = p.App
	m.flags |= fModified
}

func (f *FSM) settle(c *Settle, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if c.Disposition < Complete || c.Disposition > Release {
		r.Err = fmt.Errorf("%w: disposition %d", ErrBadCommand, c.Disposition)
		return
	}
	if len(c.Tokens) > 1 {
		r.TokenErrs = make([]error, len(c.Tokens))
	}
	for i, t := range c.Tokens {
		m, err := f.lockedMsg(st, t, c.SessionID, c.Owner)
		if err != nil && f.settledBefore(st, t, c.Disposition) {
			continue // S-LOCK-12: the repeat of a settlement that applied
		}
		if err != nil {
			if r.TokenErrs != nil {
				r.TokenErrs[i] = err
			}
			if r.Err == nil {
				r.Err = err
			}
			continue
		}
		if m.flags&fPinned != 0 { // held by a prepared transaction (txn2pc.go)
			err := ErrLockLost
			if m.flags&fSession != 0 {
				err = ErrSessionLockLost
			}
			if r.TokenErrs != nil {
				r.TokenErrs[i] = err
			}
			if r.Err == nil {
				r.Err = err
			}
			continue
		}
		f.rememberSettled(st, m, c.Disposition)
		f.settleMsg(st, m, c)
	}
}

// settleMsg applies c's disposition to m, a message locked in st.
func (f *FSM) settleMsg(st *store, m *msg, c *Settle) {
	switch c.Disposition {
	case Complete: // S-LOCK-2
		st.ev.Completed++
		f.remove(m)
	case Abandon: // S-LOCK-3
		st.ev.Abandoned++
		setProps(m, c.Properties)
		f.unlock(m)
		f.requeue(m, true)
	case Release:
		f.unlock(m)
		f.requeue(m, false)
	case Defer: // S-LOCK-7
		setProps(m, c.Properties)
		f.unlock(m)
		if m.state == StateActive {
			st.countState(StateActive, -1)
			m.state = StateDeferred
			st.countState(StateDeferred, 1)
		}
		if !st.dlq && m.expires <= f.now { // S-TTL-3
			f.expire(m)
		} else {
			f.place(m)
		}
	case DeadLetter: // S-LOCK-6
		if st.dlq { // S-DLQ-1: never dead-lettered again; it stays, unlocked
			setProps(m, c.Properties)
			f.unlock(m)
			f.requeue(m, false)
			return
		}
		f.deadLetter(m, c.Reason, c.Description, c.Properties)
	}
}

func (f *FSM) renewLock(c *RenewLock, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	r.LockedUntil = make([]int64, len(c.Tokens))
	if len(c.Tokens) > 1 {
		r.TokenErrs = make([]error, len(c.Tokens))
	}
	for i, t := range c.Tokens {
		m, err := f.lockedMsg(st, t, "", "")
		if err != nil {
			if r.TokenErrs != nil {
				r.TokenErrs[i] = err
			}
			if r.Err == nil {
				r.Err = err
			}
			continue
		}
		if m.flags&fSession != 0 { // the session lock covers it (S-SES-4)
			r.LockedUntil[i] = f.session(m).lockedUntil
			continue
		}
		m.lockedUntil = satAdd(f.now, st.ent.cfg.LockDurationMs) // S-LOCK-8
		f.dl.set(m, m.deadlineOf())
		r.LockedUntil[i] = m.lockedUntil
	}
}
