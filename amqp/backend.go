package amqp

import (
	"context"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// AMQP value types that appear in Message.ApplicationProperties. They are
// aliases so that the Backend implementation can build and inspect values
// without importing amqp/internal. A property value is one of: nil, bool,
// uint8, uint16, uint32, uint64, int8, int16, int32, int64, float32, float64,
// Decimal32, Decimal64, Decimal128, Char, Timestamp, UUID, []byte, string,
// Symbol (and, rarely, List, Map, *Array or *Described).
type (
	Symbol     = encoding.Symbol
	Timestamp  = encoding.Timestamp
	UUID       = encoding.UUID
	Decimal32  = encoding.Decimal32
	Decimal64  = encoding.Decimal64
	Decimal128 = encoding.Decimal128
	Char       = encoding.Char
	List       = encoding.List
	Map        = encoding.Map
	Array      = encoding.Array
	Described  = encoding.Described
)

// Backend is what the broker (cluster) implements for the AMQP layer. It is
// the union of small interfaces so fakes and future splits stay easy
// (P9: the consumer, amqp, owns it). Every method may block; amqp never calls
// one on a connection's owner goroutine. Methods return the sentinel errors
// of this package (errors.go), possibly wrapped, so amqp can map them to AMQP
// conditions and RPC status codes through one table. The ctx of every call
// carries the calling connection's ConnectionID, the holder of the session
// locks it takes.
type Backend interface {
	Authenticator
	Entities
	Sender
	Receiver
	Scheduler
	Sessions
}

// Rights are the claims a shared access key grants (internal/sas, the one
// SAS implementation). Has reports whether r includes all of want; Manage
// implies Send and Listen.
type Rights = sas.Rights

// Rights bits.
const (
	RightSend   = sas.Send
	RightListen = sas.Listen
	RightManage = sas.Manage
)

// SASKey is a shared access authorization rule.
type SASKey struct {
	Name string
	// Key is the key string; its raw UTF-8 bytes are the HMAC key. A token
	// signed with SecondaryKey (when set) is valid too.
	Key          string
	SecondaryKey string
	Rights       Rights
}

// Authenticator looks up namespace-level shared access keys.
type Authenticator interface {
	// SASKey returns the key with this name, or ErrNotFound.
	SASKey(ctx context.Context, name string) (SASKey, error)
}

// EntityAuthenticator is an optional Backend capability: entity-level
// authorization rules (a queue's, topic's or subscription's
// AuthorizationRules). amqp asks it when a token's key name is not a
// namespace key; such a key authorizes only paths under that entity.
type EntityAuthenticator interface {
	// EntitySASKey returns the rule named name on the entity at path
	// ("q1", "t1", "t1/Subscriptions/s1"), or ErrNotFound.
	EntitySASKey(ctx context.Context, path, name string) (SASKey, error)
}

// EntityKind is the kind of a messaging entity.
type EntityKind uint8

// Entity kinds.
const (
	KindQueue EntityKind = iota + 1
	KindTopic
	KindSubscription
)

func (k EntityKind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindTopic:
		return "topic"
	case KindSubscription:
		return "subscription"
	}
	return "unknown"
}

// EntityInfo is what amqp needs to know about an entity at attach time.
type EntityInfo struct {
	Kind            EntityKind
	Path            string // canonical spelling: "q1", "t1", "t1/Subscriptions/s1"
	RequiresSession bool
	MaxMessageSize  uint64        // bytes; 0 means Config.MaxMessageSize
	LockDuration    time.Duration // informational
	Disabled        bool          // refuse every link (com.microsoft:entity-disabled)
}

// Entities resolves entity paths.
type Entities interface {
	// Entity looks up an entity by path ("q1", "t1", "t1/Subscriptions/s1"),
	// case-insensitively. It returns ErrNotFound for unknown entities.
	Entity(ctx context.Context, path string) (EntityInfo, error)
}

// SubQueue selects a sub-queue of a queue or subscription.
type SubQueue uint8

