package amqp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
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

	links     map[uint32]*link        // by handle (the peer's; ours is the same number)
	acks      []uint32                // accepted client deliveries to confirm in ranges (flushAcks)
	unsettled map[uint32]*outDelivery // our unsettled deliveries by delivery-id
	queue     []*pendingDelivery      // deliveries waiting for session window
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
	entity    EntityInfo
	trackerID string // SystemTracker for error descriptions, set at attach
	claimPath string // what CBS claims must cover: "q1/$DeadLetterQueue", "q1/$management"
	replyAddr string // RPC reply links: the client's target address

	// Credit: for a client sender, what we granted and have not seen used;
	// for a client receiver, what the client granted (part 2 §2.6.7).
	credit        uint32
	deliveryCount uint32

	// Client sender.
	rcvSecond      bool // rcv-settle-mode second: we confirm unsettled, the client settles (part 2 §2.8.3)
	inflight       int  // deliveries handed to the Backend or an RPC handler
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
	unsettled          int // our peek-lock deliveries on this link awaiting the client's outcome
	receiving          bool
	cancelRecv         context.CancelFunc
	drain              bool
	backoff            bool
}

// partial is a delivery being assembled from several transfer frames.
type partial struct {
	id        uint32
	tag       []byte
	format    uint32
	settled   bool
	buf       []byte
	oversized bool
}

// outDelivery is a delivery we sent and the client has not settled.
type outDelivery struct {
	l         *link
	token     UUID
	addr      Address
	sessionID string
}

type pendingDelivery struct {
	l       *link
	id      uint32
	tag     []byte
	payload []byte
	settled bool
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

// ---- attach / detach ----

func (s *session) handleAttach(a *frames.Attach) error {
	c := s.c
	if s.links[a.Handle] != nil {
		return &sessionError{s.errorFor(nil, condHandleInUse, fmt.Sprintf("handle %d is in use", a.Handle))}
	}
	if len(s.links) >= c.cfg.MaxLinks || a.Handle >= uint32(c.cfg.MaxLinks) {
		return &sessionError{s.errorFor(nil, condResourceLimit, "too many links")}
	}
	l := &link{s: s, name: a.Name, handle: a.Handle, role: a.Role}
	l.rcvSecond = a.Role == frames.RoleSender && a.RcvSettleMode != nil && *a.RcvSettleMode == frames.RcvSecond
	l.ctx, l.cancel = context.WithCancel(c.ctx)
	s.links[a.Handle] = l
	// Link stealing (part 2 §2.6.1): a new attach with the name of a live
	// link takes over; the old one is detached with amqp:link:stolen.
	key := linkKey{a.Name, a.Role}
	if old := c.linksByName[key]; old != nil {
		old.s.detachLink(old, old.s.errorFor(old, condLinkStolen, "link stolen by a new attach with the same name"))
	}
	c.linksByName[key] = l

	var address string
	if a.Role == frames.RoleSender {
		if a.Target == nil {
			s.refuse(l, a, s.errorFor(nil, condInvalidField, "attach without a target"))
			return nil
		}
		address = a.Target.Address
	} else {
		if a.Source == nil {
			s.refuse(l, a, s.errorFor(nil, condInvalidField, "attach without a source"))
			return nil
		}
		address = a.Source.Address
	}
	lower := strings.ToLower(address)
	switch {
	case lower == "$cbs":
		l.node = nodeCBS
		s.attachRPC(l, a)
	case lower == "$management" || strings.HasSuffix(lower, "/$management"):
		l.node = nodeManagement
		path := address[:len(address)-len("$management")]
		path = strings.TrimSuffix(path, "/")
		ent, sub := parseEntityPath(path)
		l.addr = Address{Entity: ent, Sub: sub}
		// Claims are checked on the full path: a dead-letter queue's token covers
		// "<entity>/$DeadLetterQueue", not the entity itself.
		l.claimPath = l.addr.String() + "/$management"
		if ent != "" && !c.hasClaim(l.claimPath, RightListen) && !c.hasClaim(l.claimPath, RightSend) {
			s.refuse(l, a, s.errorFor(l, condUnauthorized, fmt.Sprintf("Unauthorized access. 'Listen' claim(s) are required to perform this operation. Resource: '%s'.", address)))
			return nil
		}
		s.attachRPC(l, a)
	default:
		s.attachEntity(l, a, address)
	}
	return nil
}

// refuse answers an attach with a null terminus and a closing detach
// carrying e (the way Service Bus refuses links, protocol.md §3, §8).
func (s *session) refuse(l *link, a *frames.Attach, e *frames.Error) {
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode}
	if a.Role == frames.RoleSender {
		reply.Source = a.Source
	} else {
		reply.Target = a.Target
		zero := uint32(0)
		reply.InitialDeliveryCount = &zero
	}
	s.c.send(s.localChannel, reply, nil)
	s.detachLink(l, e)
}

