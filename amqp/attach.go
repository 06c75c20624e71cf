package amqp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// ---- attach / detach ----

func (s *session) handleAttach(a *frames.Attach) error {
	c := s.c
	if s.links[a.Handle] != nil {
		return &sessionError{s.errorFor(nil, condHandleInUse, fmt.Sprintf("handle %d is in use", a.Handle))}
	}
	if len(s.links) >= c.cfg.MaxLinks || a.Handle >= uint32(c.cfg.MaxLinks) {
		return &sessionError{s.errorFor(nil, condResourceLimit, "too many links")}
	}
	delete(s.detaching, a.Handle) // a peer that reuses the handle is done with the old link
	l := &link{s: s, name: a.Name, handle: a.Handle, role: a.Role}
	l.ctx, l.cancel = context.WithCancel(c.ctx)
	s.links[a.Handle] = l
	c.linkCount++
	l.countLink()
	if e := c.linkLimit(); e != nil {
		s.refuse(l, a, e)
		return nil
	}
	// Link stealing (part 2 §2.6.1): a new attach with the name of a live
	// link takes over; the old one is detached with amqp:link:stolen.
	key := linkKey{a.Name, a.Role}
	if old := c.linksByName[key]; old != nil {
		old.s.detachLink(old, old.s.errorFor(old, condLinkStolen, "link stolen by a new attach with the same name"))
	}
	c.linksByName[key] = l

	var address string
	if a.Role == frames.RoleSender && a.Target != nil && a.Target.Coordinator {
		s.attachCoordinator(l, a)
		return nil
	}
	if a.Role == frames.RoleSender {
		if a.Target == nil {
			s.refuse(l, a, s.errorFor(nil, condInvalidField, "attach without a target"))
			return nil
		}
		address = a.Target.Address
		if dest, other := sendViaOther(a); other {
			// Send-via (Service Bus transfer destination): the link's target is the via
			// entity, its messages go to dest. Inside a transaction they are part of it
			// (applied atomically with the rest at commit); outside one they go straight
			// to dest, not through the via entity (docs/compatibility.md).
			ent, sub := parseEntityPath(address)
			via := Address{Entity: ent, Sub: sub}
			if ent == "" {
				s.refuse(l, a, s.errorFor(l, condNotFound, fmt.Sprintf("The messaging entity '%s' could not be found.", address)))
				return nil
			}
			if !c.hasClaim(via.String(), RightSend) {
				s.refuse(l, a, s.errorFor(l, condUnauthorized, fmt.Sprintf("Unauthorized access. 'Send' claim(s) are required to perform this operation. Resource: 'sb://%s/%s'.", c.hostname, via)))
				return nil
			}
			l.via = via
			address = dest
		}
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
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode, MaxMessageSize: unboundedMessageSize}
	if a.Role == frames.RoleSender {
		reply.MaxMessageSize = s.c.cfg.MaxMessageSize
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
		s.c.refused("amqp: detaching link with an error", e, "link", l.name, "address", l.addr.String())
	}
	s.c.send(s.localChannel, &frames.Detach{Handle: l.handle, Closed: true, Error: e}, nil)
	if release := s.dropLink(l, true); release != nil {
		s.c.goFunc(release)
	}
	if s.detaching == nil {
		s.detaching = map[uint32]struct{}{}
	}
	s.detaching[l.handle] = struct{}{}
}

// crossedDetach reports whether handle is one we detached and the peer has not yet
// answered: a frame on it crossed our detach and is dropped.
func (s *session) crossedDetach(handle uint32) bool {
	_, ok := s.detaching[handle]
	return ok
}

