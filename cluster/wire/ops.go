package wire

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/internal/binenc"
	"github.com/quorumbus/quorumbus/partition"
)

// Op numbers the operations on a partition. Append only: nodes of different releases
// talk to each other, and version 1 (the cluster's gob wire) uses the same numbers.
type Op uint8

// Operations.
const (
	OpEnqueue Op = iota + 1
	OpSchedule
	OpCancel
	OpReceive
	OpReceiveDeferred
	OpSettle
	OpRenewLock
	OpAcceptSession
	OpReleaseSession
	OpRenewSession
	OpSetState
	OpGetState
	OpListSessions
	OpPeek
	OpStats
	OpPurge
	OpSyncConfig // push the entity configuration as of metadata index MetaIndex, if not applied yet
	OpLockedWithSalt
	OpSessionsUpdatedSince // sessions whose state was set at From (Unix ms) or later
	OpTxn                  // a committed transaction on one partition: Msgs and Settles in one fsm.Txn
	OpTxnPrepare           // two-phase commit: hold Msgs and Settles under ID
	OpTxnDecide            // record the decision for ID in the coordinator group
	OpTxnComplete          // commit or abort ID's held effects
	OpTxnForget            // drop the coordinator's record of ID
	OpDeleteMessages       // batch delete (com.microsoft:batch-delete-messages); Result.Count

	opEnd // one past the last operation
)

var opNames = [...]string{"", "Enqueue", "Schedule", "Cancel", "Receive", "ReceiveDeferred", "Settle", "RenewLock",
	"AcceptSession", "ReleaseSession", "RenewSession", "SetState", "GetState", "ListSessions", "Peek", "Stats",
	"Purge", "SyncConfig", "LockedWithSalt", "SessionsUpdatedSince", "Txn", "TxnPrepare", "TxnDecide",
	"TxnComplete", "TxnForget", "DeleteMessages"}