// Sub-queues.
const (
	SubQueueNone SubQueue = iota
	SubQueueDeadLetter
	SubQueueTransferDeadLetter
)

// Address names what a link or request talks to: an entity (canonical
// path) and, for receivers, a sub-queue.
type Address struct {
	Entity string
	Sub    SubQueue
}

func (a Address) String() string {
	switch a.Sub {
	case SubQueueDeadLetter:
		return a.Entity + "/$DeadLetterQueue"
	case SubQueueTransferDeadLetter:
		return a.Entity + "/$Transfer/$DeadLetterQueue"
	}
	return a.Entity
}

// Property is one application property. Value uses the types listed above.
type Property struct {
	Key   string
	Value any
}

// Message is a message as a client sent it. Raw is the complete encoding
// (every section as received, delivery-annotations removed) and is what the
// broker stores; the other fields are parsed from it for routing, filters,
// sessions, duplicate detection and TTL. The broker must treat Raw as
// immutable: amqp rewrites header and annotations itself on delivery.
type Message struct {
	Raw []byte

	MessageID            string // properties.message-id when it is a string ("" otherwise)
	SessionID            string // properties.group-id
	PartitionKey         string // message-annotation x-opt-partition-key
	ViaPartitionKey      string // message-annotation x-opt-via-partition-key
	CorrelationID        string // properties.correlation-id when a string
	To                   string
	ReplyTo              string
	Subject              string // a.k.a. Label
	ReplyToSessionID     string // properties.reply-to-group-id
	ContentType          string
	TimeToLive           time.Duration // header.ttl; 0 when absent
	ScheduledEnqueueTime time.Time     // x-opt-scheduled-enqueue-time; zero when absent
	// ApplicationProperties in wire order.
	ApplicationProperties []Property
}

// MessageState is the x-opt-message-state of a stored message.
type MessageState uint8

// Message states as Service Bus reports them.
const (
	StateActive    MessageState = 0
	StateDeferred  MessageState = 1
	StateScheduled MessageState = 2
)

// Delivery is a stored message as the broker hands it out (receive, peek,
// receive-deferred). amqp builds the wire message from Message.Raw plus
// these fields: it rewrites only header, delivery- and message-annotations,
// and application-properties when PropertiesModified is set or the message
// was dead-lettered.
type Delivery struct {
	Message *Message

	LockToken      UUID // zero for peek and receive-and-delete
	SequenceNumber int64
	EnqueuedTime   time.Time
	LockedUntil    time.Time // zero when not locked
	// DeliveryCount is Service Bus's count: 1 on the first delivery
	// (S-LOCK-5); for peek, the number of deliveries so far (the peek
	// answer shows an unlocked message with the count of its next delivery).
	DeliveryCount uint32
	ExpiresAt     time.Time // zero for "never"
	State         MessageState

	DeadLetterReason      string
	DeadLetterDescription string
	DeadLetterSource      string
	DeadLettered          bool // in a dead-letter sub-queue: always send the two DeadLetter* properties

	// Properties replace Message.ApplicationProperties when PropertiesModified
	// (abandon/defer/dead-letter with properties-to-modify).
	Properties         []Property
	PropertiesModified bool
}

// ReceiveMode is the receive mode of a receiver.
type ReceiveMode uint8

// Receive modes (S-RCV-1).
const (
	PeekLock ReceiveMode = iota
	ReceiveAndDelete
)

// ReceiveRequest asks for up to Max messages.
type ReceiveRequest struct {
	Address   Address
	SessionID string // set for session receivers (the session lock is held)
	Mode      ReceiveMode
	Max       int
	// Wait is how long to wait for the first message when none is
	// available; 0 means answer at once (a drain). The backend returns early
	// with what it has (possibly nothing) when ctx ends; messages it locked
	// before that are still returned, never dropped.
	Wait time.Duration
}

// Disposition is a settlement outcome.
type Disposition uint8

