package amqp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// ---- outgoing deliveries (client receivers) ----

// sendDelivery sends payload on l (consuming one credit), fragmenting to the
// peer's max-frame-size and queuing while the session window is closed. The
// payload's bytes are already counted in conn.queued (outbytes.go).
func (s *session) sendDelivery(l *link, tag []byte, payload []byte, settled bool) uint32 {
	return s.queueDelivery(l, tag, payload, settled, false)
}

// queueDelivery is sendDelivery, for a resumed delivery too (resume.go).
func (s *session) queueDelivery(l *link, tag []byte, payload []byte, settled, resume bool) uint32 {
	if tag == nil {
		tag = binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(l.deliveryCount))
	}
	id := s.nextDeliveryID
	s.nextDeliveryID++
	l.credit--
	l.syncCredit()
	l.deliveryCount++
	s.queue = append(s.queue, &pendingDelivery{l: l, id: id, tag: tag, payload: payload, settled: settled, resume: resume})
	s.flush()
	return id
}

// flush sends queued transfer frames while the peer's window allows.
func (s *session) flush() {
	c := s.c
	for len(s.queue) > 0 && s.remoteIncomingWindow > 0 {
		d := s.queue[0]
		if d.l.detached {
			c.addQueued(-int64(len(d.payload) - d.off))
			s.queue = s.queue[1:]
			continue
		}
		room := int(c.peerMaxFrame) - frames.HeaderSize - 64 - len(d.tag)
		for s.remoteIncomingWindow > 0 {
			s.transfer = frames.Transfer{Handle: d.l.handle}
			t := &s.transfer
			if !d.started {
				// Pointers into d and to a constant zero, which c.send only reads: no
				// allocation of their own per transfer.
				t.DeliveryID, t.DeliveryTag, t.MessageFormat = &d.id, d.tag, &formatZero
				t.Settled, t.SettledSet = d.settled, d.settled
				t.Resume = d.resume
				d.started = true
			}
			end := min(d.off+room, len(d.payload))
			t.More = end < len(d.payload)
			c.addQueued(-int64(end - d.off)) // counted as framed bytes from here on
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

// formatZero is the message-format of every delivery the broker sends. Never written.
var formatZero uint32

func (s *session) pumpAll() {
	for _, l := range s.links {
		s.pump(l)
	}
}

// maxQueuedPerSession bounds the deliveries queued behind a closed session window.
const maxQueuedPerSession = 256

// pump keeps one Backend.Receive long-poll running per entity receiver
// link that has credit.
func (s *session) pump(l *link) {
	c := s.c
	if l.node != nodeEntity || l.role != frames.RoleReceiver || !l.attached || l.detached ||
		l.receiving || l.backoff || l.settling > 0 || l.credit == 0 {
		return
	}
	if s.sendResumed(l) || l.credit == 0 { // resumed deliveries go first (resume.go)
		return
	}
	// Bound what one link holds: unsettled deliveries and transfers queued
	// behind a closed session window (a client may grant any credit).
	room := s.unsettledRoom(l)
	if room <= 0 {
		c.s.stats.stalls.Add(1)
		if l.drain { // nothing can come now: the credit is used up (part 2 §2.6.7)
			s.finishDrain(l)
		}
		return // resumed by a settlement, a lock expiry or a detach (unsettled.go)
	}
	if len(s.queue) >= maxQueuedPerSession {
		return
	}
	n := min(int(l.credit), room, maxQueuedPerSession-len(s.queue))
	// Bytes: start no receive while the client's writer is behind, and ask for
	// about what fits (outbytes.go). Until a size is known, a receive-and-delete
	// link (which cannot give messages back) assumes the largest message.
	est := l.outEst
	if !c.outRoomFor(max(est, 1)) {
		if l.drain {
			s.finishDrain(l)
		}
		return
	}
	if est == 0 && l.mode == ReceiveAndDelete {
		est = int64(c.cfg.MaxMessageSize)
	}
	if est > 0 {
		n = min(n, max(1, int((c.cfg.MaxConnOutgoing-c.queued.Load())/est)))
	}
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
	if l.mode == PeekLock {
		l.reserved = n
		c.recvReserved += n
	}
	req := ReceiveRequest{Address: l.addr, SessionID: l.sessionID, Mode: l.mode, Max: n, Wait: wait}
	lctx, requeued := l.ctx, l.requeued
	c.goFunc(func() {
		defer cancel()
		ds, err := c.b.Receive(ctx, req)
		payloads := make([][]byte, len(ds))
		var short int64 // a peek-lock delivery that did not fit: it and the rest go back
		var mine int64  // reserved by this receive
		for i, d := range ds {
			p, _ := encodeDelivery(d, req.Mode == PeekLock)
			if p == nil {
				continue
			}
			if req.Mode == PeekLock && !c.tryReserveOut(int64(len(p)), 0) {
				short = int64(len(p))
				break
			}
			// Receive-and-delete messages are gone from the queue: wait for room.
			if req.Mode == ReceiveAndDelete && c.reserveOut(lctx, int64(len(p)), mine) != nil {
				break
			}
			mine += int64(len(p))
			payloads[i] = p
		}
		c.post(func() { s.onReceived(l, ds, payloads, short, requeued, err) })
	})
}

// requeued is l.requeued when the receive started: if the client released or
// abandoned a message since, what this receive took goes back too (S-RCV-2).
func (s *session) onReceived(l *link, ds []*Delivery, payloads [][]byte, short int64, requeued uint64, err error) {
	c := s.c
	l.receiving, l.cancelRecv = false, nil
	c.unreserve(l)
	var size, sized int64
	for _, p := range payloads {
		if p != nil {
			size += int64(len(p))
			sized++
		}
	}
	if sized > 0 {
		l.outEst = max(size/sized, 1)
	}
	if short > 0 { // the rest is released below; receivers wait for the writer
		l.outEst = max(l.outEst, short)
		c.outStalled = true
		c.outNeed = max(c.outNeed, short)
		c.s.stats.outStalls.Add(1)
	}
	// Sort first, send after: sending may wait for a client that does not read
	// (conn.send), and what goes back to the queue must not wait with it.
	var leftovers []*Delivery
	sendable := make([]int, 0, len(ds))
	lockGone := l.sessionID != "" && !c.sessionLockHeld(l)
	credit := l.credit
	behind := l.mode == PeekLock && l.requeued != requeued
	for i, d := range ds {
		if l.detached || credit == 0 || payloads[i] == nil || lockGone || behind {
			c.addQueued(-int64(len(payloads[i]))) // reserved, never sent
			leftovers = append(leftovers, d)
			continue
		}
		credit--
		sendable = append(sendable, i)
	}
	if len(leftovers) > 0 && l.mode == PeekLock {
		addr, sid := l.addr, l.sessionID
		// The link's next receive must find them released, so that they come
		// first again (sequence order; S-SES-3 for a session).
		hold := settleJob{hold: []*link{l}}
		l.settling++
		octx := l.ownerCtx(c.ctx)
		c.goFunc(func() {
			ctx, cancel := context.WithTimeout(octx, c.cfg.RPCTimeout)
			defer cancel()
			batch := make([]Settlement, len(leftovers))
			for i, d := range leftovers {
				batch[i] = Settlement{Address: addr, SessionID: sid, LockToken: d.LockToken, Disposition: Release}
			}
			_ = c.b.Settle(ctx, batch)
			c.post(hold.unhold)
		})
	}
	for _, i := range sendable {
		d := ds[i]
		if l.mode == ReceiveAndDelete {
			tag := binary.BigEndian.AppendUint64(nil, uint64(d.SequenceNumber))
			s.sendDelivery(l, tag, payloads[i], true)
			continue
		}
		tag := dotnetTag(d.LockToken)
		id := s.sendDelivery(l, tag, payloads[i], false)
		s.addUnsettled(id, &outDelivery{l: l, token: d.LockToken, addr: l.addr, sessionID: l.sessionID,
			tag: tag, seq: d.SequenceNumber, lockedUntil: d.LockedUntil})
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
	if short > 0 {
		if l.drain {
			s.finishDrain(l)
		}
		return // outResume pumps once the writer made room
	}
	s.pump(l)
}