func (o Op) String() string {
	if o > 0 && o < opEnd {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Request is one operation on one partition group. Each operation is one type below:
// it runs itself on the partition replica that leads the group (Run), says whether it
// may be applied again after an attempt whose outcome is unknown (Idempotent), and
// writes and reads its fields (version 2 of the wire). Adding an operation is one type
// here, one partition method and one router method; the cluster's version-1 adapter
// (gob) knows only the operations of its release.
type Request interface {
	Op() Op
	// Idempotent reports whether the operation may be applied again after an attempt
	// whose outcome is unknown: reads; settlements, which a second time either apply
	// or get the first one's outcome again (S-LOCK-12); renewals; the holder's session
	// operations; the two-phase-commit steps (idempotent per transaction id). Not sends
	// (a repeat stores a second copy) nor receives (a repeat locks other messages).
	Idempotent() bool
	// Run executes the operation on a local replica; a follower answers
	// partition.ErrNotLeader.
	Run(ctx context.Context, p *partition.Partition) (Result, error)

	appendTo(b []byte) []byte
	decodeFrom(d *Decoder)
}

// NewRequest returns an empty request of operation o, nil when o is unknown.
func NewRequest(o Op) Request {
	switch o {
	case OpEnqueue:
		return &Enqueue{}
	case OpSchedule:
		return &Schedule{}
	case OpCancel:
		return &Cancel{}
	case OpReceive:
		return &Receive{}
	case OpReceiveDeferred:
		return &ReceiveDeferred{}
	case OpSettle:
		return &Settle{}
	case OpRenewLock:
		return &RenewLock{}
	case OpAcceptSession:
		return &AcceptSession{}
	case OpReleaseSession:
		return &ReleaseSession{}
	case OpRenewSession:
		return &RenewSession{}
	case OpSetState:
		return &SetState{}
	case OpGetState:
		return &GetState{}
	case OpListSessions:
		return &ListSessions{}
	case OpPeek:
		return &Peek{}
	case OpStats:
		return &Stats{}
	case OpPurge:
		return &Purge{}
	case OpSyncConfig:
		return &SyncConfig{}
	case OpLockedWithSalt:
		return &LockedWithSalt{}
	case OpSessionsUpdatedSince:
		return &SessionsUpdatedSince{}
	case OpTxn:
		return &Txn{}
	case OpTxnPrepare:
		return &TxnPrepare{}
	case OpTxnDecide:
		return &TxnDecide{}
	case OpTxnComplete:
		return &TxnComplete{}
	case OpTxnForget:
		return &TxnForget{}
	case OpDeleteMessages:
		return &DeleteMessages{}
	}
	return nil
}

// AppendRequest writes r: its operation, then its fields.
func AppendRequest(b []byte, r Request) []byte {
	b = append(b, byte(r.Op()))
	return r.appendTo(b)
}

// DecodeRequest reads what AppendRequest wrote.
func DecodeRequest(d *Decoder) Request {
	o := Op(d.Byte())
	if d.Err() != nil {
		return nil
	}
	r := NewRequest(o)
	if r == nil {
		d.Failf("unknown operation %d", o)
		return nil
	}
	r.decodeFrom(d)
	if d.Err() != nil {
		return nil
	}
	return r
}

// Enqueue stores messages (S-SEND-1); all or nothing.
type Enqueue struct{ Msgs []*fsm.Message }

func (*Enqueue) Op() Op           { return OpEnqueue }
func (*Enqueue) Idempotent() bool { return false }
func (r *Enqueue) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	seqs, err := p.Enqueue(ctx, r.Msgs)
	return Result{Seqs: seqs}, err
}
func (r *Enqueue) appendTo(b []byte) []byte { return appendMessages(b, r.Msgs) }
func (r *Enqueue) decodeFrom(d *Decoder)    { r.Msgs = d.messages() }

// Schedule stores messages as scheduled (S-SCH-1).
type Schedule struct{ Msgs []*fsm.Message }

func (*Schedule) Op() Op           { return OpSchedule }
func (*Schedule) Idempotent() bool { return false }
func (r *Schedule) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	seqs, err := p.Schedule(ctx, r.Msgs)
	return Result{Seqs: seqs}, err
}
func (r *Schedule) appendTo(b []byte) []byte { return appendMessages(b, r.Msgs) }
func (r *Schedule) decodeFrom(d *Decoder)    { r.Msgs = d.messages() }

// Cancel cancels scheduled messages by sequence number.
type Cancel struct{ Seqs []int64 }

func (*Cancel) Op() Op           { return OpCancel }
func (*Cancel) Idempotent() bool { return true }
func (r *Cancel) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	return Result{}, p.Cancel(ctx, r.Seqs)
}
func (r *Cancel) appendTo(b []byte) []byte { return appendInt64s(b, r.Seqs) }
func (r *Cancel) decodeFrom(d *Decoder)    { r.Seqs = d.int64s() }

// Receive takes messages, long-polling up to Wait (S-RCV-1).
type Receive struct {
	Req  fsm.Receive
	Wait time.Duration
}

func (*Receive) Op() Op           { return OpReceive }
func (*Receive) Idempotent() bool { return false }
func (r *Receive) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	msgs, err := p.Receive(ctx, r.Req, r.Wait)
	return Result{Msgs: msgs}, err
}
func (r *Receive) appendTo(b []byte) []byte {
	b = appendEntry(b, &r.Req)
	return binenc.AppendVarint(b, int64(r.Wait))
}
func (r *Receive) decodeFrom(d *Decoder) {
	if c := command[*fsm.Receive](d); c != nil {
		r.Req = *c
	}
	r.Wait = d.duration()
}

// ReceiveDeferred receives deferred messages by sequence number (S-LOCK-7).
type ReceiveDeferred struct{ Req fsm.ReceiveDeferred }