func (s *session) handleDetach(d *frames.Detach) {
	l := s.links[d.Handle]
	if l == nil {
		delete(s.detaching, d.Handle) // the answer to our own detach
		return
	}
	reply := &frames.Detach{Handle: d.Handle, Closed: d.Closed}
	l.suspend = !d.Closed // may be resumed (resume.go)
	release := s.dropLink(l, true)
	if release == nil {
		s.c.send(s.localChannel, reply, nil)
		return
	}
	// A session receiver's close returns only once its session lock is released
	// (S-SES-4), so a client that closes and accepts the session again, here or from
	// another connection, does not race the release.
	c := s.c
	run := func() {
		c.goFunc(func() {
			release()
			c.post(func() {
				if c.sessions[s.remoteChannel] == s { // not ended meanwhile
					c.send(s.localChannel, reply, nil)
				}
			})
		})
	}
	if l.settling > 0 {
		// Settlements the client sent before the detach are still with the Backend
		// (uamqp completes and detaches at once): they need the lock, so the release
		// waits for them (settleJob.unhold).
		l.afterSettle = run
		return
	}
	run()
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
	defer l.uncountLink()
	if l.role == frames.RoleSender { // unused credit returns to the pool
		c.connCredit -= int(l.credit)
		if l.partial != nil {
			c.connCredit--
			c.unbuffer(l.partial)
		}
		l.credit, l.partial = 0, nil
	}
	if s.links[l.handle] == l {
		delete(s.links, l.handle)
		c.linkCount--
	}
	key := linkKey{l.name, l.role}
	if c.linksByName[key] == l {
		delete(c.linksByName, key)
	}
	if l.replyAddr != "" && c.replyLinks[l.replyAddr] == l {
		delete(c.replyLinks, l.replyAddr)
		for _, msg := range c.pendingReplies[l.replyAddr] {
			c.addQueued(-int64(len(msg)))
		}
		delete(c.pendingReplies, l.replyAddr)
	}
	var mine []*outDelivery
	for id, od := range s.unsettled {
		if od.l == l {
			mine = append(mine, od)
			delete(s.unsettled, id) // the lock stays until it expires or is settled by token
		}
	}
	kept := c.suspend(l, mine, explicit) // unless the link may be resumed (resume.go)
	l.resume = nil
	c.uncount(l.unsettled)
	l.unsettled = 0
	if explicit && !kept && l.sessionID != "" && l.attached && c.sessionLockHeld(l) {
		addr, id := l.addr, l.sessionID
		return func() {
			ctx, cancel := context.WithTimeout(l.ownerCtx(c.ctx), c.cfg.RPCTimeout)
			defer cancel()
			_ = c.b.ReleaseSession(ctx, addr, id)
		}
	}
	return nil
}

// attachRPC attaches either side of a $cbs or $management request/response pair.
func (s *session) attachRPC(l *link, a *frames.Attach) {
	// Service Bus says max-message-size on every attach, also where we send; uamqp
	// logs its absence.
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode, Source: a.Source, Target: a.Target,
		MaxMessageSize: unboundedMessageSize}
	if a.Role == frames.RoleReceiver {
		l.rpcNode = a.Source.Address
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
	l.rpcNode = a.Target.Address
	reply.MaxMessageSize = s.c.cfg.MaxMessageSize
	l.maxMessageSize = s.c.cfg.MaxMessageSize
	l.attached = true
	s.c.send(s.localChannel, reply, nil)
	s.topUp(l) // initial credit
}

const sessionFilterKey = "com.microsoft:session-filter"

// unboundedMessageSize is the max-message-size we say on links where the client
// receives (entity receivers, RPC response links): we take no transfers there, so no
// bound. Not 0, which is "absent" on the wire (uamqp logs that on every attach), and not
// the entity's limit: go-amqp refuses deliveries larger than the smaller of its own
// limit and ours, and a delivery carries more than the message that was sent.
const unboundedMessageSize = math.MaxUint64

// Vendor link properties: the batch limit the broker advertises on a sender's attach, and
// the entity kind a client may declare on its attach.
const (
	maxBatchSizeKey = "com.microsoft:max-message-batch-size"
	entityTypeKey   = "com.microsoft:entity-type"
)