// Dispositions (S-LOCK-2..7, and release for credit returned unused).
const (
	Complete Disposition = iota + 1
	Abandon
	DeadLetter
	Defer
	// Release unlocks without counting a delivery attempt (S-RCV-1 releaser,
	// protocol.md §6.2).
	Release
)

func (d Disposition) String() string {
	return [...]string{"", "complete", "abandon", "dead-letter", "defer", "release"}[min(int(d), 5)]
}

// Settlement settles one locked message.
type Settlement struct {
	Address     Address
	SessionID   string
	LockToken   UUID
	Disposition Disposition
	// PropertiesToModify are merged into the application properties
	// (abandon, dead-letter, defer).
	PropertiesToModify    []Property
	DeadLetterReason      string
	DeadLetterDescription string
}

// Sender stores messages.
type Sender interface {
	// Send stores msgs atomically (a batch is all or nothing, S-SEND-5) and
	// returns once they are durable (S-SEND-1). A message with a non-zero
	// ScheduledEnqueueTime is scheduled, not made available (protocol.md §5).
	Send(ctx context.Context, entity string, msgs []*Message) error
}

// Receiver hands out and settles messages.
type Receiver interface {
	Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error)
	// Settle settles a batch of locked messages by lock token, each
	// independently (a batch only lets the broker group its writes, e.g. one
	// raft proposal per partition). It returns one error per settlement, nil
	// for success: ErrLockLost for an expired, unknown or already settled
	// lock (S-LOCK-9; protocol.md §11.9 asks for idempotence, but the
	// semantics rule wins), ErrSessionLockLost when the session lock is gone.
	Settle(ctx context.Context, s []Settlement) []error
	// RenewLock extends locks and returns the new LockedUntil of each (S-LOCK-8).
	RenewLock(ctx context.Context, addr Address, sessionID string, tokens []UUID) ([]time.Time, error)
	// Peek returns up to n messages from sequence number from without
	// locking them (S-LOCK-11), across all partitions, in sequence order.
	// sessionID restricts to one session when set.
	Peek(ctx context.Context, addr Address, sessionID string, from int64, n int) ([]*Delivery, error)
	// ReceiveDeferred receives deferred messages by sequence number (S-LOCK-7).
	ReceiveDeferred(ctx context.Context, addr Address, sessionID string, mode ReceiveMode, seqs []int64) ([]*Delivery, error)
}

// Scheduler handles the schedule-message and cancel RPCs (S-SCH-1).
type Scheduler interface {
	Schedule(ctx context.Context, entity string, msgs []*Message) ([]int64, error)
	CancelScheduled(ctx context.Context, entity string, seqs []int64) error
}

// Sessions handles message sessions (S-SES-*).
type Sessions interface {
	// AcceptSession locks a session: the named one, or when sessionID is ""
	// the next available one, waiting up to wait (ErrTimeout when none).
	// A session held elsewhere gives ErrSessionCannotBeLocked.
	AcceptSession(ctx context.Context, addr Address, sessionID string, wait time.Duration) (id string, lockedUntil time.Time, err error)
	// ReleaseSession drops the lock when the receiver link detaches
	// (locked messages are released without a delivery count, S-SES-6).
	ReleaseSession(ctx context.Context, addr Address, sessionID string) error
	RenewSessionLock(ctx context.Context, addr Address, sessionID string) (time.Time, error)
	// SessionState returns nil when no state is set (S-SES-5), and ErrSessionLockLost
	// when the calling connection does not hold the session (as Service Bus answers).
	SessionState(ctx context.Context, addr Address, sessionID string) ([]byte, error)
	// SetSessionState with nil or empty state clears it.
	SetSessionState(ctx context.Context, addr Address, sessionID string, state []byte) error
	// ListSessions lists sessions with messages or state, paged.
	ListSessions(ctx context.Context, addr Address, skip, top int) ([]string, error)
}