// detachLink detaches l from our side with an error.
func (s *session) detachLink(l *link, e *frames.Error) {
	if l.detached {
		return
	}
	if e != nil { // every refusal is visible at the default level
		s.c.log.Info("amqp: detaching link with an error", "link", l.name,
			"address", l.addr.String(), "condition", string(e.Condition), "description", e.Description)
	}
	s.c.send(s.localChannel, &frames.Detach{Handle: l.handle, Closed: true, Error: e}, nil)
	if release := s.dropLink(l, true); release != nil {
		s.c.goFunc(release)
	}
}

func (s *session) handleDetach(d *frames.Detach) {
	l := s.links[d.Handle]
	if l == nil {
		return // the answer to our own detach
	}
	reply := &frames.Detach{Handle: d.Handle, Closed: d.Closed}
	release := s.dropLink(l, true)
	if release == nil {
		s.c.send(s.localChannel, reply, nil)
		return
	}
	// A session receiver's close returns only once its session lock is released
	// (S-SES-4), so a client that closes and accepts the session again, here or from
	// another connection, does not race the release.
	c := s.c
	c.goFunc(func() {
		release()
		c.post(func() {
			if c.sessions[s.remoteChannel] == s { // not ended meanwhile
				c.send(s.localChannel, reply, nil)
			}
		})
	})
}

// dropLink forgets l. explicit is false when the whole connection is going. When l held
// a session lock, it returns the function that releases it (to run off the owner
// goroutine); the caller decides whether to wait for it.
func (s *session) dropLink(l *link, explicit bool) (release func()) {
	if l.detached {
		return nil
	}
	c := s.c
	l.detached = true
	l.cancel()
	if l.role == frames.RoleSender { // unused credit returns to the pool
		c.connCredit -= int(l.credit)
		if l.partial != nil {
			c.connCredit--
		}
		l.credit, l.partial = 0, nil
	}
	if s.links[l.handle] == l {
		delete(s.links, l.handle)
	}
	key := linkKey{l.name, l.role}
	if c.linksByName[key] == l {
		delete(c.linksByName, key)
	}
	if l.replyAddr != "" && c.replyLinks[l.replyAddr] == l {
		delete(c.replyLinks, l.replyAddr)
		delete(c.pendingReplies, l.replyAddr)
	}
	for id, od := range s.unsettled {
		if od.l == l {
			delete(s.unsettled, id) // the lock stays until it expires or is settled by token
		}
	}
	l.unsettled = 0
	if explicit && l.sessionID != "" && l.attached && c.sessionLockHeld(l) {
		addr, id := l.addr, l.sessionID
		return func() {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
			defer cancel()
			_ = c.b.ReleaseSession(ctx, addr, id)
		}
	}
	return nil
}

// attachRPC attaches either side of a $cbs or $management request/response pair.
func (s *session) attachRPC(l *link, a *frames.Attach) {
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode, Source: a.Source, Target: a.Target}
	if a.Role == frames.RoleReceiver {
		// The reply address is the target address; the JavaScript SDK attaches its
		// $cbs reply link with no target and uses the link name as its reply-to, which
		// Service Bus accepts.
		l.replyAddr = a.Name
		if a.Target != nil && a.Target.Address != "" {
			l.replyAddr = a.Target.Address
		}
		if l.replyAddr == "" {
			s.refuse(l, a, s.errorFor(l, condInvalidField, "a reply link needs a target address or a link name"))
			return
		}
		zero := uint32(0)
		reply.InitialDeliveryCount = &zero
		l.settled = true
		if old := s.c.replyLinks[l.replyAddr]; old != nil && old != l {
			old.s.detachLink(old, old.s.errorFor(old, condLinkStolen, "reply address reused"))
		}
		s.c.replyLinks[l.replyAddr] = l
		l.attached = true
		s.c.send(s.localChannel, reply, nil)
		return
	}
	reply.MaxMessageSize = s.c.cfg.MaxMessageSize
	l.maxMessageSize = s.c.cfg.MaxMessageSize
	l.attached = true
	s.c.send(s.localChannel, reply, nil)
	s.topUp(l) // initial credit
}

const sessionFilterKey = "com.microsoft:session-filter"

// sessionFilterCode is the descriptor of the session filter value (session_receiver.go).
const sessionFilterCode = uint64(0x00000137000000C)

