package amqp

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// Link resume (part 2 §2.6.13), for peek-lock receivers of a queue or subscription,
// session receivers included.
//
// When such a link ends without being closed (a detach with closed=false, the client
// ending its session, or the connection dropping), the broker remembers its unsettled
// deliveries (tag, lock token, sequence number) under the client's container-id and the
// link name. A later receiver attach with the same container-id, link name and source
// address, on this connection or another one, takes them over, guided by the attach's
// unsettled map:
//
//   - a tag the client lists with a terminal outcome (accepted, rejected, released,
//     modified) is settled with that outcome, as a disposition would have; the broker's
//     attach then leaves it out, so the client forgets it;
//   - a tag the client lists without an outcome stays locked under its lock token: the
//     broker's attach lists it (state null) and, as the client's credit allows, resends
//     it in a transfer with resume=true and the same delivery tag, which the client then
//     settles like any delivery;
//   - a delivery the client does not list is released: it becomes available again
//     without counting a delivery (the client never got it, or dropped it).
//
// Tags the client lists that the broker does not hold are left out of the broker's map.
// A link that is closed, refused or detached by the broker forgets its deliveries: their
// locks stay until they expire or are settled by lock token, as before. Remembered
// deliveries are forgotten once all their locks have expired.
//
// A session receiver's link is remembered with its session lock, which it keeps while
// suspended: the lock is the client's until it expires, so the suspended link blocks
// every other acceptor of the session (another connection, or another link of the same
// connection) with the usual session-cannot-be-locked, and the Backend sees no release.
// Its suspend window is the session lock's expiry. The link resumes when it re-attaches
// with the same session id and an unsettled map that lists at least one of its
// deliveries; it then holds the session lock with its expiry and lock tokens unchanged.
// A resume on another connection acts, for this session, under the ConnectionID that
// took the lock (link.owner), so the Backend sees one holder throughout; while the
// connection that holds the suspended link is still open, only that connection may
// resume it. Otherwise (another session id, or a map that lists none of its
// deliveries) the broker does what it does when a session receiver detaches: it
// releases the deliveries and the session lock (S-SES-6), and the attach accepts a
// session afresh. Past the window nothing is resumed: the session is free for any
// acceptor and its messages come back as their locks expire, with the usual delivery
// count.

// maxSuspendedLinks bounds the links the server remembers; beyond it a link's deliveries
// are simply forgotten (their locks expire).
const maxSuspendedLinks = 4096

type resumeKey struct {
	container string
	name      string
}

type suspendedDelivery struct {
	tag         []byte
	token       UUID
	seq         int64
	lockedUntil time.Time
}

type suspendedLink struct {
	addr       Address
	deliveries []suspendedDelivery

	// A session receiver's link: its session, the session lock's expiry, the
	// ConnectionID the lock is held under, and the connection that may resume it while
	// open (nil once that connection has gone).
	sessionID   string
	lockedUntil time.Time
	owner       string
	holder      *conn
}

// live reports whether sl still holds a session lock at now.
func (sl *suspendedLink) live(now time.Time) bool {
	if sl.sessionID != "" {
		return now.Before(sl.lockedUntil)
	}
	for _, d := range sl.deliveries {
		if d.lockedUntil.After(now) {
			return true
		}
	}
	return false
}

// holderOpen reports whether the connection that suspended sl is still open.
func (sl *suspendedLink) holderOpen() bool {
	return sl.holder != nil && sl.holder.ctx.Err() == nil
}

// suspended is the server's table of links that may be resumed.
type suspended struct {
	mu    sync.Mutex
	links map[resumeKey]*suspendedLink
}

// put remembers sl under k; it reports false when the table is full.
func (t *suspended) put(k resumeKey, sl *suspendedLink, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.links == nil {
		t.links = map[resumeKey]*suspendedLink{}
	}
	for key, v := range t.links { // forget links whose locks have all expired
		if !v.live(now) {
			delete(t.links, key)
		}
	}
	if _, ok := t.links[k]; !ok && len(t.links) >= maxSuspendedLinks {
		return false
	}
	t.links[k] = sl
	return true
}

