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
// peer's max-frame-size and queuing while the session window is closed.
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
				t.Resume = d.resume
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
		l.receiving || l.backoff || l.settling > 0 || l.credit == 0 {
		return
	}
	if s.sendResumed(l) || l.credit == 0 { // resumed deliveries go first (resume.go)
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
		tag := dotnetTag(d.LockToken)
		id := s.sendDelivery(l, tag, payloads[i], false)
		l.unsettled++
		s.unsettled[id] = &outDelivery{l: l, token: d.LockToken, addr: l.addr, sessionID: l.sessionID,
			tag: tag, seq: d.SequenceNumber, lockedUntil: d.LockedUntil}
	}
	if len(leftovers) > 0 && l.mode == PeekLock {
		addr, sid := l.addr, l.sessionID
		var hold settleJob
		if sid != "" { // the session's next receive must find them released (S-SES-3)
			hold.hold = []*link{l}
			l.settling++
		}
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