// attachEntity attaches a sender to or receiver from a queue, topic or
// subscription. Lookups and session locking run off the owner goroutine.
func (s *session) attachEntity(l *link, a *frames.Attach, address string) {
	c := s.c
	ent, sub := parseEntityPath(address)
	l.addr = Address{Entity: ent, Sub: sub}
	if ent == "" {
		s.refuse(l, a, s.errorFor(l, condNotFound, fmt.Sprintf("The messaging entity '%s' could not be found.", address)))
		return
	}
	want, claimName := RightListen, "Listen"
	if a.Role == frames.RoleSender {
		want, claimName = RightSend, "Send"
	}
	// The claim must cover the whole address: the SDK scopes a dead-letter receiver's token
	// to "<entity>/$DeadLetterQueue", and a claim on the entity covers it by prefix.
	l.claimPath = l.addr.String() // scheme and host dropped, sub-queue kept
	if !c.hasClaim(l.claimPath, want) {
		s.refuse(l, a, s.errorFor(l, condUnauthorized, fmt.Sprintf("Unauthorized access. '%s' claim(s) are required to perform this operation. Resource: 'sb://%s/%s'.", claimName, c.hostname, address)))
		return
	}
	sessionful := false
	var wantSession string
	if a.Role == frames.RoleReceiver && a.Source != nil {
		if v, ok := a.Source.Filter.GetString(sessionFilterKey); ok {
			sessionful = true
			if d, ok := v.(*Described); ok {
				v = d.Value
			}
			if id, ok := v.(string); ok { // null asks for the next available session
				wantSession = internalSessionID(id)
			}
		}
	}
	wait := c.cfg.SessionAcceptWait
	if v, ok := a.Properties.GetString("com.microsoft:timeout"); ok {
		if ms, ok := toInt64(v); ok && ms >= 0 {
			wait = time.Duration(ms) * time.Millisecond
		}
	}
	ctx := l.ctx
	c.goFunc(func() {
		info, err := c.b.Entity(ctx, ent)
		var id string
		var lockedUntil time.Time
		if err == nil {
			err = checkAttach(info, a.Role, sub, sessionful)
		}
		if err == nil && sessionful {
			addr := Address{Entity: info.Path, Sub: sub}
			id, lockedUntil, err = c.b.AcceptSession(ctx, addr, wantSession, wait)
		}
		c.post(func() { s.finishEntityAttach(l, a, info, id, lockedUntil, err) })
	})
}

// checkAttach validates the entity kind against the link direction.
func checkAttach(info EntityInfo, role frames.Role, sub SubQueue, sessionful bool) error {
	if info.Disabled {
		return ErrEntityDisabled
	}
	if role == frames.RoleSender {
		if info.Kind == KindSubscription || sub != SubQueueNone {
			return fmt.Errorf("%w: cannot send to a subscription or sub-queue", ErrNotAllowed)
		}
		return nil
	}
	if info.Kind == KindTopic {
		return fmt.Errorf("%w: cannot receive from a topic; receive from a subscription", ErrNotAllowed)
	}
	if sub == SubQueueNone && info.RequiresSession && !sessionful {
		return errNonSessionReceiver
	}
	if sessionful && !info.RequiresSession {
		return fmt.Errorf("%w: it is not possible for an entity that does not require sessions to create a sessionful message receiver", ErrNotAllowed)
	}
	return nil
}

var errNonSessionReceiver = fmt.Errorf("%w: It is not possible for an entity that requires sessions to create a non-sessionful message receiver", ErrNotAllowed)

func (s *session) finishEntityAttach(l *link, a *frames.Attach, info EntityInfo, sessionID string, lockedUntil time.Time, err error) {
	c := s.c
	if l.detached {
		if err == nil && sessionID != "" {
			addr := Address{Entity: info.Path, Sub: l.addr.Sub}
			c.goFunc(func() {
				ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
				defer cancel()
				_ = c.b.ReleaseSession(ctx, addr, sessionID)
			})
		}
		return
	}
	if err == nil && sessionID != "" {
		// Session locks are held per connection (ConnectionID), so the Backend gives a
		// session this connection already holds to a second receiver link of it as well.
		// Service Bus lets one receiver hold a session (S-SES-2), also within one
		// connection (the SDK's TestSessionReceiver_acceptSessionButAlreadyLocked). The
		// lock stays with the first link: nothing is released here.
		if h := c.sessionHolder(Address{Entity: info.Path, Sub: l.addr.Sub}, sessionID); h != nil && h != l && c.sessionLockHeld(h) {
			l.entity = info
			s.refuse(l, a, amqpError(fmt.Errorf("%w: the session '%s' is held by another receiver of this connection",
				ErrSessionCannotBeLocked, wireSessionID(sessionID)), s.tracker(l), c.now()))
			return
		}
	}
	if err != nil {
		l.entity = info
		var e *frames.Error
		switch {
		case errors.Is(err, errNonSessionReceiver):
			e = s.errorFor(l, condNotAllowed, "It is not possible for an entity that requires sessions to create a non-sessionful message receiver.")
		case errors.Is(err, ErrNotFound):
			e = s.errorFor(l, condNotFound, fmt.Sprintf("The messaging entity 'sb://%s/%s' could not be found.", c.hostname, l.addr))
		case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			e = s.errorFor(l, condTimeout, "The operation did not complete within the allotted timeout; no session is available.")
		default:
			e = amqpError(err, s.tracker(l), c.now())
		}
		s.refuse(l, a, e)
		return
	}
	l.entity = info
	l.addr.Entity = info.Path
	l.trackerID = s.tracker(l)
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode, Source: a.Source, Target: a.Target}
	if a.Role == frames.RoleSender {
		mms := info.MaxMessageSize
		if mms == 0 {
			mms = c.cfg.MaxMessageSize
		}
		l.maxMessageSize = mms
		reply.MaxMessageSize = mms
		if reply.Source == nil {
			reply.Source = &frames.Source{}
		}
		l.attached = true
		c.send(s.localChannel, reply, nil)
		s.topUp(l) // initial credit
		return
	}
	zero := uint32(0)
	reply.InitialDeliveryCount = &zero
	if a.Target == nil {
		reply.Target = &frames.Target{}
	}
	if a.SndSettleMode != nil && *a.SndSettleMode == frames.SndSettled {
		l.mode, l.settled = ReceiveAndDelete, true
	}
	if sessionID != "" {
		l.sessionID = sessionID
		l.sessionLockedUntil = lockedUntil
		src := *a.Source
		src.Filter = append(Map(nil), a.Source.Filter...)
		// Echo the accepted session id in the form the client used: described for the
		// Go and .NET SDKs, a plain string for the JavaScript SDK, which compares the
		// echoed value with its session id.
		var echo any = wireSessionID(sessionID)
		if v, _ := a.Source.Filter.GetString(sessionFilterKey); v != nil {
			if _, ok := v.(*Described); ok {
				echo = &Described{Descriptor: sessionFilterCode, Value: wireSessionID(sessionID)}
			}
		}
		src.Filter.Set(Symbol(sessionFilterKey), echo)
		reply.Source = &src
		reply.Properties = Map{{Key: Symbol("com.microsoft:locked-until-utc"), Value: dotnetTicks(lockedUntil)}}
	}
	l.attached = true
	c.send(s.localChannel, reply, nil)
	s.pump(l)
}

