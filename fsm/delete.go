package fsm

import "fmt"

// MaxDeleteCount is the most messages one DeleteMessages removes (S-DEL-2: Service
// Bus's cap on one batch-delete request).
const MaxDeleteCount = 4000

// maxDeleteScan bounds how many messages one DeleteMessages looks at, deleted or
// skipped (locked, other sessions', scheduled after the cutoff), so that an entry's
// apply time stays bounded however the store looks. A scan cut short answers Next, the
// sequence number to go on from.
const maxDeleteScan = 64 * MaxDeleteCount

// deleteMessages removes up to c.Max messages of a target in sequence order (S-DEL-1..4).
func (f *FSM) deleteMessages(c *DeleteMessages, r *Result) {
	e, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if f.receiveDisabled(e) {
		r.Err = ErrEntityDisabled
		return
	}
	if c.SessionID != "" && (st.dlq || !e.cfg.RequiresSession) {
		r.Err = fmt.Errorf("%w: %q", ErrSessionNotAllowed, e.name)
		return
	}
	if c.Max <= 0 || c.Max > MaxDeleteCount {
		r.Err = fmt.Errorf("%w: message count %d is not between 1 and %d", ErrBadCommand, c.Max, MaxDeleteCount)
		return
	}
	var del []*msg
	scanned := 0
	st.idx.Ascend(max(c.From, 0), func(m *msg) bool {
		if scanned == maxDeleteScan {
			r.Next = m.seq
			return false
		}
		scanned++
		if m.enq >= c.Before && m.sched == 0 {
			// Messages sent without a schedule are enqueued in sequence order: none
			// after this one is older than the cutoff.
			return false
		}
		if m.locked() || m.enq >= c.Before || (c.SessionID != "" && m.sessionID() != c.SessionID) {
			return true // S-DEL-3
		}
		del = append(del, m)
		return len(del) < int(c.Max)
	})
	for _, m := range del {
		f.remove(m)
	}
	r.Count = len(del)
}
