package amqp

import (
	"context"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// session is one AMQP session (part 2 §2.5). Owned by the conn's owner goroutine.
type session struct {
	c             *conn
	remoteChannel uint16
	localChannel  uint16

	// Incoming transfer window (part 2 §2.5.6).
	nextIncomingID uint32
	incomingWindow uint32
	// Outgoing: our transfer ids and the peer's window.
	nextOutgoingID       uint32
	remoteIncomingWindow uint32
	nextDeliveryID       uint32

	links map[uint32]*link // by handle (the peer's; ours is the same number)
	// detaching are the handles we detached whose detach the peer has not answered:
	// until it does, the peer may still send transfers and flows on them (they crossed
	// our detach on the wire), which are dropped instead of ending the session with
	// unattached-handle (part 2 §2.6.6: a handle stays in use until both ends detached).
	detaching map[uint32]struct{}
	acks      []uint32                // accepted client deliveries to confirm in ranges (flushAcks)
	unsettled map[uint32]*outDelivery // our unsettled deliveries by delivery-id
	queue     []*pendingDelivery      // deliveries waiting for session window
	// transfer is flush's scratch performative: conn.send encodes it before returning,
	// so one per session serves every outgoing transfer frame (owner goroutine).
	transfer frames.Transfer
}

func newSession(c *conn, remote, local uint16, b *frames.Begin) *session {
	s := &session{
		c: c, remoteChannel: remote, localChannel: local,
		nextIncomingID: b.NextOutgoingID,
		incomingWindow: c.cfg.SessionWindow,
		links:          map[uint32]*link{},
		unsettled:      map[uint32]*outDelivery{},
	}
	s.remoteIncomingWindow = b.IncomingWindow
	return s
}

type nodeKind uint8

const (
	nodeEntity nodeKind = iota
	nodeCBS
	nodeManagement
	nodeCoordinator // a transaction coordinator (txn.go)
)

// link is one link endpoint. role is the client's role.
type link struct {
	s      *session
	name   string
	handle uint32
	role   frames.Role
	node   nodeKind

	ctx    context.Context // canceled when the link goes away
	cancel context.CancelFunc

	attached bool
	detached bool

	addr      Address // entity links and management nodes
	via       Address // send-via links: the via entity (the attach's target); addr is the destination
	entity    EntityInfo
	trackerID string // SystemTracker for error descriptions, set at attach
	claimPath string // what CBS claims must cover: "q1/$DeadLetterQueue", "q1/$management"
	want      Rights // entity links: the right the link needs (Send or Listen)
	replyAddr string // RPC reply links: the client's target address
	rpcNode   string // RPC links: the node address as attached ("$cbs", "q1/$management")

	// Credit: for a client sender, what we granted and have not seen used;
	// for a client receiver, what the client granted (part 2 §2.6.7).
	credit        uint32
	deliveryCount uint32
	// entityCounted: the link is in its entity's Stats.Entities totals (countEntity).
	entityCounted bool
	// counted: the link is in the server's Stats; reported is the credit they hold for it.
	counted  bool
	reported uint32

	// Client sender.
	inflight       int // deliveries handed to the Backend or an RPC handler
	partial        *partial
	maxMessageSize uint64

	// Client receiver.
	mode      ReceiveMode
	settled   bool   // transfers are sent settled
	sessionID string // session receivers
	// sessionLockedUntil is when this link's session lock ends unless
	// renewed. Past it the lock may belong to another receiver (S-SES-6),
	// so the link stops receiving, settling, renewing and releasing.
	sessionLockedUntil time.Time
	unsettled          int   // our peek-lock deliveries on this link awaiting the client's outcome
	reserved           int   // Max of this link's peek-lock receive in flight (conn.recvReserved)
	outEst             int64 // bytes of this link's recent deliveries, on average (outbytes.go)
	receiving          bool
	cancelRecv         context.CancelFunc
	drain              bool
	backoff            bool
	// Link resume (resume.go): suspend is set when the link ends without being closed,
	// so dropLink remembers its deliveries; resume holds kept deliveries to resend.
	suspend bool
	resume  []resumeItem
	// owner is the ConnectionID this session link's lock is held under when the link
	// was resumed from another connection ("" for this connection's own).
	owner string
	// settling counts the batches of settlements that hold this link (a session
	// link's, or a release or abandon on any link) handed to the Backend and not yet
	// answered; no receive starts meanwhile (S-SES-3, S-RCV-2).
	settling int
	// requeued counts the client's releases and abandons on this link. A receive
	// during which it changed brought messages that now follow a requeued one:
	// they go back too, so the requeued message is delivered before them (S-RCV-2).
	requeued uint64
	// afterSettle, set when the link detached while settling > 0, releases its session
	// lock once those settlements are applied.
	afterSettle func()
}

// partial is a delivery being assembled from several transfer frames.
type partial struct {
	id        uint32
	tag       []byte
	format    uint32
	settled   bool
	buf       []byte // counted in conn.buffered while the delivery is incomplete
	oversized bool
	txnID     []byte // set when the transfer's state is transactional-state (txn.go)
	overfull  bool   // the connection's MaxConnBuffered would have been exceeded
}

// outDelivery is a delivery we sent and the client has not settled.
type outDelivery struct {
	l         *link
	token     UUID
	addr      Address
	sessionID string
	// For link resume (resume.go): the delivery tag, sequence number and lock expiry.
	tag         []byte
	seq         int64
	lockedUntil time.Time
	// uncounted: the lock expired (lockedUntil passed), so the delivery no longer
	// counts against MaxUnsettledPerLink/PerConn; it stays in the map so that a
	// late settlement still reaches the Backend.
	uncounted bool
}

type pendingDelivery struct {
	l       *link
	id      uint32
	tag     []byte
	payload []byte
	settled bool
	resume  bool // a resumed delivery (part 2 §2.6.13)
	off     int
	started bool
}

func (s *session) tracker(l *link) string {
	if l != nil && l.trackerID != "" {
		return l.trackerID
	}
	if l != nil && l.addr.Entity != "" {
		return s.c.cfg.Namespace + ":" + l.entity.Kind.String() + ":" + l.addr.String()
	}
	return s.c.cfg.Namespace
}

func (s *session) errorFor(l *link, cond, desc string) *frames.Error {
	return newError(cond, desc, s.tracker(l), s.c.now())
}