// dotnetTicks converts t to .NET ticks (100 ns since 0001-01-01).
func dotnetTicks(t time.Time) int64 {
	return t.UnixMilli()*10000 + 621355968000000000
}

// parseEntityPath splits "q/$DeadLetterQueue", "t/Subscriptions/s" and so on
// into the entity path and sub-queue. Scheme and host prefixes are dropped.
func parseEntityPath(address string) (string, SubQueue) {
	p := address
	if i := strings.Index(p, "://"); i >= 0 {
		p = p[i+3:]
		if j := strings.IndexByte(p, '/'); j >= 0 {
			p = p[j+1:]
		} else {
			p = ""
		}
	}
	p = strings.Trim(p, "/")
	lower := strings.ToLower(p)
	sub := SubQueueNone
	switch {
	case strings.HasSuffix(lower, "/$transfer/$deadletterqueue"):
		p, sub = p[:len(p)-len("/$transfer/$deadletterqueue")], SubQueueTransferDeadLetter
	case strings.HasSuffix(lower, "/$deadletterqueue"):
		p, sub = p[:len(p)-len("/$deadletterqueue")], SubQueueDeadLetter
	}
	return p, sub
}

// ---- flow control ----

func (s *session) sendLinkFlow(l *link) {
	s.c.send(s.localChannel, s.linkFlow(l), nil)
}

func (s *session) linkFlow(l *link) *frames.Flow {
	nid, h, dc, cr := s.nextIncomingID, l.handle, l.deliveryCount, l.credit
	return &frames.Flow{
		NextIncomingID: &nid,
		IncomingWindow: s.incomingWindow,
		NextOutgoingID: s.nextOutgoingID,
		OutgoingWindow: s.c.cfg.SessionWindow,
		Handle:         &h,
		DeliveryCount:  &dc,
		LinkCredit:     &cr,
	}
}

func (s *session) sendSessionFlow() {
	nid := s.nextIncomingID
	s.c.send(s.localChannel, &frames.Flow{
		NextIncomingID: &nid,
		IncomingWindow: s.incomingWindow,
		NextOutgoingID: s.nextOutgoingID,
		OutgoingWindow: s.c.cfg.SessionWindow,
	}, nil)
}

func (s *session) handleFlow(f *frames.Flow) error {
	// Part 2 §2.5.6: remote-incoming-window = next-incoming-id(flow) +
	// incoming-window(flow) - next-outgoing-id(endpoint). Computed as the
	// window minus what is in flight so that windows near 2^32 cannot wrap.
	nid := uint32(0)
	if f.NextIncomingID != nil {
		nid = *f.NextIncomingID
	}
	s.remoteIncomingWindow = windowLeft(f.IncomingWindow, s.nextOutgoingID-nid)
	if f.Handle == nil {
		if f.Echo {
			s.sendSessionFlow()
		}
		s.flush()
		return nil
	}
	l := s.links[*f.Handle]
	if l == nil {
		return &sessionError{s.errorFor(nil, condUnattachedHandle, fmt.Sprintf("flow for unattached handle %d", *f.Handle))}
	}
	if l.role == frames.RoleReceiver { // we send on this link
		// Part 2 §2.6.7: link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd).
		if f.LinkCredit != nil {
			rdc := uint32(0)
			if f.DeliveryCount != nil {
				rdc = *f.DeliveryCount
			}
			l.credit = windowLeft(*f.LinkCredit, l.deliveryCount-rdc)
		}
		if f.Drain {
			l.drain = true
			if l.receiving && l.cancelRecv != nil {
				l.cancelRecv()
			}
		}
		if l.replyAddr != "" {
			s.c.flushReplies(l)
		}
		s.flush()
		if l.drain && !l.receiving && (l.credit == 0 || l.node != nodeEntity || !l.attached) {
			s.finishDrain(l)
		}
		if f.Echo && !l.drain {
			s.sendLinkFlow(l)
		}
		s.pump(l)
		return nil
	}
	if f.Echo {
		s.sendLinkFlow(l)
	}
	return nil
}