func (*ReceiveDeferred) Op() Op           { return OpReceiveDeferred }
func (*ReceiveDeferred) Idempotent() bool { return false }
func (r *ReceiveDeferred) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	msgs, err := p.ReceiveDeferred(ctx, r.Req)
	return Result{Msgs: msgs}, err
}
func (r *ReceiveDeferred) appendTo(b []byte) []byte { return appendEntry(b, &r.Req) }
func (r *ReceiveDeferred) decodeFrom(d *Decoder) {
	if c := command[*fsm.ReceiveDeferred](d); c != nil {
		r.Req = *c
	}
}

// Settle settles locked messages (S-LOCK-2..7); Result.TokenErrs has one error per token.
type Settle struct{ Req fsm.Settle }

func (*Settle) Op() Op           { return OpSettle }
func (*Settle) Idempotent() bool { return true }
func (r *Settle) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	errs, err := p.Settle(ctx, r.Req)
	return Result{TokenErrs: errs}, err
}
func (r *Settle) appendTo(b []byte) []byte { return appendEntry(b, &r.Req) }
func (r *Settle) decodeFrom(d *Decoder) {
	if c := command[*fsm.Settle](d); c != nil {
		r.Req = *c
	}
}

// RenewLock renews message locks (S-LOCK-8); Result.Untils has each new expiry.
type RenewLock struct {
	Target fsm.Target
	Tokens []fsm.LockToken
}

func (*RenewLock) Op() Op           { return OpRenewLock }
func (*RenewLock) Idempotent() bool { return true }
func (r *RenewLock) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	until, err := p.RenewLock(ctx, r.Target, r.Tokens)
	return Result{Untils: until}, err
}
func (r *RenewLock) appendTo(b []byte) []byte {
	return appendTokens(appendTarget(b, r.Target), r.Tokens)
}
func (r *RenewLock) decodeFrom(d *Decoder) { r.Target, r.Tokens = d.target(), d.tokens() }

// AcceptSession locks a session (S-SES-2), long-polling up to Wait for an available one.
type AcceptSession struct {
	Req  fsm.AcceptSession
	Wait time.Duration
}

func (*AcceptSession) Op() Op           { return OpAcceptSession }
func (*AcceptSession) Idempotent() bool { return true }
func (r *AcceptSession) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	id, until, err := p.AcceptSession(ctx, r.Req, r.Wait)
	return Result{Session: id, Until: until}, err
}
func (r *AcceptSession) appendTo(b []byte) []byte {
	b = appendEntry(b, &r.Req)
	return binenc.AppendVarint(b, int64(r.Wait))
}
func (r *AcceptSession) decodeFrom(d *Decoder) {
	if c := command[*fsm.AcceptSession](d); c != nil {
		r.Req = *c
	}
	r.Wait = d.duration()
}

// SessionRef names one session and its holder.
type SessionRef struct {
	Target  fsm.Target
	Session string
	Owner   string
}

func (s *SessionRef) appendTo(b []byte) []byte {
	b = appendTarget(b, s.Target)
	b = binenc.AppendString(b, s.Session)
	return binenc.AppendString(b, s.Owner)
}

func (s *SessionRef) decodeFrom(d *Decoder) {
	s.Target, s.Session, s.Owner = d.target(), d.Str(), d.Str()
}

// ReleaseSession releases a session lock (S-SES-4).
type ReleaseSession struct{ SessionRef }

func (*ReleaseSession) Op() Op           { return OpReleaseSession }
func (*ReleaseSession) Idempotent() bool { return true }
func (r *ReleaseSession) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	return Result{}, p.ReleaseSession(ctx, r.Target, r.Session, r.Owner)
}

// RenewSession renews a session lock; Result.Until is its new expiry.
type RenewSession struct{ SessionRef }

func (*RenewSession) Op() Op           { return OpRenewSession }
func (*RenewSession) Idempotent() bool { return true }
func (r *RenewSession) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	until, err := p.RenewSession(ctx, r.Target, r.Session, r.Owner)
	return Result{Until: until}, err
}

// SetState sets or clears a session's state (S-SES-5).
type SetState struct{ Req fsm.SetSessionState }