// sessionHeld reports whether a suspended link other than the one under k holds
// session id on addr at now.
func (t *suspended) sessionHeld(k resumeKey, addr Address, id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, v := range t.links {
		if key != k && v.sessionID == id && v.live(now) && strings.EqualFold(v.addr.Entity, addr.Entity) && v.addr.Sub == addr.Sub {
			return true
		}
	}
	return false
}

// take removes and returns the link under k for a resume on c. A session link that
// another, still open, connection suspended stays where it is: only that connection
// may resume it meanwhile.
func (t *suspended) take(k resumeKey, c *conn) *suspendedLink {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.links[k]
	if sl == nil || sl.sessionID != "" && sl.holder != c && sl.holderOpen() {
		return nil
	}
	delete(t.links, k)
	return sl
}

// resumable reports whether l's deliveries may be remembered for a later resume.
func (l *link) resumable() bool {
	return l.node == nodeEntity && l.role == frames.RoleReceiver && l.mode == PeekLock &&
		(l.sessionID != "" || !l.entity.RequiresSession)
}

// suspend remembers l's unsettled deliveries (called from dropLink, before they are
// forgotten). ods are l's entries of the session's unsettled map; open is false when
// the connection is going. It reports whether l's session lock is now held by the
// suspended link (so dropLink must not release it).
func (c *conn) suspend(l *link, ods []*outDelivery, open bool) bool {
	if !l.suspend || !l.attached || !l.resumable() || c.remoteContainer == "" {
		return false
	}
	sl := &suspendedLink{addr: l.addr}
	for _, od := range ods {
		sl.deliveries = append(sl.deliveries, suspendedDelivery{tag: od.tag, token: od.token, seq: od.seq, lockedUntil: od.lockedUntil})
	}
	for _, r := range l.resume { // resumed but not yet sent again: still ours
		sl.deliveries = append(sl.deliveries, r.d)
	}
	if len(sl.deliveries) == 0 {
		return false
	}
	// Resent in the order they were first sent (ods come from a map), which a session
	// receiver in particular expects.
	slices.SortFunc(sl.deliveries, func(x, y suspendedDelivery) int { return cmp.Compare(x.seq, y.seq) })
	if l.sessionID != "" {
		if !c.sessionLockHeld(l) {
			return false // the lock is gone: there is nothing left to keep
		}
		sl.sessionID, sl.lockedUntil, sl.owner = l.sessionID, l.sessionLockedUntil, l.lockOwner()
		if open {
			sl.holder = c
		}
	}
	return c.s.suspended.put(resumeKey{c.remoteContainer, l.name}, sl, c.now()) && sl.sessionID != ""
}

// lockOwner is the ConnectionID l's session lock is held under.
func (l *link) lockOwner() string {
	if l.owner != "" {
		return l.owner
	}
	return ConnectionID(l.s.c.ctx)
}

// ownerCtx returns ctx acting as the holder of l's session lock: a link resumed from
// another connection acts under the ConnectionID that took the lock.
func (l *link) ownerCtx(ctx context.Context) context.Context {
	if l == nil || l.owner == "" {
		return ctx
	}
	return WithConnectionID(ctx, l.owner)
}

// resumeItem is a kept delivery waiting for credit to be sent again with resume=true.
type resumeItem struct {
	d       suspendedDelivery
	payload []byte
}