// finishDrain consumes the remaining credit and reports it (part 2 §2.6.7 drain).
func (s *session) finishDrain(l *link) {
	l.deliveryCount += l.credit
	l.credit = 0
	l.drain = false
	f := s.linkFlow(l)
	f.Drain = true
	s.c.send(s.localChannel, f, nil)
}

// ---- incoming transfers (client senders) ----

func (s *session) handleTransfer(t *frames.Transfer) error {
	c := s.c
	if s.incomingWindow == 0 {
		return &sessionError{s.errorFor(nil, condWindowViolation, "transfer beyond the session incoming window")}
	}
	s.nextIncomingID++
	s.incomingWindow--
	if s.incomingWindow <= c.cfg.SessionWindow/2 {
		s.incomingWindow = c.cfg.SessionWindow
		s.sendSessionFlow()
	}
	l := s.links[t.Handle]
	if l == nil {
		return &sessionError{s.errorFor(nil, condUnattachedHandle, fmt.Sprintf("transfer on unattached handle %d", t.Handle))}
	}
	if l.role != frames.RoleSender {
		s.detachLink(l, s.errorFor(l, condNotAllowed, "transfer from the receiving end of a link"))
		return nil
	}
	p := l.partial
	if p == nil {
		if t.DeliveryID == nil {
			s.detachLink(l, s.errorFor(l, condInvalidField, "first transfer of a delivery without delivery-id"))
			return nil
		}
		if l.credit == 0 || !l.attached {
			s.detachLink(l, s.errorFor(l, condTransferLimit, "transfer without link credit"))
			return nil
		}
		l.credit--
		l.deliveryCount++
		p = &partial{id: *t.DeliveryID, tag: t.DeliveryTag, settled: t.Settled}
		if t.MessageFormat != nil {
			p.format = *t.MessageFormat
		}
		l.partial = p
	}
	if t.Settled {
		p.settled = true
	}
	if t.Aborted {
		l.partial = nil // part 2 §2.6.14: an aborted delivery is discarded
		s.deliveryDone(l)
		return nil
	}
	if !p.oversized {
		if uint64(len(p.buf)+len(t.Payload)) > l.maxMessageSize {
			p.oversized, p.buf = true, nil // stop buffering; reject at the end
		} else if p.buf == nil && !t.More {
			p.buf = t.Payload // single-frame delivery: the frame buffer is ours
		} else {
			p.buf = append(p.buf, t.Payload...)
		}
	}
	if t.More {
		return nil
	}
	l.partial = nil
	if p.oversized {
		s.settleIncoming(l, p, &frames.Rejected{Error: s.errorFor(l, condMessageSizeExceeded,
			fmt.Sprintf("The received message (delivery-id:%d) exceeds the limit (%d bytes) currently allowed on the link.", p.id, l.maxMessageSize))})
		s.deliveryDone(l)
		return nil
	}
	switch l.node {
	case nodeEntity:
		s.sendToEntity(l, p)
	default:
		s.rpcRequest(l, p)
	}
	return nil
}

// settleIncoming confirms a client's delivery with a settled disposition.
func (s *session) settleIncoming(l *link, p *partial, st frames.DeliveryState) {
	if r, ok := st.(*frames.Rejected); ok && r.Error != nil {
		s.c.log.Info("amqp: rejecting a message", "link", l.name,
			"address", l.addr.String(), "condition", string(r.Error.Condition), "description", r.Error.Description)
	}
	if p.settled || l.detached {
		return
	}
	if l.rcvSecond {
		s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleReceiver, First: p.id, Settled: false, State: st}, nil)
		return
	}
	if _, ok := st.(frames.Accepted); ok {
		// Confirmed at the end of this owner-loop iteration, merged into
		// ranges: one frame for many pipelined sends.
		if len(s.acks) == 0 {
			s.c.ackSessions = append(s.c.ackSessions, s)
		}
		s.acks = append(s.acks, p.id)
		return
	}
	s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleReceiver, First: p.id, Settled: true, State: st}, nil)
}

// flushAcks sends the accepted confirmations collected in this iteration,
// one disposition per run of consecutive delivery-ids.
func (c *conn) flushAcks() {
	for _, s := range c.ackSessions {
		ids := s.acks
		s.acks = s.acks[:0]
		if c.sessions[s.remoteChannel] != s {
			continue // the session ended
		}
		slices.Sort(ids)
		for i := 0; i < len(ids); {
			j := i
			for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
				j++
			}
			d := &frames.Disposition{Role: frames.RoleReceiver, First: ids[i], Settled: true, State: frames.Accepted{}}
			if j > i {
				last := ids[j]
				d.Last = &last
			}
			c.send(s.localChannel, d, nil)
			i = j + 1
		}
	}
	c.ackSessions = c.ackSessions[:0]
}