func (*SetState) Op() Op           { return OpSetState }
func (*SetState) Idempotent() bool { return true }
func (r *SetState) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	return Result{}, p.SetSessionState(ctx, r.Req)
}
func (r *SetState) appendTo(b []byte) []byte { return appendEntry(b, &r.Req) }
func (r *SetState) decodeFrom(d *Decoder) {
	if c := command[*fsm.SetSessionState](d); c != nil {
		r.Req = *c
	}
}

// GetState reads a session's state: the holder's read when Owner is set
// (fsm.ErrSessionLockLost for anyone else), anyone's otherwise.
type GetState struct{ SessionRef }

func (*GetState) Op() Op           { return OpGetState }
func (*GetState) Idempotent() bool { return true }
func (r *GetState) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	var st []byte
	var err error
	if r.Owner != "" {
		st, err = p.HeldSessionState(ctx, r.Target, r.Session, r.Owner)
	} else {
		st, err = p.SessionState(ctx, r.Target, r.Session)
	}
	return Result{State: st}, err
}

// ListSessions lists the sessions with messages or state.
type ListSessions struct{ Target fsm.Target }

func (*ListSessions) Op() Op           { return OpListSessions }
func (*ListSessions) Idempotent() bool { return true }
func (r *ListSessions) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	ids, err := p.ListSessions(ctx, r.Target)
	return Result{Sessions: ids}, err
}
func (r *ListSessions) appendTo(b []byte) []byte { return appendTarget(b, r.Target) }
func (r *ListSessions) decodeFrom(d *Decoder)    { r.Target = d.target() }

// SessionsUpdatedSince lists the sessions whose state was set at From (Unix ms) or later.
type SessionsUpdatedSince struct {
	Target fsm.Target
	From   int64
}

func (*SessionsUpdatedSince) Op() Op           { return OpSessionsUpdatedSince }
func (*SessionsUpdatedSince) Idempotent() bool { return true }
func (r *SessionsUpdatedSince) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	ids, err := p.SessionsUpdatedSince(ctx, r.Target, r.From)
	return Result{Sessions: ids}, err
}
func (r *SessionsUpdatedSince) appendTo(b []byte) []byte {
	return binenc.AppendVarint(appendTarget(b, r.Target), r.From)
}
func (r *SessionsUpdatedSince) decodeFrom(d *Decoder) { r.Target, r.From = d.target(), d.Varint() }

// Peek browses up to Max messages from sequence number From (S-LOCK-11).
type Peek struct {
	Target fsm.Target
	From   int64
	Max    int
}

func (*Peek) Op() Op           { return OpPeek }
func (*Peek) Idempotent() bool { return true }
func (r *Peek) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	msgs, err := p.Peek(ctx, r.Target, r.From, r.Max)
	return Result{Msgs: msgs}, err
}
func (r *Peek) appendTo(b []byte) []byte {
	b = binenc.AppendVarint(appendTarget(b, r.Target), r.From)
	return binenc.AppendVarint(b, int64(r.Max))
}
func (r *Peek) decodeFrom(d *Decoder) {
	r.Target, r.From = d.target(), d.Varint()
	r.Max = int(d.Varint())
}

// DeleteMessages removes up to Req.Max messages of a target in sequence order
// (S-DEL-1..4); Result.Count is how many. Not idempotent: a repeat deletes more.
type DeleteMessages struct{ Req fsm.DeleteMessages }

func (*DeleteMessages) Op() Op           { return OpDeleteMessages }
func (*DeleteMessages) Idempotent() bool { return false }
func (r *DeleteMessages) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	n, err := p.DeleteMessages(ctx, r.Req)
	return Result{Count: int64(n)}, err
}
func (r *DeleteMessages) appendTo(b []byte) []byte { return appendEntry(b, &r.Req) }
func (r *DeleteMessages) decodeFrom(d *Decoder) {
	if c := command[*fsm.DeleteMessages](d); c != nil {
		r.Req = *c
	}
}

