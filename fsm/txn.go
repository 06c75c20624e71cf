package fsm

import (
	"encoding/binary"
	"fmt"
)

// ---- Txn ----

// Txn applies the operations of one committed transaction (AMQP 1.0 part 4, the Service
// Bus profile) on this partition all-or-nothing: either every command takes effect, or
// none does and the Result's Err says why. Cmds may hold only Enqueue, Schedule and
// Settle commands; anything else makes the whole Txn fail with ErrBadCommand.
//
// Apply order is fixed so that the outcome is decidable before anything changes:
//  1. every Settle is validated (target, disposition, each token locked, no message
//     settled twice in the transaction, session held by its Owner);
//  2. all messages of all Enqueue and Schedule commands are stored as one batch, which
//     is already all-or-nothing (S-SEND-5); the quota check does not count the space the
//     transaction's completions free, so it is conservative;
//  3. the Settles run, in order. Storing messages changes no lock and no session hold,
//     so nothing validated in step 1 can fail here.
//
// The Result carries SeqNos for the stored messages (in the order of the Enqueue and
// Schedule commands) and, on failure, Err with the first reason.
type Txn struct {
	Cmds []Command
}

func (*Txn) op() Op                       { return OpTxn }
func (*Txn) activity() (activity, Target) { return noActivity, Target{} }

// txn applies c (see Txn). A malformed transaction fails with ErrBadCommand; lock
// failures wrap ErrLockLost or ErrSessionLockLost as a Settle outside one would.
func (f *FSM) txn(c *Txn, r *Result) {
	msgs, settles, err := f.checkTxn(c.Cmds)
	if err != nil {
		r.Err = err
		return
	}
	// 2. Store the messages, all-or-nothing.
	if len(msgs) > 0 {
		f.enqueue(msgs, r)
		if r.Err != nil {
			return
		}
		f.lastSend = f.now // S-IDLE-1: a committed send is a send
	}
	// 3. Settle; validated above, so no token fails.
	var sr Result
	for _, s := range settles {
		sr = Result{}
		f.settle(s, &sr)
		if sr.Err != nil && r.Err == nil {
			// Unreachable by the argument above; reported rather than hidden, and the
			// invariants checker catches any partial state in tests.
			r.Err = fmt.Errorf("fsm: transaction settle failed after validation: %w", sr.Err)
		}
		f.noteActivity(s, &sr)
	}
}

// checkTxn splits a transaction's commands into its messages and settlements and
// validates every settlement against the current state (step 1 of Txn): target,
// disposition, each token locked (and not held by a prepared transaction), the session
// held by its Owner, no message settled twice.
func (f *FSM) checkTxn(cmds []Command) ([]*Message, []*Settle, error) {
	var msgs []*Message
	var settles []*Settle
	for i, sc := range cmds {
		switch sc := sc.(type) {
		case *Enqueue:
			msgs = append(msgs, sc.Messages...)
		case *Schedule:
			msgs = append(msgs, sc.Messages...)
		case *Settle:
			settles = append(settles, sc)
		default:
			return nil, nil, fmt.Errorf("%w: transaction command %d is %T", ErrBadCommand, i, sc)
		}
	}
	seen := map[uint64]bool{} // lookup only
	for _, s := range settles {
		_, st, err := f.lookup(s.Target)
		if err != nil {
			return nil, nil, err
		}
		if s.Disposition < Complete || s.Disposition > Release {
			return nil, nil, fmt.Errorf("%w: disposition %d", ErrBadCommand, s.Disposition)
		}
		for _, t := range s.Tokens {
			m, err := f.lockedMsg(st, t, s.SessionID, s.Owner)
			if err != nil {
				return nil, nil, err
			}
			if m.flags&fPinned != 0 {
				return nil, nil, fmt.Errorf("%w: the message is held by another transaction", ErrLockLost)
			}
			ctr := binary.BigEndian.Uint64(t[8:16])
			if seen[ctr] {
				return nil, nil, fmt.Errorf("%w: a message is settled twice in one transaction", ErrLockLost)
			}
			seen[ctr] = true
		}
	}
	return msgs, settles, nil
}