// minLinkCredit is what every sending link may always have (credit plus
// in flight), however busy the connection's pool: credit held by idle links
// cannot be taken back, so a hard pool could starve the others.
const minLinkCredit = 10

// topUp restores a client sender's credit once half of it is used. Credit
// plus in-flight deliveries stay at most LinkCredit per link, and over the
// connection at most MaxConnCredit plus minLinkCredit per link
// (back-pressure that many links cannot multiply).
func (s *session) topUp(l *link) {
	c := s.c
	if l.detached || !l.attached {
		return
	}
	lc := int(c.cfg.LinkCredit)
	have := int(l.credit) + l.inflight
	if have > lc/2 {
		return
	}
	add := min(lc-have, c.cfg.MaxConnCredit-c.connCredit)
	add = max(add, min(minLinkCredit, lc)-have)
	if add <= 0 {
		return
	}
	l.credit += uint32(add)
	c.connCredit += add
	s.sendLinkFlow(l)
}

// deliveryDone accounts for a finished client delivery (stored, rejected or
// aborted): its credit returns to the connection's pool.
func (s *session) deliveryDone(l *link) {
	s.c.connCredit--
	s.topUp(l)
}

func (s *session) sendToEntity(l *link, p *partial) {
	c := s.c
	var msgs []*Message
	var err error
	if p.format == batchMessageFormat {
		msgs, err = splitBatch(p.buf)
	} else {
		var m *Message
		m, _, err = parseMessage(p.buf)
		msgs = []*Message{m}
	}
	for i := 0; err == nil && i < len(msgs); i++ {
		err = ensureMessageID(msgs[i])
	}
	if err != nil {
		s.settleIncoming(l, p, &frames.Rejected{Error: amqpError(err, s.tracker(l), c.now())})
		s.deliveryDone(l)
		return
	}
	if l.entity.RequiresSession {
		for _, m := range msgs {
			if m.SessionID == "" {
				s.settleIncoming(l, p, &frames.Rejected{Error: s.errorFor(l, condNotAllowed,
					"The SessionId was not set on a message, and it cannot be sent to the entity. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.")})
				s.deliveryDone(l)
				return
			}
		}
	}
	l.inflight++
	entity := l.addr.Entity
	ctx := c.ctx // a send in flight completes even if the link goes away
	tracker := s.tracker(l)
	c.goFunc(func() {
		err := c.b.Send(ctx, entity, msgs)
		var st frames.DeliveryState = frames.Accepted{}
		if err != nil {
			st = &frames.Rejected{Error: amqpError(err, tracker, c.now())}
		}
		c.post(func() {
			l.inflight--
			s.settleIncoming(l, p, st)
			s.deliveryDone(l)
		})
	})
}

// ---- outgoing deliveries (client receivers) ----

// sendDelivery sends payload on l (consuming one credit), fragmenting to the
// peer's max-frame-size and queuing while the session window is closed.
func (s *session) sendDelivery(l *link, tag []byte, payload []byte, settled bool) uint32 {
	if tag == nil {
		tag = binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(l.deliveryCount))
	}
	id := s.nextDeliveryID
	s.nextDeliveryID++
	l.credit--
	l.deliveryCount++
	s.queue = append(s.queue, &pendingDelivery{l: l, id: id, tag: tag, payload: payload, settled: settled})
	s.flush()
	return id
}

// flush sends queued transfer frames while the peer's window allows.
func (s *session) flush() {
	c := s.c
	zero := uint32(0)
	for len(s.queue) > 0 && s.remoteIncomingWindow > 0 {
		d := s.queue[0]
		if d.l.detached {
			s.queue = s.queue[1:]
			continue
		}
		room := int(c.peerMaxFrame) - frames.HeaderSize - 64 - len(d.tag)
		for s.remoteIncomingWindow > 0 {
			t := &frames.Transfer{Handle: d.l.handle}
			if !d.started {
				id := d.id
				t.DeliveryID, t.DeliveryTag, t.MessageFormat = &id, d.tag, &zero
				t.Settled, t.SettledSet = d.settled, d.settled
				d.started = true
			}
			end := min(d.off+room, len(d.payload))
			t.More = end < len(d.payload)
			c.send(s.localChannel, t, d.payload[d.off:end])
			d.off = end
			s.nextOutgoingID++
			s.remoteIncomingWindow--
			if !t.More {
				break
			}
		}
		if d.off < len(d.payload) {
			return
		}
		s.queue = s.queue[1:]
		if len(s.queue) == maxQueuedPerSession-1 {
			defer s.pumpAll() // the queue has room again
		}
	}
}

func (s *session) pumpAll() {
	for _, l := range s.links {
		s.pump(l)
	}
}

// Back-pressure bounds for deliveries to clients.
const (
	maxUnsettledPerLink = 5000
	maxQueuedPerSession = 256
)