// Stats counts the partition's messages; Result.Stats.
type Stats struct{}

func (*Stats) Op() Op           { return OpStats }
func (*Stats) Idempotent() bool { return true }
func (*Stats) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	s, err := p.Stats(ctx)
	if err != nil {
		return Result{}, err
	}
	return Result{Stats: &s}, nil
}
func (*Stats) appendTo(b []byte) []byte { return b }
func (*Stats) decodeFrom(*Decoder)      {}

// Purge removes every message of a target; Result.Count is how many.
type Purge struct{ Target fsm.Target }

func (*Purge) Op() Op           { return OpPurge }
func (*Purge) Idempotent() bool { return false }
func (r *Purge) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	n, err := p.Purge(ctx, r.Target)
	return Result{Count: int64(n)}, err
}
func (r *Purge) appendTo(b []byte) []byte { return appendTarget(b, r.Target) }
func (r *Purge) decodeFrom(d *Decoder)    { r.Target = d.target() }

// SyncConfig makes the group's leader apply the entity configuration of its node's
// metadata as of MetaIndex or later. It needs the node's metadata, not only the
// partition: the cluster runs it (Run refuses).
type SyncConfig struct{ MetaIndex uint64 }

func (*SyncConfig) Op() Op           { return OpSyncConfig }
func (*SyncConfig) Idempotent() bool { return true }
func (*SyncConfig) Run(context.Context, *partition.Partition) (Result, error) {
	return Result{}, fmt.Errorf("%w: SyncConfig runs on the node, not on a partition", fsm.ErrBadCommand)
}
func (r *SyncConfig) appendTo(b []byte) []byte { return binenc.AppendUvarint(b, r.MetaIndex) }
func (r *SyncConfig) decodeFrom(d *Decoder)    { r.MetaIndex = d.Uvarint() }

// LockedWithSalt lists the locks that a receive with Salt took (a lost receive's
// locks are found and released on the new leader).
type LockedWithSalt struct {
	Target fsm.Target
	Salt   uint32
}

func (*LockedWithSalt) Op() Op           { return OpLockedWithSalt }
func (*LockedWithSalt) Idempotent() bool { return true }
func (r *LockedWithSalt) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	toks, err := p.LockedWithSalt(ctx, r.Target, r.Salt)
	return Result{Tokens: toks}, err
}
func (r *LockedWithSalt) appendTo(b []byte) []byte {
	return binenc.AppendUvarint(appendTarget(b, r.Target), uint64(r.Salt))
}
func (r *LockedWithSalt) decodeFrom(d *Decoder) { r.Target, r.Salt = d.target(), d.Uvarint32("uint32") }

// Txn applies a committed transaction's sends and settlements on one partition, in one
// fsm.Txn.
type Txn struct {
	Msgs    []*fsm.Message
	Settles []fsm.Settle
}

func (*Txn) Op() Op           { return OpTxn }
func (*Txn) Idempotent() bool { return false }
func (r *Txn) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	seqs, err := p.Txn(ctx, r.Msgs, r.Settles)
	return Result{Seqs: seqs}, err
}
func (r *Txn) appendTo(b []byte) []byte { return appendTxnEffects(b, r.Msgs, r.Settles) }
func (r *Txn) decodeFrom(d *Decoder)    { r.Msgs, r.Settles = d.txnEffects() }

// TxnPrepare holds a transaction's sends and settlements under ID (two-phase commit).
type TxnPrepare struct {
	ID          string
	Coordinator uint32
	Deadline    int64
	Msgs        []*fsm.Message
	Settles     []fsm.Settle
}