// ConnectionString returns the connection string an unmodified Service Bus
// SDK uses to reach a broker listening on hostPort (plain AMQP, as the
// emulator): Endpoint=sb://hostPort;SharedAccessKeyName=…;SharedAccessKey=…;UseDevelopmentEmulator=true.
func ConnectionString(hostPort string, key SASKey) string {
	return "Endpoint=sb://" + hostPort + ";SharedAccessKeyName=" + key.Name +
		";SharedAccessKey=" + key.Key + ";UseDevelopmentEmulator=true"
}

func (m ReceiveMode) String() string {
	if m == ReceiveAndDelete {
		return "receive-and-delete"
	}
	return "peek-lock"
}

func (s MessageState) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateDeferred:
		return "deferred"
	case StateScheduled:
		return "scheduled"
	}
	return "unknown"
}

func (s SubQueue) String() string {
	switch s {
	case SubQueueDeadLetter:
		return "$DeadLetterQueue"
	case SubQueueTransferDeadLetter:
		return "$Transfer/$DeadLetterQueue"
	}
	return ""
}

// SessionUpdateLister is an optional Backend capability: get-message-sessions with a
// last-updated-time lists the sessions whose state was set at that time or later. A
// Backend without it lists every session that has state (none for a time after now).
type SessionUpdateLister interface {
	// SessionsUpdatedSince lists, paged and sorted, the sessions whose state was set
	// at since or later and is still set.
	SessionsUpdatedSince(ctx context.Context, addr Address, since time.Time, skip, top int) ([]string, error)
}

// MaxDeleteCount is the most messages one com.microsoft:batch-delete-messages request may
// ask to delete (Service Bus's cap; S-DEL-2).
const MaxDeleteCount = 4000

// MessageDeleter is an optional Backend capability: com.microsoft:batch-delete-messages,
// what the SDKs' DeleteMessages and PurgeMessages send (S-DEL-*). A Backend without it
// answers that operation 501.
type MessageDeleter interface {
	// DeleteMessages removes up to n (1..MaxDeleteCount) messages of addr in sequence
	// order: those enqueued before before and not locked, of session sessionID only
	// when it is set. It returns how many it removed.
	DeleteMessages(ctx context.Context, addr Address, sessionID string, n int, before time.Time) (int, error)
}

// RuleManager is an optional Backend capability: a subscription's rules managed over
// its $management link (com.microsoft:add-rule, remove-rule, enumerate-rules, what the
// SDKs' ServiceBusRuleManager sends). A Backend without it answers those operations 501.
// The Backend validates a rule as its administration API does.
type RuleManager interface {
	// AddRule creates rule r on the subscription at path ("t1/Subscriptions/s1"). A
	// rule of that name gives ErrEntityExists, an invalid rule ErrBadRequest with the
	// reason, a missing subscription ErrNotFound.
	AddRule(ctx context.Context, subscription string, r RuleDescription) error
	// RemoveRule deletes the rule named name (case-insensitively); ErrNotFound when
	// there is none.
	RemoveRule(ctx context.Context, subscription, name string) error
	// Rules lists the subscription's rules in creation order.
	Rules(ctx context.Context, subscription string) ([]RuleDescription, error)
}

// RuleFilterKind is the kind of a rule's filter.
type RuleFilterKind uint8

// Rule filter kinds.
const (
	RuleFilterTrue RuleFilterKind = iota + 1
	RuleFilterFalse
	RuleFilterSQL
	RuleFilterCorrelation
)

// RuleFilter is a rule's filter. SQL is set for RuleFilterSQL; the correlation fields
// (each empty when not matched on) and Properties for RuleFilterCorrelation.
type RuleFilter struct {
	Kind RuleFilterKind
	SQL  string

	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Subject          string // "label" on the wire
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	Properties       []Property
}

// RuleDescription is a subscription rule: a name, a filter and an optional SQL action.
type RuleDescription struct {
	Name      string
	Filter    RuleFilter
	Action    string    // SQL rule action; "" for none
	CreatedAt time.Time // set by the Backend; zero on AddRule
}