// pump keeps one Backend.Receive long-poll running per entity receiver
// link that has credit.
func (s *session) pump(l *link) {
	c := s.c
	if l.node != nodeEntity || l.role != frames.RoleReceiver || !l.attached || l.detached ||
		l.receiving || l.backoff || l.credit == 0 {
		return
	}
	// Bound what one link holds: unsettled deliveries and transfers queued
	// behind a closed session window (a client may grant any credit).
	room := maxUnsettledPerLink - l.unsettled
	if room <= 0 || len(s.queue) >= maxQueuedPerSession {
		return
	}
	max := min(int(l.credit), room, maxQueuedPerSession-len(s.queue))
	wait := c.cfg.ReceiveWait
	if l.sessionID != "" {
		left := l.sessionLockedUntil.Sub(c.now())
		if left <= 0 {
			s.detachLink(l, s.errorFor(l, condSessionLockLost, fmt.Sprintf("The session lock has expired on the session '%s'.", l.sessionID)))
			return
		}
		wait = min(wait, left) // wake up to notice the expiry
	}
	if l.drain {
		wait = 0
	}
	ctx, cancel := context.WithCancel(l.ctx)
	l.receiving, l.cancelRecv = true, cancel
	req := ReceiveRequest{Address: l.addr, SessionID: l.sessionID, Mode: l.mode, Max: max, Wait: wait}
	c.goFunc(func() {
		defer cancel()
		ds, err := c.b.Receive(ctx, req)
		payloads := make([][]byte, len(ds))
		for i, d := range ds {
			payloads[i], _ = encodeDelivery(d, req.Mode == PeekLock)
		}
		c.post(func() { s.onReceived(l, ds, payloads, err) })
	})
}

func (s *session) onReceived(l *link, ds []*Delivery, payloads [][]byte, err error) {
	c := s.c
	l.receiving, l.cancelRecv = false, nil
	var leftovers []*Delivery
	lockGone := l.sessionID != "" && !c.sessionLockHeld(l)
	for i, d := range ds {
		if l.detached || l.credit == 0 || payloads[i] == nil || lockGone {
			leftovers = append(leftovers, d)
			continue
		}
		if l.mode == ReceiveAndDelete {
			tag := binary.BigEndian.AppendUint64(nil, uint64(d.SequenceNumber))
			s.sendDelivery(l, tag, payloads[i], true)
			continue
		}
		id := s.sendDelivery(l, dotnetTag(d.LockToken), payloads[i], false)
		l.unsettled++
		s.unsettled[id] = &outDelivery{l: l, token: d.LockToken, addr: l.addr, sessionID: l.sessionID}
	}
	if len(leftovers) > 0 && l.mode == PeekLock {
		addr, sid := l.addr, l.sessionID
		c.goFunc(func() {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
			defer cancel()
			batch := make([]Settlement, len(leftovers))
			for i, d := range leftovers {
				batch[i] = Settlement{Address: addr, SessionID: sid, LockToken: d.LockToken, Disposition: Release}
			}
			_ = c.b.Settle(ctx, batch)
		})
	}
	if l.detached {
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		switch {
		case errors.Is(err, ErrSessionLockLost), errors.Is(err, ErrNotFound), errors.Is(err, ErrEntityDisabled),
			errors.Is(err, ErrUnauthorized), errors.Is(err, ErrNotAllowed):
			s.detachLink(l, amqpError(err, s.tracker(l), c.now()))
			return
		}
		c.log.Debug("receive failed; backing off", "entity", l.addr.String(), "err", err)
		l.backoff = true
		c.goFunc(func() {
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-t.C:
				c.post(func() { l.backoff = false; s.pump(l) })
			case <-l.ctx.Done():
			}
		})
		return
	}
	if l.drain && l.credit > 0 && len(ds) == 0 {
		s.finishDrain(l)
	} else if l.drain && l.credit == 0 {
		s.finishDrain(l)
	}
	s.pump(l)
}

// ---- dispositions from client receivers ----

func (s *session) handleDisposition(d *frames.Disposition) {
	if d.Role != frames.RoleReceiver {
		return // the client settling its own deliveries to us: nothing to do
	}
	c := s.c
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	settlement, ok := settlementFor(d.State)
	if !ok && d.State != nil {
		return // a non-terminal state (received): nothing to do yet
	}
	span := last - d.First // wraps like delivery numbers do
	type item struct {
		id uint32
		od *outDelivery
	}
	var items []item
	if int64(span) < int64(len(s.unsettled)) {
		for i := uint32(0); ; i++ {
			id := d.First + i
			if od := s.unsettled[id]; od != nil {
				items = append(items, item{id, od})
				delete(s.unsettled, id)
				od.l.unsettled--
			}
			if i == span {
				break
			}
		}
	} else {
		for id, od := range s.unsettled {
			if id-d.First <= span {
				items = append(items, item{id, od})
				delete(s.unsettled, id)
				od.l.unsettled--
			}
		}
	}
	if len(items) == 0 {
		if !d.Settled {
			s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true,
				State: &frames.Rejected{Error: s.errorFor(nil, condLockLost, "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.")}}, nil)
		}
		return
	}
	if !ok { // settled without an outcome: release it
		settlement = Settlement{Disposition: Release}
	}
	for i, it := range items { // room freed: resume receiving
		if i == 0 || it.od.l != items[i-1].od.l {
			s.pump(it.od.l)
		}
	}
	batch := make([]Settlement, len(items))
	var local []error // per item; non-nil entries are answered without the Backend
	for i, it := range items {
		batch[i] = settlement
		batch[i].Address, batch[i].SessionID, batch[i].LockToken = it.od.addr, it.od.sessionID, it.od.token
		if it.od.sessionID != "" && !c.sessionLockHeld(it.od.l) {
			if local == nil {
				local = make([]error, len(items))
			}
			local[i] = ErrSessionLockLost
		}
	}
	if local != nil { // keep only the settlements the Backend should see
		kept := batch[:0:0]
		for i := range batch {
			if local[i] == nil {
				kept = append(kept, batch[i])
			}
		}
		batch = kept
	}
	job := settleJob{batch: batch, local: local}
	if !d.Settled {
		job.reply = func(errs []error) {
			allOK := len(items) == int(span)+1
			for _, err := range errs {
				allOK = allOK && err == nil
			}
			if allOK {
				s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true, State: frames.Accepted{}}, nil)
				return
			}
			for i, it := range items {
				var st frames.DeliveryState = frames.Accepted{}
				if errs[i] != nil {
					st = &frames.Rejected{Error: amqpError(errs[i], s.tracker(it.od.l), c.now())}
				}
				s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: it.id, Settled: true, State: st}, nil)
			}
		}
	}
	c.settleQueue = append(c.settleQueue, job)
}