// declaredKind reads the entity kind an attach declares in com.microsoft:entity-type:
// the MessagingEntityType number of the older .NET client (0 queue, 1 topic,
// 2 subscription). Other values, such as the "entity-mgmt" the current .NET SDK puts on
// its $management links, declare nothing (0).
func declaredKind(props Map) EntityKind {
	v, ok := props.GetString(entityTypeKey)
	if !ok {
		return 0
	}
	n, ok := toInt64(v)
	if !ok {
		return 0
	}
	switch n {
	case 0:
		return KindQueue
	case 1:
		return KindTopic
	case 2:
		return KindSubscription
	}
	return 0
}

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
	l.want = want
	// The claim must cover the whole address: the SDK scopes a dead-letter receiver's token
	// to "<entity>/$DeadLetterQueue", and a claim on the entity covers it by prefix.
	l.claimPath = l.addr.String() // scheme and host dropped, sub-queue kept
	if !c.hasClaim(l.claimPath, want) {
		s.refuse(l, a, s.errorFor(l, condUnauthorized, fmt.Sprintf("Unauthorized access. '%s' claim(s) are required to perform this operation. Resource: 'sb://%s/%s'.", claimName, c.hostname, l.claimPath)))
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
	declared := declaredKind(a.Properties)
	peekLock := a.Role == frames.RoleReceiver && (a.SndSettleMode == nil || *a.SndSettleMode != frames.SndSettled)
	ctx := l.ctx
	c.goFunc(func() {
		var err error
		if l.via.Entity != "" { // send-via: the via entity must exist and take sends
			var vi EntityInfo
			if vi, err = c.b.Entity(ctx, l.via.Entity); err == nil {
				err = checkAttach(vi, a.Role, l.via.Sub, false)
			}
		}
		var info EntityInfo
		if err == nil {
			info, err = c.b.Entity(ctx, ent)
		}
		var id string
		var lockedUntil time.Time
		if err == nil {
			err = checkAttach(info, a.Role, sub, sessionful)
		}
		if err == nil && declared != 0 && declared != info.Kind {
			err = fmt.Errorf("%w: the link declares com.microsoft:entity-type %s but '%s' is a %s", ErrNotAllowed, declared, info.Path, info.Kind)
		}
		var rs resumed
		if err == nil && peekLock && (sessionful || !info.RequiresSession) {
			// A resumed session link keeps its session lock (resume.go).
			rs = c.resumeTakeover(ctx, a.Name, Address{Entity: info.Path, Sub: sub}, wantSession, a.Unsettled)
			id, lockedUntil = rs.sessionID, rs.lockedUntil
		}
		if err == nil && sessionful && id == "" {
			addr := Address{Entity: info.Path, Sub: sub}
			id, lockedUntil, err = c.b.AcceptSession(ctx, addr, wantSession, wait)
		}
		c.post(func() { s.finishEntityAttach(l, a, info, id, lockedUntil, rs, err) })
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

// resumed is what a receiver attach takes over from a suspended link (resume.go).
type resumed struct {
	unsettled Map // the broker's unsettled map for the attach
	items     []resumeItem
	// A resumed session link's session, lock expiry and lock holder (ConnectionID).
	sessionID   string
	lockedUntil time.Time
	owner       string
}

func (s *session) finishEntityAttach(l *link, a *frames.Attach, info EntityInfo, sessionID string, lockedUntil time.Time, rs resumed, err error) {
	c := s.c
	if l.detached {
		if err == nil && sessionID != "" {
			addr := Address{Entity: info.Path, Sub: l.addr.Sub}
			ctx := c.ctx
			if rs.owner != "" {
				ctx = WithConnectionID(ctx, rs.owner)
			}
			c.goFunc(func() {
				ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
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
		// A suspended link of this connection (resume.go) holds its session the same way.
		addr := Address{Entity: info.Path, Sub: l.addr.Sub}
		if h := c.sessionHolder(addr, sessionID); h != nil && h != l && c.sessionLockHeld(h) ||
			c.s.suspended.sessionHeld(resumeKey{c.remoteContainer, l.name}, addr, sessionID, c.now()) {
			l.entity = info
			s.refuse(l, a, amqpError(fmt.Errorf("%w: the session '%s' is held by another receiver",
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
		// Service Bus advertises the largest batch apart from max-message-size (they differ
		// on Premium's large-message entities); the Go SDK sizes NewMessageBatch by it. A
		// batch is one transfer here, so the two limits are the same.
		reply.Properties = Map{{Key: Symbol(maxBatchSizeKey), Value: mms}}
		if reply.Source == nil {
			reply.Source = &frames.Source{}
		}
		l.attached = true
		l.countEntity()
		c.send(s.localChannel, reply, nil)
		s.topUp(l) // initial credit
		return
	}
	zero := uint32(0)
	reply.InitialDeliveryCount = &zero
	reply.MaxMessageSize = unboundedMessageSize
	if a.Target == nil {
		reply.Target = &frames.Target{}
	}
	if a.SndSettleMode != nil && *a.SndSettleMode == frames.SndSettled {
		l.mode, l.settled = ReceiveAndDelete, true
	}
	if sessionID != "" {
		l.sessionID = sessionID
		l.sessionLockedUntil = lockedUntil
		if rs.owner != "" && rs.owner != ConnectionID(c.ctx) { // resumed from another connection
			l.owner = rs.owner
			l.ctx = WithConnectionID(l.ctx, l.owner) // its receives act for the lock's holder
		}
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
	reply.Unsettled, l.resume = rs.unsettled, rs.items
	l.attached = true
	l.countEntity()
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
