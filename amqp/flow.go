package amqp

import (
	"fmt"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

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
	if l == nil && s.crossedDetach(*f.Handle) {
		return nil // sent before the client saw our detach
	}
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
			l.syncCredit()
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
	l.syncCredit()
	l.drain = false
	f := s.linkFlow(l)
	f.Drain = true
	s.c.send(s.localChannel, f, nil)
}