// settleJob is one disposition's settlements; reply (nil when the client
// settled first) runs on the owner with one error per settlement.
type settleJob struct {
	batch []Settlement
	local []error // when set, one entry per item: non-nil items never reached the Backend
	reply func(errs []error)
}

// results merges the Backend's errors for batch with the local ones.
func (j settleJob) results(backend []error) []error {
	if j.local == nil {
		return backend
	}
	out := make([]error, len(j.local))
	k := 0
	for i := range out {
		if j.local[i] != nil {
			out[i] = j.local[i]
		} else {
			out[i] = backend[k]
			k++
		}
	}
	return out
}

// flushSettles hands every disposition read in one reader batch to the
// Backend as a single Settle call, so the broker can group the writes.
func (c *conn) flushSettles() {
	if len(c.settleQueue) == 0 {
		return
	}
	jobs := c.settleQueue
	c.settleQueue = nil
	c.goFunc(func() {
		var all []Settlement
		if len(jobs) == 1 {
			all = jobs[0].batch
		} else {
			for _, j := range jobs {
				all = append(all, j.batch...)
			}
		}
		// c.ctx, not a per-call timeout: the Backend bounds its own calls,
		// and a timer per disposition is measurable at 100k msgs/s.
		var errs []error
		if len(all) > 0 {
			errs = c.b.Settle(c.ctx, all)
		}
		if len(errs) != len(all) {
			errs = make([]error, len(all))
			for i := range errs {
				errs[i] = fmt.Errorf("%w: backend returned a wrong number of results", ErrServerBusy)
			}
		}
		replies := false
		for _, j := range jobs {
			replies = replies || j.reply != nil
		}
		if len(all) == 0 && !replies {
			return
		}
		if !replies {
			return
		}
		c.post(func() {
			off := 0
			for _, j := range jobs {
				if j.reply != nil {
					j.reply(j.results(errs[off : off+len(j.batch)]))
				}
				off += len(j.batch)
			}
		})
	})
}

// settlementFor maps an outcome to a settlement (protocol.md §6.4).
func settlementFor(st frames.DeliveryState) (Settlement, bool) {
	switch x := st.(type) {
	case frames.Accepted:
		return Settlement{Disposition: Complete}, true
	case frames.Released:
		return Settlement{Disposition: Release}, true
	case *frames.Modified:
		if x.UndeliverableHere {
			return Settlement{Disposition: Defer, PropertiesToModify: propertiesFromMap(x.MessageAnnotations)}, true
		}
		return Settlement{Disposition: Abandon, PropertiesToModify: propertiesFromMap(x.MessageAnnotations)}, true
	case *frames.Rejected:
		out := Settlement{Disposition: DeadLetter}
		if x.Error != nil {
			for _, e := range x.Error.Info {
				var k string
				switch kk := e.Key.(type) {
				case string:
					k = kk
				case Symbol:
					k = string(kk)
				default:
					continue
				}
				switch k {
				case "DeadLetterReason":
					out.DeadLetterReason, _ = e.Value.(string)
				case "DeadLetterErrorDescription":
					out.DeadLetterDescription, _ = e.Value.(string)
				default:
					out.PropertiesToModify = append(out.PropertiesToModify, Property{Key: k, Value: e.Value})
				}
			}
		}
		return out, true
	}
	return Settlement{}, false
}

// sessionLockHeld reports whether l's session lock has not yet expired.
func (c *conn) sessionLockHeld(l *link) bool {
	return l.sessionID == "" || c.now().Before(l.sessionLockedUntil)
}

// windowLeft is window minus inFlight, or 0 when more is in flight.
func windowLeft(window, inFlight uint32) uint32 {
	if inFlight > window {
		return 0
	}
	return window - inFlight
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= 1<<62
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
