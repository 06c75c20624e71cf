package wire

import (
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Error is an error as it crosses the network: its text, which of the cluster's
// sentinels it matches (a bit each, in the order of the cluster's table), and the details
// callers extract with errors.As. The cluster owns the table (ErrorCodec): the wire
// only carries the bits.
type Error struct {
	Msg        string
	Kinds      uint64
	HasLeader  bool // a *partition.NotLeaderError: LeaderID, LeaderAddr, Unknown
	LeaderID   string
	LeaderAddr string
	Unknown    bool
	HasInvalid bool // a *meta.ValidationError: Field, Reason
	Field      string
	Reason     string
}

// ErrorCodec turns errors into their wire form and back.
type ErrorCodec interface {
	ToWire(error) *Error // nil for nil
	FromWire(*Error) error
}

const (
	errLeader  = 1 << 0
	errUnknown = 1 << 1
	errInvalid = 1 << 2
)

// appendError writes e; nil is one zero byte.
func appendError(b []byte, e *Error) []byte {
	if e == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binenc.AppendString(b, e.Msg)
	b = binenc.AppendUvarint(b, e.Kinds)
	var fl byte
	if e.HasLeader {
		fl |= errLeader
	}
	if e.Unknown {
		fl |= errUnknown
	}
	if e.HasInvalid {
		fl |= errInvalid
	}
	b = append(b, fl)
	if e.HasLeader {
		b = binenc.AppendString(b, e.LeaderID)
		b = binenc.AppendString(b, e.LeaderAddr)
	}
	if e.HasInvalid {
		b = binenc.AppendString(b, e.Field)
		b = binenc.AppendString(b, e.Reason)
	}
	return b
}

func (d *Decoder) error() *Error {
	if !d.Bool() {
		return nil
	}
	e := &Error{Msg: d.Str(), Kinds: d.Uvarint()}
	fl := d.Byte()
	if fl&^(errLeader|errUnknown|errInvalid) != 0 {
		d.Failf("unknown error flags %#x", fl)
		return nil
	}
	e.HasLeader, e.Unknown, e.HasInvalid = fl&errLeader != 0, fl&errUnknown != 0, fl&errInvalid != 0
	if e.HasLeader {
		e.LeaderID, e.LeaderAddr = d.Str(), d.Str()
	}
	if e.HasInvalid {
		e.Field, e.Reason = d.Str(), d.Str()
	}
	if d.Err() != nil {
		return nil
	}
	return e
}

// Result is what an operation on a partition returns besides its error. Each operation
// sets the fields its partition method returns and leaves the others zero; only the set
// ones travel (a bit each in a leading mask).
type Result struct {
	Seqs      []int64         // Enqueue, Schedule, Txn: sequence numbers
	Msgs      []*fsm.Message  // Receive, ReceiveDeferred, Peek
	TokenErrs []error         // Settle: one per token, nil when settled
	Until     int64           // RenewSession, AcceptSession: the lock's expiry (Unix ms)
	Untils    []int64         // RenewLock: each lock's expiry
	Session   string          // AcceptSession
	State     []byte          // SessionState
	Sessions  []string        // ListSessions, SessionsUpdatedSince
	Stats     *fsm.Stats      // Stats
	Count     int64           // Purge
	Tokens    []fsm.LockToken // LockedWithSalt
	Committed bool            // TxnDecide: the decision in force (also with an error)
}

// Result fields, a bit each. Append only.
const (
	resSeqs = 1 << iota
	resMsgs
	resTokenErrs
	resUntil
	resUntils
	resSession
	resState
	resSessions
	resStats
	resCount
	resTokens
	resCommitted

	resAll = 1<<iota - 1
)

// AppendResult writes r, its errors through ec.
func AppendResult(b []byte, r *Result, ec ErrorCodec) []byte {
	var mask uint64
	set := func(bit uint64, ok bool) {
		if ok {
			mask |= bit
		}
	}
	set(resSeqs, r.Seqs != nil)
	set(resMsgs, r.Msgs != nil)
	set(resTokenErrs, r.TokenErrs != nil)
	set(resUntil, r.Until != 0)
	set(resUntils, r.Untils != nil)
	set(resSession, r.Session != "")
	set(resState, r.State != nil)
	set(resSessions, r.Sessions != nil)
	set(resStats, r.Stats != nil)
	set(resCount, r.Count != 0)
	set(resTokens, r.Tokens != nil)
	set(resCommitted, r.Committed)
	b = binenc.AppendUvarint(b, mask)
	if mask&resSeqs != 0 {
		b = appendInt64s(b, r.Seqs)
	}
	if mask&resMsgs != 0 {
		b = appendMessages(b, r.Msgs)
	}
	if mask&resTokenErrs != 0 {
		b = binenc.AppendUvarint(b, uint64(len(r.TokenErrs)))
		for _, e := range r.TokenErrs {
			b = appendError(b, ec.ToWire(e))
		}
	}
	if mask&resUntil != 0 {
		b = binenc.AppendVarint(b, r.Until)
	}
	if mask&resUntils != 0 {
		b = appendInt64s(b, r.Untils)
	}
	if mask&resSession != 0 {
		b = binenc.AppendString(b, r.Session)
	}
	if mask&resState != 0 {
		b = appendBytes(b, r.State)
	}
	if mask&resSessions != 0 {
		b = appendStrings(b, r.Sessions)
	}
	if mask&resStats != 0 {
		b = appendStats(b, r.Stats)
	}
	if mask&resCount != 0 {
		b = binenc.AppendVarint(b, r.Count)
	}
	if mask&resTokens != 0 {
		b = appendTokens(b, r.Tokens)
	}
	return b
}

// DecodeResult reads what AppendResult wrote.
func DecodeResult(d *Decoder, ec ErrorCodec) Result {
	var r Result
	mask := d.Uvarint()
	if mask&^resAll != 0 {
		d.Failf("unknown result fields %#x", mask&^resAll)
		return r
	}
	if mask&resSeqs != 0 {
		r.Seqs = d.int64s()
	}
	if mask&resMsgs != 0 {
		r.Msgs = d.messages()
	}
	if mask&resTokenErrs != 0 {
		n := d.Count(1)
		r.TokenErrs = make([]error, n)
		for i := range r.TokenErrs {
			if e := d.error(); e != nil {
				r.TokenErrs[i] = ec.FromWire(e)
			}
		}
	}
	if mask&resUntil != 0 {
		r.Until = d.Varint()
	}
	if mask&resUntils != 0 {
		r.Untils = d.int64s()
	}
	if mask&resSession != 0 {
		r.Session = d.Str()
	}
	if mask&resState != 0 {
		r.State = d.bytes()
	}
	if mask&resSessions != 0 {
		r.Sessions = d.strings()
	}
	if mask&resStats != 0 {
		r.Stats = d.stats()
	}
	if mask&resCount != 0 {
		r.Count = d.Varint()
	}
	if mask&resTokens != 0 {
		r.Tokens = d.tokens()
	}
	r.Committed = mask&resCommitted != 0
	return r
}

func appendStats(b []byte, s *fsm.Stats) []byte {
	b = binenc.AppendUvarint(b, uint64(len(s.Targets)))
	for i := range s.Targets {
		t := &s.Targets[i]
		b = appendTarget(b, t.Target)
		c := &t.Counters
		for _, v := range [...]int64{t.LastReceive, t.Active, t.Locked, t.Scheduled, t.Deferred, t.Bytes, t.Oldest,
			c.Incoming, c.Outgoing, c.Completed, c.Abandoned, c.DeadLettered, c.Expired} {
			b = binenc.AppendVarint(b, v)
		}
	}
	for _, v := range [...]int64{s.Bytes, s.LastSeq, s.LastSend, s.Locks, s.Sessions} {
		b = binenc.AppendVarint(b, v)
	}
	return b
}

func (d *Decoder) stats() *fsm.Stats {
	s := &fsm.Stats{}
	n := d.Count(15)
	if n > 0 {
		s.Targets = make([]fsm.TargetStats, n)
	}
	for i := range s.Targets {
		t := &s.Targets[i]
		t.Target = d.target()
		c := &t.Counters
		for _, p := range [...]*int64{&t.LastReceive, &t.Active, &t.Locked, &t.Scheduled, &t.Deferred, &t.Bytes, &t.Oldest,
			&c.Incoming, &c.Outgoing, &c.Completed, &c.Abandoned, &c.DeadLettered, &c.Expired} {
			*p = d.Varint()
		}
	}
	for _, p := range [...]*int64{&s.Bytes, &s.LastSeq, &s.LastSend, &s.Locks, &s.Sessions} {
		*p = d.Varint()
	}
	return s
}