// resumeTakeover runs off the owner goroutine during a receiver attach: it takes the
// link's remembered deliveries, settles or releases them as the client's unsettled map
// says, and returns the broker's unsettled map and the deliveries to resend. sessionID
// is the session the attach names ("" for none or the next available one); when the
// remembered link held that session and resumes, so does its session lock.
func (c *conn) resumeTakeover(ctx context.Context, name string, addr Address, sessionID string, clientMap Map) resumed {
	if c.remoteContainer == "" {
		return resumed{}
	}
	sl := c.s.suspended.take(resumeKey{c.remoteContainer, name}, c)
	if sl == nil {
		return resumed{}
	}
	same := strings.EqualFold(sl.addr.Entity, addr.Entity) && sl.addr.Sub == addr.Sub
	if sl.sessionID != "" {
		if !sl.live(c.now()) {
			// Past the window: the session is free for any acceptor and its
			// messages come back as their locks expire.
			return resumed{}
		}
		ctx = WithConnectionID(ctx, sl.owner)
		if !same || sl.sessionID != sessionID || !listsAny(clientMap, sl.deliveries) {
			// Not this link: what a session receiver's detach does (S-SES-6).
			rel := make([]Settlement, len(sl.deliveries))
			for i, d := range sl.deliveries {
				rel[i] = Settlement{Address: sl.addr, SessionID: sl.sessionID, LockToken: d.token, Disposition: Release}
			}
			_ = c.b.Settle(ctx, rel)
			_ = c.b.ReleaseSession(ctx, sl.addr, sl.sessionID)
			return resumed{}
		}
	}
	var settle []Settlement
	var keep []suspendedDelivery
	for _, d := range sl.deliveries {
		st, listed := lookupTag(clientMap, d.tag)
		if !same || !listed {
			settle = append(settle, Settlement{Address: sl.addr, SessionID: sl.sessionID, LockToken: d.token, Disposition: Release})
			continue
		}
		if s, terminal := settlementFor(st); terminal {
			s.Address, s.SessionID, s.LockToken = sl.addr, sl.sessionID, d.token
			settle = append(settle, s)
			continue
		}
		keep = append(keep, d)
	}
	if len(settle) > 0 {
		// Errors (a lock already expired, say) leave nothing to do: the message is
		// then available again or gone, as for any late settlement.
		_ = c.b.Settle(ctx, settle)
	}
	rs := resumed{sessionID: sl.sessionID, lockedUntil: sl.lockedUntil, owner: sl.owner}
	var lost []Settlement
	for _, d := range keep {
		// The message is read again by sequence number to resend it. When that fails
		// (it is gone, or browsing does not find it), it is released rather than left
		// locked and unlisted.
		ds, err := c.b.Peek(ctx, addr, sl.sessionID, d.seq, 1)
		var payload []byte
		if err == nil && len(ds) == 1 && ds[0].SequenceNumber == d.seq {
			del := *ds[0]
			del.LockToken, del.LockedUntil = d.token, d.lockedUntil
			payload, err = encodeDelivery(&del, true)
		}
		if payload == nil || err != nil {
			lost = append(lost, Settlement{Address: addr, SessionID: sl.sessionID, LockToken: d.token, Disposition: Release})
			continue
		}
		rs.unsettled = append(rs.unsettled, encoding.MapEntry{Key: d.tag, Value: nil})
		rs.items = append(rs.items, resumeItem{d: d, payload: payload})
	}
	if len(lost) > 0 {
		_ = c.b.Settle(ctx, lost)
	}
	return rs
}

// listsAny reports whether the client's unsettled map names any of ds.
func listsAny(m Map, ds []suspendedDelivery) bool {
	for _, d := range ds {
		if _, ok := lookupTag(m, d.tag); ok {
			return true
		}
	}
	return false
}

// lookupTag finds tag in an attach's unsettled map (keys are binary delivery tags).
func lookupTag(m Map, tag []byte) (frames.DeliveryState, bool) {
	for _, e := range m {
		k, ok := e.Key.([]byte)
		if !ok || !bytes.Equal(k, tag) {
			continue
		}
		return frames.StateOf(e.Value), true
	}
	return nil, false
}

// sendResumed resends kept deliveries while l has credit; it reports whether any wait.
func (s *session) sendResumed(l *link) bool {
	for len(l.resume) > 0 && l.credit > 0 {
		r := l.resume[0]
		l.resume = l.resume[1:]
		s.c.addQueued(int64(len(r.payload)))
		id := s.queueDelivery(l, r.d.tag, r.payload, false, true)
		s.addUnsettled(id, &outDelivery{l: l, token: r.d.token, addr: l.addr, sessionID: l.sessionID, tag: r.d.tag, seq: r.d.seq, lockedUntil: r.d.lockedUntil})
	}
	return len(l.resume) > 0
}
