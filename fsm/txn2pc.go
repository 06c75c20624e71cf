package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Two-phase commit of a transaction that spans partition groups (docs/guarantees.md,
// "Across partitions"). Each participant partition holds its part of the transaction
// between TxnPrepare and TxnCommit or TxnAbort; the coordinator (the first participant)
// records the decision with TxnDecide, the commit point, and drops it with TxnForget
// once every participant has completed. The fsm only keeps the records and applies
// them deterministically; the cluster layer drives the protocol and its recovery.
//
// Held effects, between prepare and completion:
//   - each settled message stays locked, pinned to the transaction (fPinned): its lock
//     does not expire (no deadline; a session message leaves its session's lock set, so
//     the session lock expiring does not release it), a Settle outside the transaction
//     fails with ErrLockLost, and a renewal changes nothing;
//   - the sends are kept in the prepared record, not in a store: they are not receivable,
//     peekable or counted in Stats until the commit, but their bytes count toward
//     MaxSizeBytes (reserved), so a commit never exceeds the quota the prepare checked.

// ErrTxnTimeout is returned by TxnPrepare when the transaction's deadline has passed, and
// by TxnDecide when a commit arrives at or after the deadline (the decision is then abort).
var ErrTxnTimeout = errors.New("fsm: transaction timed out")

// ErrTxnDecided is returned by TxnDecide when the coordinator already holds the other
// decision for the transaction; Result.Committed gives the decision in force.
var ErrTxnDecided = errors.New("fsm: transaction already decided otherwise")

// TxnPrepare validates a participant's part of a transaction as Txn does and, instead of
// applying it, holds its effects under ID until TxnCommit or TxnAbort. Coordinator names
// the coordinator's partition group (opaque to the fsm); Deadline (fsm time, Unix ms) is
// when the participant, still without a decision, asks the coordinator and presumes
// abort. A prepare at or after Deadline fails with ErrTxnTimeout; a prepare of an ID
// already prepared succeeds without change.
type TxnPrepare struct {
	ID          string
	Coordinator uint32
	Deadline    int64
	Cmds        []Command // Enqueue, Schedule and Settle only
}

// TxnDecide records the decision of a transaction in its coordinator group. The first
// decision stands: a repeat of it succeeds, the other one fails with ErrTxnDecided. A
// commit at or after Deadline records abort instead and fails with ErrTxnTimeout, so a
// participant that presumed abort after the deadline is never contradicted. Result.
// Committed reports the decision in force.
type TxnDecide struct {
	ID           string
	Commit       bool
	Deadline     int64
	Participants []uint32 // the partition groups to complete, coordinator included
}

// TxnCommit applies the effects a TxnPrepare held: the sends are stored (Result.SeqNos)
// and the settlements take effect. Nothing is checked again: the prepare did. Unknown
// IDs (already completed, or never prepared here) succeed without change.
type TxnCommit struct{ ID string }

// TxnAbort drops the held sends and unlocks the held messages as an abandon would (the
// attempt counts toward MaxDeliveryCount, as a rollback does). Unknown IDs succeed.
type TxnAbort struct{ ID string }

// TxnForget drops the coordinator's decision record. Unknown IDs succeed.
type TxnForget struct{ ID string }

func (*TxnPrepare) op() Op { return OpTxnPrepare }
func (*TxnDecide) op() Op  { return OpTxnDecide }
func (*TxnCommit) op() Op  { return OpTxnCommit }
func (*TxnAbort) op() Op   { return OpTxnAbort }
func (*TxnForget) op() Op  { return OpTxnForget }

func (*TxnPrepare) activity() (activity, Target) { return noActivity, Target{} }
func (*TxnDecide) activity() (activity, Target)  { return noActivity, Target{} }
func (*TxnCommit) activity() (activity, Target)  { return noActivity, Target{} } // per settlement, in txnCommit
func (*TxnAbort) activity() (activity, Target)   { return noActivity, Target{} }
func (*TxnForget) activity() (activity, Target)  { return noActivity, Target{} }

// prepTxn is a participant's prepared transaction. Immutable once stored (Freeze shares it).
type prepTxn struct {
	id       string
	coord    uint32
	deadline int64
	reserved int64 // bytes of msgs counted in f.bytes
	msgs     []*Message
	settles  []*Settle
}

// txnDecision is a coordinator's decision record. Immutable once stored.
type txnDecision struct {
	id       string
	commit   bool
	deadline int64
	parts    []uint32
}

// PreparedTxn describes a prepared transaction (query).
type PreparedTxn struct {
	ID          string
	Coordinator uint32
	Deadline    int64
}

// TxnDecision describes a coordinator's decision record (query).
type TxnDecision struct {
	ID           string
	Commit       bool
	Deadline     int64
	Participants []uint32
}

func (f *FSM) txnPrepare(c *TxnPrepare, r *Result) {
	if c.ID == "" {
		r.Err = fmt.Errorf("%w: transaction without an id", ErrBadCommand)
		return
	}
	if f.prepared[c.ID] != nil {
		return // a repeated prepare
	}
	if c.Deadline <= f.now {
		r.Err = ErrTxnTimeout
		return
	}
	msgs, settles, err := f.checkTxn(c.Cmds)
	if err != nil {
		r.Err = err
		return
	}
	var reserved int64
	if len(msgs) > 0 {
		reserved = f.enqueueMode(msgs, r, enqDryRun)
		if r.Err != nil {
			return
		}
	}
	p := &prepTxn{id: c.ID, coord: c.Coordinator, deadline: c.Deadline, reserved: reserved, msgs: msgs, settles: settles}
	f.prepared[c.ID] = p
	f.bytes += reserved
	f.pin(p)
}

// pin marks the messages p settles as held by it.
func (f *FSM) pin(p *prepTxn) {
	for _, s := range p.settles {
		for _, t := range s.Tokens {
			m := f.locks[binary.BigEndian.Uint64(t[8:16])]
			if m == nil || f.token(m) != t {
				continue // validated at prepare; only a corrupt snapshot gets here
			}
			m.flags |= fPinned
			f.dl.remove(m)
			if m.flags&fSession != 0 {
				if s := f.session(m); s != nil {
					delete(s.locked, m.lockCtr) // the session lock no longer governs it
				}
			}
		}
	}
}

// unpin clears the pins of p and returns the messages that are still held by it, with
// their settlements, in command order.
func (f *FSM) unpin(p *prepTxn) (ms []*msg, ss []*Settle) {
	for _, s := range p.settles {
		for _, t := range s.Tokens {
			m := f.locks[binary.BigEndian.Uint64(t[8:16])]
			if m == nil || f.token(m) != t || m.flags&fPinned == 0 {
				continue // removed meanwhile (its entity deleted or purged)
			}
			m.flags &^= fPinned
			ms, ss = append(ms, m), append(ss, s)
		}
	}
	return ms, ss
}

func (f *FSM) txnCommit(c *TxnCommit, r *Result) {
	p := f.prepared[c.ID]
	if p == nil {
		return
	}
	delete(f.prepared, c.ID)
	f.bytes -= p.reserved
	if len(p.msgs) > 0 {
		f.enqueueMode(p.msgs, r, enqForce)
		r.Err = nil // forced: nothing to report
		f.lastSend = f.now
	}
	ms, ss := f.unpin(p)
	for i, m := range ms {
		st := m.st
		f.settleMsg(st, m, ss[i])
		st.ent.lastReceive = f.now // S-IDLE-1: a committed settlement is receiver activity
	}
}

func (f *FSM) txnAbort(c *TxnAbort, r *Result) {
	p := f.prepared[c.ID]
	if p == nil {
		return
	}
	delete(f.prepared, c.ID)
	f.bytes -= p.reserved
	ms, _ := f.unpin(p)
	for _, m := range ms {
		m.st.ev.Abandoned++
		f.unlock(m)
		f.requeue(m, true)
	}
}

func (f *FSM) txnDecide(c *TxnDecide, r *Result) {
	if c.ID == "" {
		r.Err = fmt.Errorf("%w: transaction without an id", ErrBadCommand)
		return
	}
	if d := f.decided[c.ID]; d != nil {
		r.Committed = d.commit
		if d.commit != c.Commit {
			r.Err = ErrTxnDecided
		}
		return
	}
	d := &txnDecision{id: c.ID, commit: c.Commit, deadline: c.Deadline, parts: slices.Clone(c.Participants)}
	if c.Commit && c.Deadline <= f.now {
		d.commit = false
		r.Err = ErrTxnTimeout
	}
	f.decided[c.ID] = d
	r.Committed = d.commit
}

func (f *FSM) txnForget(c *TxnForget) { delete(f.decided, c.ID) }

// PreparedTxns returns the transactions prepared here, by ID.
func (f *FSM) PreparedTxns() []PreparedTxn {
	out := make([]PreparedTxn, 0, len(f.prepared))
	for _, id := range sortedKeys(f.prepared) {
		p := f.prepared[id]
		out = append(out, PreparedTxn{ID: p.id, Coordinator: p.coord, Deadline: p.deadline})
	}
	return out
}

// TxnDecisions returns the decision records kept here (as a coordinator), by ID.
// TxnRecords is how many prepared transactions and decisions this partition holds (what
// PreparedTxns and TxnDecisions would list), without copying them.
func (f *FSM) TxnRecords() int { return len(f.prepared) + len(f.decided) }

func (f *FSM) TxnDecisions() []TxnDecision {
	out := make([]TxnDecision, 0, len(f.decided))
	for _, id := range sortedKeys(f.decided) {
		d := f.decided[id]
		out = append(out, TxnDecision{ID: d.id, Commit: d.commit, Deadline: d.deadline, Participants: slices.Clone(d.parts)})
	}
	return out
}

// ---- snapshot ----

// txnState is the prepared and decided records, in ID order, for a snapshot.
type txnState struct {
	prep []*prepTxn
	dec  []*txnDecision
}

func (f *FSM) txnView() txnState {
	var v txnState
	for _, id := range sortedKeys(f.prepared) {
		v.prep = append(v.prep, f.prepared[id])
	}
	for _, id := range sortedKeys(f.decided) {
		v.dec = append(v.dec, f.decided[id])
	}
	return v
}

func (v txnState) empty() bool { return len(v.prep) == 0 && len(v.dec) == 0 }

// appendTxnState encodes the record of snapshot version 3.
func appendTxnState(b []byte, v txnState) []byte {
	b = binenc.AppendUvarint(b, uint64(len(v.prep)))
	for _, p := range v.prep {
		b = binenc.AppendString(b, p.id)
		b = binenc.AppendUvarint(b, uint64(p.coord))
		b = binary.AppendVarint(b, p.deadline)
		b = binary.AppendVarint(b, p.reserved)
		b = appendMessages(b, p.msgs)
		b = binenc.AppendUvarint(b, uint64(len(p.settles)))
		for _, s := range p.settles {
			b = appendCommand(b, s)
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(v.dec)))
	for _, d := range v.dec {
		b = binenc.AppendString(b, d.id)
		b = binenc.AppendBool(b, d.commit)
		b = binary.AppendVarint(b, d.deadline)
		b = binenc.AppendUvarint(b, uint64(len(d.parts)))
		for _, g := range d.parts {
			b = binenc.AppendUvarint(b, uint64(g))
		}
	}
	return b
}

// readTxnState restores the record of snapshot version 3 (in version 4, possibly empty) into f, whose messages and
// locks are already restored: it pins the held messages and reserves the held bytes.
func (f *FSM) readTxnState(d *dec, version byte) error {
	np := d.Count(4)
	last := ""
	for i := 0; i < np && d.Err() == nil; i++ {
		p := &prepTxn{id: d.Str()}
		p.coord = d.Uvarint32("group id")
		p.deadline, p.reserved = d.Varint(), d.Varint()
		p.msgs = d.messages()
		ns := d.Count(1)
		for j := 0; j < ns && d.Err() == nil; j++ {
			s, ok := d.command().(*Settle)
			if d.Err() == nil && !ok {
				d.Failf("prepared transaction %q holds a command that is not a settlement", p.id)
			}
			if d.Err() == nil {
				p.settles = append(p.settles, s)
			}
		}
		if d.Err() != nil {
			break
		}
		if p.id <= last || p.reserved < 0 { // in id order, as written: one state, one encoding
			return fmt.Errorf("prepared transaction %q out of order or malformed", p.id)
		}
		last = p.id
		for _, s := range p.settles {
			for _, t := range s.Tokens {
				m := f.locks[binary.BigEndian.Uint64(t[8:16])]
				if m == nil || f.token(m) != t {
					continue // removed while prepared (purge, subscription deleted), as unpin skips it
				}
				if m.flags&fPinned != 0 {
					return fmt.Errorf("prepared transaction %q settles a message another one holds", p.id)
				}
				m.flags |= fPinned // pin below, once all are read
			}
		}
		f.prepared[p.id] = p
		f.bytes += p.reserved
	}
	nd := d.Count(4)
	last = ""
	for i := 0; i < nd && d.Err() == nil; i++ {
		t := &txnDecision{id: d.Str(), commit: d.Bool(), deadline: d.Varint()}
		n := d.Count(1)
		for j := 0; j < n && d.Err() == nil; j++ {
			t.parts = append(t.parts, d.Uvarint32("group id"))
		}
		if d.Err() != nil {
			break
		}
		if t.id <= last {
			return fmt.Errorf("decision %q out of order or malformed", t.id)
		}
		last = t.id
		f.decided[t.id] = t
	}
	if err := d.end(); err != nil {
		return err
	}
	if version == 3 && len(f.prepared) == 0 && len(f.decided) == 0 {
		return errors.New("version 3 without transactions (written as version 2)")
	}
	for _, id := range sortedKeys(f.prepared) {
		f.pin(f.prepared[id])
	}
	return nil
}
