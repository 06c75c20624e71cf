package fsm

import (
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// This file is the contract between the fsm and the layers above it (partition,
// cluster). Everything here is a plain value: commands carry the leader's time and any
// chosen randomness, so every replica that applies the same commands reaches the same
// state (P1 in docs/principles.md).
//
// Times are Unix milliseconds (int64) and durations are milliseconds, so that commands and
// snapshots encode compactly and exactly. NeverMs stands for "no deadline".

// NeverMs is the "no deadline" time and the "never" TTL (S-ENT-2: DefaultMessageTimeToLive
// defaults to max int64 ticks).
const NeverMs int64 = 1<<63 - 1

// EntityKind says whether a partition holds a queue or a topic (with its subscriptions).
type EntityKind uint8

// Entity kinds. Append only.
const (
	KindQueue EntityKind = iota + 1
	KindTopic
)

// Status is an entity's status (S-ENT-2).
type Status uint8

// Statuses. Append only.
const (
	StatusActive Status = iota
	StatusDisabled
	StatusSendDisabled
	StatusReceiveDisabled
)

// QueueConfig is the part of an entity's properties that governs one message store: a
// queue, or one subscription of a topic. Zero durations mean "use the S-ENT-2 default"
// only in the layers above; the fsm takes the values as given.
type QueueConfig struct {
	LockDurationMs           int64 // S-ENT-2: 5s..5m
	MaxDeliveryCount         int32 // >= 1
	DefaultTTLMs             int64 // NeverMs for "never"
	DeadLetterOnExpiration   bool
	DeadLetterOnFilterErrors bool // subscriptions: EnableDeadLetteringOnFilterEvaluationExceptions
	RequiresSession          bool
	Status                   Status
}

// SubscriptionConfig is one subscription of a topic partition.
type SubscriptionConfig struct {
	Name  string // unique within the topic, compared case-insensitively by the layers above
	Queue QueueConfig
	Rules []rule.Spec // evaluated in order; a message enters if any rule matches
}

// Config is the replicated configuration of one entity partition. It arrives through
// New and the UpdateEntity command.
type Config struct {
	Kind    EntityKind
	GroupID uint32 // identifies this partition cluster-wide; the first 4 bytes of every lock token

	// Queue holds the queue's settings for KindQueue, and for KindTopic the topic's own
	// DefaultTTLMs and Status (its other fields are unused).
	Queue QueueConfig

	RequiresDuplicateDetection bool
	DuplicateWindowMs          int64 // S-DUP-1: 20s..7d
	MaxSizeBytes               int64 // S-SEND-6 quota for this partition; 0 = unlimited
	MaxMessageSizeBytes        int64 // S-SEND-6; 0 = unlimited

	Subscriptions []SubscriptionConfig // KindTopic only
}

// Message is a message as the broker stores it. The layers above fill Properties and
// Payload at send; the fsm fills the broker-owned fields.
//
// Payload is the encoded bare message, opaque to the fsm: the protocol layer writes it and
// reads it back. When Modified is set, an action, an abandon or a dead-letter changed
// Properties after the message was sent, and the protocol layer must re-encode the
// properties and application-properties sections from Properties on delivery.
type Message struct {
	rule.Properties
	Payload []byte
	// Spilled is set instead of Payload on a stored message whose body the partition's
	// Bodies store moved out of memory (SetBodies); Body reads either.
	Spilled Spilled

	// Broker-owned.
	ExpiresAt     int64 // Unix ms; NeverMs when it never expires
	DeliveryCount int32 // S-LOCK-5: 0 until first delivery
	State         MessageState
	LockToken     LockToken
	LockedUntil   int64           // Unix ms; 0 when not locked; for a session message, the session lock's
	DeadLetter    *DeadLetterInfo // set while the message is in a dead-letter sub-queue
	Modified      bool
}

// Body returns the message's payload, reading it back when it was spilled.
func (m *Message) Body() ([]byte, error) {
	if m.Spilled != nil {
		return m.Spilled.Read()
	}
	return m.Payload, nil
}

// A Spilled body is a message body a Bodies store moved out of memory. The fsm keeps it in
// place of the payload, hands it back in Message.Spilled, and reads it only to write a
// snapshot. It must stay readable for as long as it is reachable.
type Spilled interface {
	Len() int
	Read() ([]byte, error)
}

// Bodies decides where the bodies of stored messages live; the partition supplies it
// (SetBodies), so the fsm does no I/O itself. Spill is offered each body as a message is
// stored (once for all of a topic's copies) and returns nil to keep it in memory. Where
// a body lives changes nothing the fsm decides: replicas may spill differently and still
// have equal state (Digest reads spilled bodies back).
type Bodies interface {
	Spill(p []byte) Spilled
}

// DeadLetterInfo records why a message is in a dead-letter sub-queue (S-LOCK-6).
type DeadLetterInfo struct {
	Reason      string
	Description string
	Source      string // the entity a forwarded message came from; empty otherwise
}

// MessageState is where a message stands in its store.
type MessageState uint8

// Message states. Append only.
const (
	StateActive MessageState = iota
	StateDeferred
	StateScheduled
)

func (s MessageState) String() string {
	switch s {
	case StateActive:
		return "Active"
	case StateDeferred:
		return "Deferred"
	case StateScheduled:
		return "Scheduled"
	}
	return "MessageState(?)"
}

// LockToken identifies one lock on one message: bytes 0..3 are the partition's GroupID
// (big-endian) so any node can route a settlement (S-LOCK-10), bytes 4..7 come from
// the receiving command's Salt, bytes 8..15 are the fsm's lock counter (big-endian), so
// tokens are unique within a partition forever.
type LockToken [16]byte

// Target names one message store inside a partition: the queue itself (Sub == ""), or a
// subscription of the topic, optionally its dead-letter sub-queue.
type Target struct {
	Sub string
	DLQ bool
}

// ReceiveMode is how a receive takes messages (S-RCV-1).
type ReceiveMode uint8

// Receive modes. Append only.
const (
	PeekLock ReceiveMode = iota
	ReceiveAndDelete
)

// Disposition is how a locked message is settled.
type Disposition uint8

// Dispositions. Append only.
const (
	Complete   Disposition = iota + 1 // S-LOCK-2
	Abandon                           // S-LOCK-3
	DeadLetter                        // S-LOCK-6
	Defer                             // S-LOCK-7
	Release                           // the client released an unsettled delivery: unlock, DeliveryCount unchanged
)

// Command is one replicated operation. Every command is applied by Apply at the time Now
// of the Entry that carries it.
type Command interface {
	op() Op
	// activity is what the command counts as for auto-delete on idle (S-IDLE-1), and on
	// which target for receiver activity.
	activity() (activity, Target)
}

// activity is the kind of use S-IDLE-1 counts and AccessedAt reports. Entity updates
// are not activity here: the metadata records them (UpdatedAt), and Service Bus does
// not count them as an access.
type activity uint8

const (
	noActivity      activity = iota
	sendActivity             // sends and schedules
	receiveActivity          // receives, settlements, lock and session operations on a target
)

// Op identifies a command kind on the wire. Append only ("ONLY ADD TO THE END").
type Op uint8

// Command opcodes.
const (
	OpEnqueue Op = iota + 1
	OpReceive
	OpReceiveDeferred
	OpSettle
	OpRenewLock
	OpAcceptSession
	OpReleaseSession
	OpRenewSession
	OpSetSessionState
	OpSchedule
	OpCancelScheduled
	OpTick
	OpUpdateEntity
	OpPurge
	OpTouch
	OpTxn        // a committed transaction's operations, all-or-nothing (txn.go)
	OpTxnPrepare // two-phase commit across partition groups (txn2pc.go)
	OpTxnDecide
	OpTxnCommit
	OpTxnAbort
	OpTxnForget
	OpBodyChunk       // a chunk of a large body (upload.go)
	OpEnqueueUploaded // Enqueue or Schedule of messages whose bodies came as chunks
	OpDeleteMessages  // batch delete (com.microsoft:batch-delete-messages, delete.go)
)

// Entry is the unit the partition layer replicates: the leader's time and a batch of
// commands (group commit). Apply returns one Result per command, in order.
type Entry struct {
	Now  int64 // leader wall clock, Unix ms; the fsm uses max(previous, Now)
	Cmds []Command
}

// Enqueue stores a batch of messages all-or-nothing (S-SEND-5). For a topic, each message
// fans out to every subscription whose rules match (S-TOP-1). Messages with
// ScheduledEnqueueTime in the future are stored as scheduled (S-SCH-1).
type Enqueue struct {
	Messages []*Message
}

// Receive takes up to Max messages from a target (S-RCV-*, S-LOCK-1). With SessionID set
// it receives from that session, which the same Owner must hold (S-SES-2); on a session
// entity a receive without a session fails. Salt fills bytes 4..7 of the lock tokens.
type Receive struct {
	Target    Target
	Mode      ReceiveMode
	Max       int32
	SessionID string
	Owner     string // session lock holder (the AMQP connection's identity); ignored without SessionID
	Salt      uint32
}

// ReceiveDeferred locks (or, in ReceiveAndDelete, removes) deferred messages by sequence
// number (S-LOCK-7).
type ReceiveDeferred struct {
	Target    Target
	Mode      ReceiveMode
	SeqNos    []int64
	SessionID string
	Owner     string
	Salt      uint32
}

// Settle settles locked messages by token (S-LOCK-2..7, S-LOCK-9). Properties are merged
// into the message's application properties (abandon, defer, dead-letter). DeadLetter
// carries reason and description for Disposition DeadLetter.
type Settle struct {
	Target      Target
	Tokens      []LockToken
	Disposition Disposition
	Properties  []rule.Property
	Reason      string
	Description string
	SessionID   string // for session entities: the settler's session
	Owner       string
}

// RenewLock extends locks to now + LockDuration (S-LOCK-8).
type RenewLock struct {
	Target Target
	Tokens []LockToken
}

// AcceptSession locks a session for Owner (S-SES-2). An empty SessionID means "the next
// available session": the one with available messages and the lowest sequence number.
// Owner identifies the holder (the broker uses the AMQP connection's identity); every
// later session-scoped command must present the same Owner, an empty Owner matching any.
type AcceptSession struct {
	Target    Target
	SessionID string
	Owner     string
}

// ReleaseSession releases a session lock when its receiver closes (S-SES-4, S-SES-6:
// locked messages are unlocked without incrementing their delivery count).
type ReleaseSession struct {
	Target    Target
	SessionID string
	Owner     string
}

// RenewSession renews a session lock (S-SES-4).
type RenewSession struct {
	Target    Target
	SessionID string
	Owner     string
}

// SetSessionState sets or (with a nil or empty State) clears a session's state (S-SES-5).
type SetSessionState struct {
	Target    Target
	SessionID string
	Owner     string // the holder; may be empty for operator paths, which then need no session lock
	State     []byte
}

// Schedule stores messages to be activated at their ScheduledEnqueueTime (S-SCH-1);
// it returns their sequence numbers. It is applied exactly like Enqueue (a time not in
// the future activates the message at once); the separate opcode records intent.
type Schedule struct {
	Messages []*Message
}

// CancelScheduled removes scheduled messages by sequence number (S-SCH-1).
type CancelScheduled struct {
	SeqNos []int64
}

// Tick applies every deadline at or before the entry's Now: lock expiry, message expiry,
// scheduled activation, duplicate-history pruning and session lock expiry.
type Tick struct{}

// UpdateEntity replaces the partition's configuration; it releases every message lock
// (S-ENT-3).
type UpdateEntity struct {
	Config Config
}

// Purge removes every message of a target (operator action; qbctl dlq purge).
type Purge struct {
	Target Target
}

// DeleteMessages removes up to Max messages of a target in sequence order, those
// enqueued before Before (Unix ms) and not locked, of session SessionID only when it is
// set (S-DEL-1..4; com.microsoft:batch-delete-messages). The scan starts at sequence
// number From and looks at a bounded number of messages: Result.Count is how many it
// removed, Result.Next (when not 0) where a scan cut short goes on.
type DeleteMessages struct {
	Target    Target
	Max       int32 // 1..MaxDeleteCount
	Before    int64
	SessionID string
	From      int64
}

// Touch records receiver activity on a target without changing a message: the
// partition proposes it for peeks, which are reads, so that they count toward S-IDLE-1.
type Touch struct {
	Target Target
}

func (*Enqueue) op() Op         { return OpEnqueue }
func (*Receive) op() Op         { return OpReceive }
func (*ReceiveDeferred) op() Op { return OpReceiveDeferred }
func (*Settle) op() Op          { return OpSettle }
func (*RenewLock) op() Op       { return OpRenewLock }
func (*AcceptSession) op() Op   { return OpAcceptSession }
func (*ReleaseSession) op() Op  { return OpReleaseSession }
func (*RenewSession) op() Op    { return OpRenewSession }
func (*SetSessionState) op() Op { return OpSetSessionState }
func (*Schedule) op() Op        { return OpSchedule }
func (*CancelScheduled) op() Op { return OpCancelScheduled }
func (*Tick) op() Op            { return OpTick }
func (*UpdateEntity) op() Op    { return OpUpdateEntity }
func (*Purge) op() Op           { return OpPurge }
func (*Touch) op() Op           { return OpTouch }
func (*DeleteMessages) op() Op  { return OpDeleteMessages }

func (*Enqueue) activity() (activity, Target)         { return sendActivity, Target{} }
func (*Schedule) activity() (activity, Target)        { return sendActivity, Target{} }
func (*CancelScheduled) activity() (activity, Target) { return sendActivity, Target{} }
func (*UpdateEntity) activity() (activity, Target)    { return noActivity, Target{} }
func (c *Receive) activity() (activity, Target)       { return receiveActivity, c.Target }
func (c *ReceiveDeferred) activity() (activity, Target) {
	return receiveActivity, c.Target
}
func (c *Settle) activity() (activity, Target)         { return receiveActivity, c.Target }
func (c *RenewLock) activity() (activity, Target)      { return receiveActivity, c.Target }
func (c *AcceptSession) activity() (activity, Target)  { return receiveActivity, c.Target }
func (c *ReleaseSession) activity() (activity, Target) { return receiveActivity, c.Target }
func (c *RenewSession) activity() (activity, Target)   { return receiveActivity, c.Target }
func (c *SetSessionState) activity() (activity, Target) {
	return receiveActivity, c.Target
}
func (*Tick) activity() (activity, Target)    { return noActivity, Target{} }
func (*Purge) activity() (activity, Target)   { return noActivity, Target{} }
func (c *Touch) activity() (activity, Target) { return receiveActivity, c.Target }
func (c *DeleteMessages) activity() (activity, Target) {
	return receiveActivity, c.Target
}

// Result is the outcome of one command. Err is nil or wraps one of the sentinel errors in
// errors.go; the other fields are filled as the command kind needs:
//   - Enqueue, Schedule: SeqNos (one per message, in order; for a duplicate, the
//     sequence number of the original, or 0 if unknown); Duplicates counts S-DUP-1 drops.
//   - Receive, ReceiveDeferred: Messages (copies, safe to use after Apply returns).
//   - Settle, RenewLock: LockedUntil (one per token for RenewLock); per-token errors in
//     TokenErrs when several tokens are settled at once.
//   - AcceptSession, RenewSession: SessionID (the session locked) and LockedUntil[0].
//   - SetSessionState: nothing.
//   - Purge: Count (messages removed).
//   - DeleteMessages: Count (messages removed), Next (where a scan cut short goes on; 0
//     when it finished).
//
// For Settle and RenewLock, Err is the first token's error (or the command's), and when
// several tokens are given TokenErrs has one entry per token.
type Result struct {
	Err         error
	SeqNos      []int64
	Duplicates  int
	Messages    []*Message
	LockedUntil []int64
	TokenErrs   []error
	SessionID   string
	Count       int
	Committed   bool // TxnDecide: the decision in force
	Next        int64
}

// The FSM type (fsm.go, snapshot.go) offers, and the layers above rely on, exactly
// these:
//
//	func New(cfg Config) *FSM
//	func (f *FSM) Apply(e *Entry) []Result             // one Result per e.Cmds, in order
//	func (f *FSM) Now() int64                           // max Now applied so far (leader clocks never go back)
//	func (f *FSM) NextDeadline() int64                  // earliest pending deadline, NeverMs if none
//	func (f *FSM) Config() Config
//	func (f *FSM) Peek(t Target, fromSeq int64, max int) []*Message   // S-LOCK-11, copies
//	func (f *FSM) Receivable(req Receive) bool                        // conservative: could req return a message now?
//	func (f *FSM) SessionAvailable(t Target) bool                     // conservative: could a next-available accept lock one now?
//	func (f *FSM) SessionState(t Target, sessionID string) []byte     // nil when none (S-SES-5)
//	func (f *FSM) HeldSessionState(t Target, sessionID, owner string) ([]byte, error) // for the lock holder only
//	func (f *FSM) ListSessions(t Target) []string                     // sessions with messages or state
//	func (f *FSM) SessionsUpdatedSince(t Target, since int64) []string // sessions whose state was set at since or later
//	func (f *FSM) Get(t Target, seq int64) *Message                   // one message by sequence number, a copy; nil if none
//	func (f *FSM) Session(t Target, sessionID string) (SessionInfo, bool) // a session's lock holder and LockedUntil
//	func (f *FSM) Stats() Stats                                       // counts per target
//	func (f *FSM) Snapshot(w io.Writer) error       // deterministic, versioned, checksummed
//	func (f *FSM) Freeze() *Frozen                  // point-in-time image; its WriteTo writes Snapshot's bytes later, off the apply loop
//	func (f *FSM) Restore(r io.Reader) error        // replaces the whole state
//	func (f *FSM) Digest() [32]byte                 // SHA-256 of Snapshot's bytes
//
//	func AppendEntry(dst []byte, e *Entry) []byte   // versioned binary encoding (version byte first)
//	func DecodeEntry(b []byte) (*Entry, error)      // never panics; ErrBadCommand on bad input
//
// FSM is not safe for concurrent use: one goroutine (raft's apply loop) owns it, and
// queries run on that goroutine or under the caller's lock.
