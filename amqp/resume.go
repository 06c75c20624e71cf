package amqp

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// Link resume (part 2 §2.6.13), for peek-lock receivers of a queue or subscription that
// are not session receivers.
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
}

// suspended is the server's table of links that may be resumed.
type suspended struct {
	mu    sync.Mutex
	links map[resumeKey]*suspendedLink
}

func (t *suspended) put(k resumeKey, sl *suspendedLink, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.links == nil {
		t.links = map[resumeKey]*suspendedLink{}
	}
	for key, v := range t.links { // forget links whose locks have all expired
		live := false
		for _, d := range v.deliveries {
			live = live || d.lockedUntil.After(now)
		}
		if !live {
			delete(t.links, key)
		}
	}
	if _, ok := t.links[k]; !ok && len(t.links) >= maxSuspendedLinks {
		return
	}
	t.links[k] = sl
}

func (t *suspended) take(k resumeKey) *suspendedLink {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.links[k]
	delete(t.links, k)
	return sl
}

// resumable reports whether l's deliveries may be remembered for a later resume.
func (l *link) resumable() bool {
	return l.node == nodeEntity && l.role == frames.RoleReceiver && l.mode == PeekLock && l.sessionID == "" &&
		!l.entity.RequiresSession
}

// suspend remembers l's unsettled deliveries (called from dropLink, before they are
// forgotten). ods are l's entries of the session's unsettled map.
func (c *conn) suspend(l *link, ods []*outDelivery) {
	if !l.suspend || !l.attached || !l.resumable() || c.remoteContainer == "" {
		return
	}
	sl := &suspendedLink{addr: l.addr}
	for _, od := range ods {
		sl.deliveries = append(sl.deliveries, suspendedDelivery{tag: od.tag, token: od.token, seq: od.seq, lockedUntil: od.lockedUntil})
	}
	for _, r := range l.resume { // resumed but not yet sent again: still ours
		sl.deliveries = append(sl.deliveries, r.d)
	}
	if len(sl.deliveries) == 0 {
		return
	}
	c.s.suspended.put(resumeKey{c.remoteContainer, l.name}, sl, c.now())
}

// resumeItem is a kept delivery waiting for credit to be sent again with resume=true.
type resumeItem struct {
	d       suspendedDelivery
	payload []byte
}

// resumeTakeover runs off the owner goroutine during a receiver attach: it takes the
// link's remembered deliveries, settles or releases them as the client's unsettled map
// says, and returns the broker's unsettled map and the deliveries to resend.
func (c *conn) resumeTakeover(ctx context.Context, name string, addr Address, clientMap Map) (Map, []resumeItem) {
	if c.remoteContainer == "" {
		return nil, nil
	}
	sl := c.s.suspended.take(resumeKey{c.remoteContainer, name})
	if sl == nil {
		return nil, nil
	}
	same := strings.EqualFold(sl.addr.Entity, addr.Entity) && sl.addr.Sub == addr.Sub
	var settle []Settlement
	var keep []suspendedDelivery
	for _, d := range sl.deliveries {
		st, listed := lookupTag(clientMap, d.tag)
		if !same || !listed {
			settle = append(settle, Settlement{Address: sl.addr, LockToken: d.token, Disposition: Release})
			continue
		}
		if s, terminal := settlementFor(st); terminal {
			s.Address, s.LockToken = sl.addr, d.token
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
	var reply Map
	var items []resumeItem
	var lost []Settlement
	for _, d := range keep {
		// The message is read again by sequence number to resend it. When that fails
		// (it is gone, or browsing does not find it), it is released rather than left
		// locked and unlisted.
		ds, err := c.b.Peek(ctx, addr, "", d.seq, 1)
		var payload []byte
		if err == nil && len(ds) == 1 && ds[0].SequenceNumber == d.seq {
			del := *ds[0]
			del.LockToken, del.LockedUntil = d.token, d.lockedUntil
			payload, err = encodeDelivery(&del, true)
		}
		if payload == nil || err != nil {
			lost = append(lost, Settlement{Address: addr, LockToken: d.token, Disposition: Release})
			continue
		}
		reply = append(reply, encoding.MapEntry{Key: d.tag, Value: nil})
		items = append(items, resumeItem{d: d, payload: payload})
	}
	if len(lost) > 0 {
		_ = c.b.Settle(ctx, lost)
	}
	return reply, items
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
		s.addUnsettled(id, &outDelivery{l: l, token: r.d.token, addr: l.addr, tag: r.d.tag, seq: r.d.seq, lockedUntil: r.d.lockedUntil})
	}
	return len(l.resume) > 0
}
