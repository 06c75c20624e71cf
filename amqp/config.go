package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// Clock is the time source. The real clock is used when nil; any type with
// Now (such as test/fakeclock.Clock) fits.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures a Server. Pass nil to New for DefaultConfig().
type Config struct {
	// Addresses to listen on with Start, e.g. "127.0.0.1:5672".
	Addresses []string
	// ContainerID is sent in open.
	ContainerID string
	// MaxFrameSize is the largest frame accepted and advertised (>= 512).
	MaxFrameSize uint32
	// ChannelMax is the highest channel number accepted.
	ChannelMax uint16
	// IdleTimeout is advertised in open; a peer silent for longer is
	// disconnected. Zero disables the check.
	IdleTimeout time.Duration
	// HeartbeatInterval is the longest the server stays silent; it also never
	// exceeds half of the peer's advertised idle-time-out.
	HeartbeatInterval time.Duration
	// LinkCredit is the credit granted to each sending client link; it
	// bounds the messages of a link in flight to the Backend.
	LinkCredit uint32
	// MaxConnCredit bounds the credit granted plus deliveries in flight over
	// all sending links of one connection, so many links cannot multiply
	// what a client may push at the server.
	MaxConnCredit int
	// SessionWindow is the incoming window advertised per session.
	SessionWindow uint32
	// MaxMessageSize is advertised on sender links when the entity does not
	// say otherwise (bytes).
	MaxMessageSize uint64
	// MaxConnBuffered bounds the bytes of incomplete multi-frame deliveries one
	// connection may have buffered at once, over all its links (bytes). A delivery that
	// would go beyond it is refused, when its last frame arrives, with
	// amqp:resource-limit-exceeded. It must hold the largest message an entity accepts
	// (MaxMessageSizeInKilobytes up to 102,400 KB).
	MaxConnBuffered int64
	// MaxUnsettledPerLink and MaxUnsettledPerConn bound the peek-lock
	// deliveries sent to a client and not yet settled (nor their lock
	// expired), per receiving link and over all links of a connection. At the
	// bound the server sends nothing more on the link, as if its credit were
	// used up, and resumes by itself once settlements bring the count under
	// it; receive-and-delete deliveries do not count.
	MaxUnsettledPerLink int
	MaxUnsettledPerConn int
	// MaxConnOutgoing bounds the bytes held for one connection and not yet
	// written to its socket: deliveries fetched for its receivers, $management
	// and $cbs responses, and framed bytes (outbytes.go). A client that stops
	// reading makes its receivers and requests wait, not the node's memory grow.
	// One delivery or response larger than the bound still goes when nothing
	// else is queued.
	MaxConnOutgoing int64
	// MaxAppPropertiesSize bounds the encoded application-properties section
	// of a message (bytes; Service Bus allows 64 KB). A larger one is refused
	// with amqp:link:message-size-exceeded.
	MaxAppPropertiesSize int
	// MaxAppProperties bounds the application properties of a message; the
	// SDKs cannot decode more than 32,767. More are refused with
	// amqp:invalid-field.
	MaxAppProperties int
	// MaxAppPropertyDepth bounds how deeply an application property's value
	// nests lists and maps (0: primitives only).
	MaxAppPropertyDepth int
	// MaxConnections bounds the connections of this server; one more is
	// answered with a close carrying amqp:resource-limit-exceeded.
	MaxConnections int
	// MaxLinksPerConnection bounds the links of one connection over all its
	// sessions; MaxUnauthenticatedLinks bounds them while the connection has
	// no claim yet (no token put on $cbs, no SASL PLAIN login), which is
	// enough for the $cbs and $management pairs an SDK opens first.
	MaxLinksPerConnection   int
	MaxUnauthenticatedLinks int
	// UnauthenticatedTimeout closes a connection that has not authenticated
	// (put a token on $cbs or logged in with SASL PLAIN) this long after its
	// open, with amqp:unauthorized-access. Only with RequireAuth.
	UnauthenticatedTimeout time.Duration
	// AuthCheckInterval is how often a connection looks for claims that
	// expired (their links are detached with amqp:unauthorized-access) and
	// for the UnauthenticatedTimeout; ClaimRecheckInterval how often it
	// checks its claims' tokens against the current shared access rules, so
	// that removing a rule or changing its keys cuts off the links it
	// authorized within that interval.
	AuthCheckInterval    time.Duration
	ClaimRecheckInterval time.Duration
	// MaxSessions bounds sessions per connection (with ChannelMax, the
	// channel-max advertised in open); MaxLinks links per session (handle-max
	// is MaxLinks-1). A begin past the first closes the connection, an attach
	// past the second ends the session, both with amqp:resource-limit-exceeded.
	//
	// The defaults protect a node with 2 GiB: at most MaxConnections x
	// (MaxSessions sessions + MaxLinksPerConnection links), about 1 KiB each,
	// plus the connection's own buffers (docs/security.md, "Limits").
	MaxSessions int
	MaxLinks    int
	// ReceiveWait is the long-poll duration for a receiver with credit.
	ReceiveWait time.Duration
	// SessionAcceptWait is used for accept-next-session without com.microsoft:timeout.
	SessionAcceptWait time.Duration
	// WriteTimeout bounds one socket write; a peer that stops reading is dropped.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds protocol header, SASL and open.
	HandshakeTimeout time.Duration
	// RPCTimeout bounds a $management or $cbs request with no server-timeout.
	RPCTimeout time.Duration
	// MaxPendingReplies bounds responses queued for a reply address that has
	// no credit yet.
	MaxPendingReplies int
	// RequireAuth makes entity links require a CBS claim or a SASL PLAIN
	// login. With false every link is allowed (for tests only).
	RequireAuth bool
	// Namespace names this broker in SystemTracker of error descriptions.
	Namespace string
	// TxnTimeout is how long a transaction may stay open between declare and
	// discharge before it rolls back (0: 2 minutes, as Service Bus).
	TxnTimeout time.Duration
	// TxnMaxOperations bounds the operations (messages sent and messages settled)
	// of one transaction (0: 100, as Service Bus).
	TxnMaxOperations int
	Logger           *slog.Logger
	Clock            Clock
}

