package amqp

import (
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

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
	if l == nil && s.crossedDetach(t.Handle) {
		return nil // sent before the client saw our detach, which tells it why
	}
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
		l.syncCredit()
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
	if ts, ok := t.State.(*frames.TransactionalState); ok {
		p.txnID = ts.TxnID
	}
	if t.Aborted {
		l.partial = nil // part 2 §2.6.14: an aborted delivery is discarded
		c.unbuffer(p)
		s.deliveryDone(l)
		return nil
	}
	if !p.oversized && !p.overfull {
		n := int64(len(t.Payload))
		switch {
		case uint64(len(p.buf))+uint64(n) > l.maxMessageSize:
			c.unbuffer(p)
			p.oversized = true // stop buffering; reject at the end
		case c.buffered+n > c.cfg.MaxConnBuffered:
			c.unbuffer(p)
			p.overfull = true
		case p.buf == nil && !t.More:
			p.buf = t.Payload // single-frame delivery: the frame buffer is ours
			c.buffered += n
		default:
			p.buf = append(p.buf, t.Payload...)
			c.buffered += n
		}
	}
	if t.More {
		return nil
	}
	l.partial = nil
	c.buffered -= int64(len(p.buf)) // complete: from here on bounded by link credit
	switch {
	case p.oversized:
		s.settleIncoming(l, p, &frames.Rejected{Error: s.errorFor(l, condMessageSizeExceeded,
			fmt.Sprintf("The received message (delivery-id:%d) exceeds the limit (%d bytes) currently allowed on the link.", p.id, l.maxMessageSize))})
		s.deliveryDone(l)
		return nil
	case p.overfull:
		s.settleIncoming(l, p, &frames.Rejected{Error: s.errorFor(l, condResourceLimit,
			fmt.Sprintf("The received message (delivery-id:%d) does not fit in the %d bytes this connection may buffer for incomplete messages; send fewer large messages at once on one connection.", p.id, c.cfg.MaxConnBuffered))})
		s.deliveryDone(l)
		return nil
	}
	switch l.node {
	case nodeEntity:
		s.sendToEntity(l, p)
	case nodeCoordinator:
		s.coordinatorRequest(l, p)
	default:
		if p.txnID != nil {
			// A $management request inside a transaction (update-disposition of a
			// deferred message, schedule) would apply at once, not at commit: refuse it.
			s.txnRefuseRPC(l, p)
			return nil
		}
		s.rpcRequest(l, p)
	}
	return nil
}

// unbuffer forgets p's buffered bytes.
func (c *conn) unbuffer(p *partial) {
	c.buffered -= int64(len(p.buf))
	p.buf = nil
}

// settleIncoming confirms a client's delivery with a settled disposition.
func (s *session) settleIncoming(l *link, p *partial, st frames.DeliveryState) {
	if r, ok := st.(*frames.Rejected); ok && r.Error != nil {
		s.c.refused("amqp: rejecting a message", r.Error, "link", l.name, "address", l.addr.String())
	}
	if p.settled || l.detached {
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
	if l.node != nodeEntity && !c.outRoomFor(1) {
		return // requests wait until their responses can be written (outResume)
	}
	add := min(lc-have, c.cfg.MaxConnCredit-c.connCredit)
	add = max(add, min(minLinkCredit, lc)-have)
	if add <= 0 {
		return
	}
	l.credit += uint32(add)
	l.syncCredit()
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
		msgs, err = splitClientBatch(c.cfg, p.buf)
	} else {
		var m *Message
		m, err = parseClientMessage(c.cfg, p.buf)
		msgs = []*Message{m}
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
	if p.txnID != nil {
		s.txnSend(l, p, msgs)
		return
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