func (*TxnPrepare) Op() Op           { return OpTxnPrepare }
func (*TxnPrepare) Idempotent() bool { return true }
func (r *TxnPrepare) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	c := &fsm.TxnPrepare{ID: r.ID, Coordinator: r.Coordinator, Deadline: r.Deadline}
	if len(r.Msgs) > 0 {
		c.Cmds = append(c.Cmds, &fsm.Enqueue{Messages: r.Msgs})
	}
	for i := range r.Settles {
		c.Cmds = append(c.Cmds, &r.Settles[i])
	}
	return Result{}, p.TxnPrepare(ctx, c)
}
func (r *TxnPrepare) appendTo(b []byte) []byte {
	b = binenc.AppendString(b, r.ID)
	b = binenc.AppendUvarint(b, uint64(r.Coordinator))
	b = binenc.AppendVarint(b, r.Deadline)
	return appendTxnEffects(b, r.Msgs, r.Settles)
}
func (r *TxnPrepare) decodeFrom(d *Decoder) {
	r.ID, r.Coordinator, r.Deadline = d.Str(), d.Uvarint32("uint32"), d.Varint()
	r.Msgs, r.Settles = d.txnEffects()
}

// TxnDecide records the decision for ID in the coordinator group; Result.Committed is
// the decision in force (also with an error).
type TxnDecide struct {
	ID           string
	Commit       bool
	Deadline     int64
	Participants []uint32
}

func (*TxnDecide) Op() Op           { return OpTxnDecide }
func (*TxnDecide) Idempotent() bool { return true }
func (r *TxnDecide) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	committed, err := p.TxnDecide(ctx, &fsm.TxnDecide{ID: r.ID, Commit: r.Commit, Deadline: r.Deadline,
		Participants: r.Participants})
	return Result{Committed: committed}, err
}
func (r *TxnDecide) appendTo(b []byte) []byte {
	b = binenc.AppendString(b, r.ID)
	b = binenc.AppendBool(b, r.Commit)
	b = binenc.AppendVarint(b, r.Deadline)
	return appendUint32s(b, r.Participants)
}
func (r *TxnDecide) decodeFrom(d *Decoder) {
	r.ID, r.Commit, r.Deadline, r.Participants = d.Str(), d.Bool(), d.Varint(), d.uint32s()
}

// TxnComplete commits or aborts ID's held effects.
type TxnComplete struct {
	ID     string
	Commit bool
}

func (*TxnComplete) Op() Op           { return OpTxnComplete }
func (*TxnComplete) Idempotent() bool { return true }
func (r *TxnComplete) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	return Result{}, p.TxnComplete(ctx, r.ID, r.Commit)
}
func (r *TxnComplete) appendTo(b []byte) []byte {
	return binenc.AppendBool(binenc.AppendString(b, r.ID), r.Commit)
}
func (r *TxnComplete) decodeFrom(d *Decoder) { r.ID, r.Commit = d.Str(), d.Bool() }

// TxnForget drops the coordinator's record of ID.
type TxnForget struct{ ID string }

func (*TxnForget) Op() Op           { return OpTxnForget }
func (*TxnForget) Idempotent() bool { return true }
func (r *TxnForget) Run(ctx context.Context, p *partition.Partition) (Result, error) {
	return Result{}, p.TxnForget(ctx, r.ID)
}
func (r *TxnForget) appendTo(b []byte) []byte { return binenc.AppendString(b, r.ID) }
func (r *TxnForget) decodeFrom(d *Decoder)    { r.ID = d.Str() }

// appendTxnEffects writes a transaction's sends and settlements as one fsm entry.
func appendTxnEffects(b []byte, msgs []*fsm.Message, settles []fsm.Settle) []byte {
	b = appendMessages(b, msgs)
	cmds := make([]fsm.Command, len(settles))
	for i := range settles {
		cmds[i] = &settles[i]
	}
	return appendEntry(b, cmds...)
}

func (d *Decoder) txnEffects() ([]*fsm.Message, []fsm.Settle) {
	msgs := d.messages()
	cmds := d.entry()
	var settles []fsm.Settle
	for _, c := range cmds {
		s, ok := c.(*fsm.Settle)
		if !ok {
			d.Failf("command %T in a transaction's settlements", c)
			return nil, nil
		}
		settles = append(settles, *s)
	}
	return msgs, settles
}
