package fsm

import "errors"

// Sentinel errors for the conditions a command can meet. Results wrap them; test them
// with errors.Is. The protocol layer maps each to an AMQP condition or RPC status.
var (
	ErrLockLost              = errors.New("fsm: lock lost")                        // S-LOCK-9
	ErrSessionLockLost       = errors.New("fsm: session lock lost")                // S-SES-6
	ErrSessionCannotBeLocked = errors.New("fsm: session cannot be locked")         // S-SES-2
	ErrNoSessionAvailable    = errors.New("fsm: no session available")             // next-available found none
	ErrQuotaExceeded         = errors.New("fsm: entity size quota exceeded")       // S-SEND-6
	ErrMessageTooLarge       = errors.New("fsm: message too large")                // S-SEND-6
	ErrSessionRequired       = errors.New("fsm: entity requires a session")        // S-SES-1
	ErrSessionNotAllowed     = errors.New("fsm: entity does not support sessions") // session op on a non-session entity
	ErrNotFound              = errors.New("fsm: not found")                        // unknown subscription, sequence number, ...
	ErrEntityDisabled        = errors.New("fsm: entity disabled")                  // S-ENT-2 Status
	ErrBadCommand            = errors.New("fsm: malformed command")                // decode errors
)