// DefaultConfig returns the defaults.
func DefaultConfig() *Config {
	return &Config{
		Addresses:         []string{"127.0.0.1:5672"},
		ContainerID:       "quorumbus",
		MaxFrameSize:      65536,
		ChannelMax:        255,
		IdleTimeout:       60 * time.Second,
		HeartbeatInterval: 15 * time.Second,
		LinkCredit:        1000,
		MaxConnCredit:     20000,
		SessionWindow:     5000,
		MaxMessageSize:    262144,
		MaxConnBuffered:   128 << 20,
		// 5000 is what the SDKs grant at most (azservicebus caps ReceiveMessages
		// at 5000); two such receivers per connection, about 300 bytes each on
		// the connection plus the broker's lock record (docs/security.md, "Limits").
		MaxUnsettledPerLink: 5000,
		MaxUnsettledPerConn: 10000,
		// Enough to keep a fast reader's pipe full (the writer's 4 MiB plus
		// deliveries fetched ahead); 1000 connections stalled at once hold 16 GiB
		// at worst, but each needs a client that stopped reading with credit
		// granted and messages waiting (docs/security.md, "Limits").
		MaxConnOutgoing:   16 << 20,
		MaxSessions:       256,
		MaxLinks:          500,
		ReceiveWait:       60 * time.Second,
		SessionAcceptWait: 60 * time.Second,
		WriteTimeout:      60 * time.Second,
		HandshakeTimeout:  30 * time.Second,
		RPCTimeout:        60 * time.Second,
		MaxPendingReplies: 1024,
		RequireAuth:       true,
		Namespace:         "quorumbus",
		TxnTimeout:        2 * time.Minute,
		TxnMaxOperations:  100,

		// Limits on what clients send (docs/security.md, "Limits").
		MaxAppPropertiesSize: 64 << 10,
		MaxAppProperties:     32767,
		MaxAppPropertyDepth:  8,

		MaxConnections:          1000,
		MaxLinksPerConnection:   500,
		MaxUnauthenticatedLinks: 8,
		UnauthenticatedTimeout:  60 * time.Second,
		AuthCheckInterval:       time.Second,
		ClaimRecheckInterval:    30 * time.Second,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxFrameSize < frames.MinMaxFrameSize {
		errs = append(errs, fmt.Errorf("MaxFrameSize %d < %d", c.MaxFrameSize, frames.MinMaxFrameSize))
	}
	if c.LinkCredit == 0 {
		errs = append(errs, errors.New("LinkCredit must be > 0"))
	}
	if c.MaxConnCredit < 1 {
		errs = append(errs, errors.New("MaxConnCredit must be > 0"))
	}
	if c.SessionWindow < 2 {
		errs = append(errs, errors.New("SessionWindow must be >= 2"))
	}
	if c.MaxMessageSize == 0 {
		errs = append(errs, errors.New("MaxMessageSize must be > 0"))
	}
	if c.MaxUnsettledPerLink <= 0 || c.MaxUnsettledPerConn <= 0 {
		errs = append(errs, errors.New("MaxUnsettledPerLink and MaxUnsettledPerConn must be > 0"))
	}
	if c.MaxConnOutgoing < 64<<10 {
		errs = append(errs, errors.New("MaxConnOutgoing must be >= 64 KiB"))
	}
	if c.MaxConnBuffered <= 0 {
		errs = append(errs, errors.New("MaxConnBuffered must be > 0"))
	}
	if c.HeartbeatInterval <= 0 {
		errs = append(errs, errors.New("HeartbeatInterval must be > 0"))
	}
	if c.IdleTimeout < 0 || (c.IdleTimeout > 0 && c.IdleTimeout < time.Second) {
		errs = append(errs, errors.New("IdleTimeout must be 0 or >= 1s"))
	}
	if c.MaxAppPropertiesSize <= 0 || c.MaxAppProperties <= 0 || c.MaxAppPropertyDepth < 0 {
		errs = append(errs, errors.New("MaxAppPropertiesSize and MaxAppProperties must be > 0, MaxAppPropertyDepth >= 0"))
	}
	if c.MaxConnections <= 0 || c.MaxLinksPerConnection <= 0 || c.MaxUnauthenticatedLinks <= 0 {
		errs = append(errs, errors.New("MaxConnections, MaxLinksPerConnection and MaxUnauthenticatedLinks must be > 0"))
	}
	if c.UnauthenticatedTimeout <= 0 || c.AuthCheckInterval <= 0 || c.ClaimRecheckInterval <= 0 {
		errs = append(errs, errors.New("UnauthenticatedTimeout, AuthCheckInterval and ClaimRecheckInterval must be > 0"))
	}
	if c.MaxSessions <= 0 || c.MaxLinks <= 0 || c.MaxPendingReplies <= 0 {
		errs = append(errs, errors.New("MaxSessions, MaxLinks and MaxPendingReplies must be > 0"))
	}
	if c.ReceiveWait <= 0 || c.SessionAcceptWait <= 0 || c.WriteTimeout <= 0 || c.HandshakeTimeout <= 0 || c.RPCTimeout <= 0 {
		errs = append(errs, errors.New("timeouts must be > 0"))
	}
	return errors.Join(errs...)
}

func (c *Config) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}
