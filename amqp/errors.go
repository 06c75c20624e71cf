package amqp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// Sentinel errors a Backend returns (wrapped or not). amqp maps them to AMQP
// conditions and RPC status codes through errorTable, and nowhere else.
var (
	ErrNotFound              = errors.New("amqp: entity or key not found")
	ErrUnauthorized          = errors.New("amqp: unauthorized")
	ErrLockLost              = errors.New("amqp: message lock lost")
	ErrSessionLockLost       = errors.New("amqp: session lock lost")
	ErrSessionCannotBeLocked = errors.New("amqp: session cannot be locked")
	ErrQuotaExceeded         = errors.New("amqp: quota exceeded")
	ErrMessageTooLarge       = errors.New("amqp: message too large")
	ErrEntityDisabled        = errors.New("amqp: entity disabled")
	ErrTimeout               = errors.New("amqp: operation timed out")
	ErrServerBusy            = errors.New("amqp: server busy")
	ErrNotAllowed            = errors.New("amqp: operation not allowed")
	ErrMessageNotFound       = errors.New("amqp: message not found")
	ErrSessionNotFound       = errors.New("amqp: session not found")
	ErrBadRequest            = errors.New("amqp: bad request")
	ErrEntityExists          = errors.New("amqp: entity already exists")
	// ErrNotImplemented: the Backend cannot do what was asked (amqp:not-implemented),
	// e.g. a transaction spanning partitions (Transactor).
	ErrNotImplemented = errors.New("amqp: not implemented")
	// ErrTxnRolledBack: a Transactor aborted a transaction it had begun to commit
	// (amqp:transaction:rollback): nothing of it applied.
	ErrTxnRolledBack = errors.New("amqp: transaction rolled back")

	// errInvalidField: a client's frame or message has a field the server
	// refuses (amqp:invalid-field), such as too many application properties.
	errInvalidField = errors.New("amqp: invalid field")
)

// AMQP error conditions used by this package.
const (
	condInternal            = "amqp:internal-error"
	condNotFound            = "amqp:not-found"
	condUnauthorized        = "amqp:unauthorized-access"
	condNotAllowed          = "amqp:not-allowed"
	condNotImplemented      = "amqp:not-implemented"
	condResourceLimit       = "amqp:resource-limit-exceeded"
	condDecodeError         = "amqp:decode-error"
	condInvalidField        = "amqp:invalid-field"
	condFramingError        = "amqp:connection:framing-error"
	condConnectionForced    = "amqp:connection:forced"
	condWindowViolation     = "amqp:session:window-violation"
	condUnattachedHandle    = "amqp:session:unattached-handle"
	condHandleInUse         = "amqp:session:handle-in-use"
	condTransferLimit       = "amqp:link:transfer-limit-exceeded"
	condMessageSizeExceeded = "amqp:link:message-size-exceeded"
	condLinkStolen          = "amqp:link:stolen"
	condDetachForced        = "amqp:link:detach-forced"
	condLockLost            = "com.microsoft:message-lock-lost"
	condSessionLockLost     = "com.microsoft:session-lock-lost"
	condSessionCannotLock   = "com.microsoft:session-cannot-be-locked"
	condTimeout             = "com.microsoft:timeout"
	condServerBusy          = "com.microsoft:server-busy"
	condEntityDisabled      = "com.microsoft:entity-disabled"
	condDeadLetter          = "com.microsoft:dead-letter"
	condMessageNotFound     = "com.microsoft:message-not-found"
	condSessionNotFound     = "com.microsoft:session-not-found"
	condEntityExists        = "com.microsoft:entity-already-exists"
)

// errorTable is the one mapping from sentinel errors to AMQP conditions and
// RPC status codes (protocol.md §9). Order matters only for wrapped chains
// matching several sentinels: the first match wins.
var errorTable = []struct {
	err       error
	condition string
	status    int32
}{
	{ErrLockLost, condLockLost, 410},
	{ErrSessionLockLost, condSessionLockLost, 410},
	{ErrSessionCannotBeLocked, condSessionCannotLock, 409},
	{ErrNotFound, condNotFound, 404},
	{ErrMessageNotFound, condMessageNotFound, 404},
	{ErrSessionNotFound, condSessionNotFound, 404},
	{ErrUnauthorized, condUnauthorized, 401},
	{ErrQuotaExceeded, condResourceLimit, 403},
	{ErrMessageTooLarge, condMessageSizeExceeded, 413},
	{ErrEntityDisabled, condEntityDisabled, 400},
	{ErrTimeout, condTimeout, 408},
	{ErrServerBusy, condServerBusy, 503},
	{ErrNotAllowed, condNotAllowed, 400},
	{ErrBadRequest, condDecodeError, 400},
	{errInvalidField, condInvalidField, 400},
	{ErrEntityExists, condEntityExists, 409},
	{errNotImplemented, condNotImplemented, 501},
	{ErrTxnRolledBack, condTxnRollback, 409},
}

// classify returns the condition and RPC status for err.
func classify(err error) (string, int32) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.condition, e.status
		}
	}
	if errors.Is(err, errContextDone) {
		return condTimeout, 408
	}
	return condInternal, 500
}

var errContextDone = errors.New("amqp: context done")

// errNotImplemented answers an operation the Backend has no capability for.
var errNotImplemented = ErrNotImplemented

// trackingID returns a Service Bus style suffix for error descriptions:
// "TrackingId:<uuid>_G<n>, SystemTracker:<tracker>, Timestamp:<utc>", n (a gateway
// number in Service Bus, 0..31) random like the uuid.
func trackingID(tracker string, now time.Time) string {
	var u [17]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	if tracker == "" {
		tracker = "quorumbus"
	}
	return fmt.Sprintf("TrackingId:%s_G%d, SystemTracker:%s, Timestamp:%s",
		formatUUID([16]byte(u[:16])), u[16]%32, tracker, now.UTC().Format("2006-01-02T15:04:05"))
}

// lockLostText is Service Bus's description of a lost message lock; SDK tests match it.
const lockLostText = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue, or was received by a different receiver instance."

// describe builds an error description carrying a TrackingId.
func describe(err error, tracker string, now time.Time) string {
	if errors.Is(err, ErrLockLost) {
		return lockLostText + " " + trackingID(tracker, now)
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "amqp: ")
	if msg != "" {
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	return msg + ". " + trackingID(tracker, now)
}

// amqpError converts err to an AMQP error with a tracked description.
func amqpError(err error, tracker string, now time.Time) *frames.Error {
	cond, _ := classify(err)
	return &frames.Error{Condition: Symbol(cond), Description: describe(err, tracker, now)}
}

func newError(cond, desc, tracker string, now time.Time) *frames.Error {
	return &frames.Error{Condition: Symbol(cond), Description: desc + " " + trackingID(tracker, now)}
}

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func newUUID() UUID {
	var u UUID
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}
