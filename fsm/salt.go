package fsm

import (
	"bytes"
	"slices"
)

// LockedWithSalt returns the tokens of the messages of t locked by a receive whose
// command carried salt, in token order. It lets a caller that lost the answer to a
// receive (the leader died after committing it) release what that receive locked,
// instead of leaving it locked until its lock or session lock expires. Read only.
func (f *FSM) LockedWithSalt(t Target, salt uint32) []LockToken {
	_, st, err := f.lookup(t)
	if err != nil {
		return nil
	}
	var out []LockToken
	for _, m := range f.locks {
		if m.st == st && m.salt == salt {
			out = append(out, f.token(m))
		}
	}
	slices.SortFunc(out, func(a, b LockToken) int { return bytes.Compare(a[:], b[:]) })
	return out
}
