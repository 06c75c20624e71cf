package amqp

import "time"

// ---- bounds on unsettled deliveries to clients ----
//
// A receiver may grant any credit (a uint32) and never settle; every peek-lock
// delivery then holds a lock in the broker and an entry in the session's
// unsettled map. Config.MaxUnsettledPerLink and MaxUnsettledPerConn bound the
// deliveries awaiting the client's outcome. At the bound the link is not
// refused: pump simply starts no receive, as if the credit were used up, and
// receiving resumes by itself once settlements, lock expiries or detaches
// bring the count under it. Receive-and-delete deliveries are settled when
// sent and do not count.

// addUnsettled records a peek-lock delivery sent on od.l under delivery-id id.
func (s *session) addUnsettled(id uint32, od *outDelivery) {
	s.unsettled[id] = od
	od.l.unsettled++
	s.c.unsettled++
	s.c.s.stats.unsettled.Add(1)
}

// removeUnsettled forgets delivery id (settled by the client).
func (s *session) removeUnsettled(id uint32, od *outDelivery) {
	delete(s.unsettled, id)
	if !od.uncounted {
		od.l.unsettled--
		s.c.uncount(1)
	}
}

// uncount takes n deliveries off the connection's count.
func (c *conn) uncount(n int) {
	if n == 0 {
		return
	}
	c.unsettled -= n
	c.s.stats.unsettled.Add(-int64(n))
	c.underConnBound()
}

// unreserve ends the reservation of l's receive (its result arrived).
func (c *conn) unreserve(l *link) {
	c.recvReserved -= l.reserved
	l.reserved = 0
	c.underConnBound()
}

// underConnBound asks the loop to pump every receiver once the connection is
// back under MaxUnsettledPerConn after one of them stopped at it.
func (c *conn) underConnBound() {
	if c.connStalled && c.unsettled+c.recvReserved < c.cfg.MaxUnsettledPerConn {
		c.connStalled, c.repump = false, true
	}
}

// unsettledRoom is how many more deliveries l may be sent now. Deliveries
// that the receives in flight may bring count as sent.
func (s *session) unsettledRoom(l *link) int {
	if l.mode == ReceiveAndDelete {
		return maxQueuedPerSession
	}
	c := s.c
	conn := c.cfg.MaxUnsettledPerConn - c.unsettled - c.recvReserved
	if conn <= 0 {
		c.connStalled = true
	}
	return min(c.cfg.MaxUnsettledPerLink-l.unsettled, conn)
}

// pumpAllLinks restarts receiving on every receiver of the connection.
func (c *conn) pumpAllLinks() {
	c.repump = false
	for _, s := range c.sessions {
		s.pumpAll()
	}
}

// expireUnsettled runs every AuthCheckInterval on the owner: a delivery whose
// peek lock has expired is back in its queue for other receivers, so it stops
// counting against the bounds (its link receives again). A message of a
// session holds no lock of its own: it goes with the link, which loses its
// session lock and is detached.
func (c *conn) expireUnsettled() {
	now := c.now()
	for _, s := range c.sessions {
		freed := map[*link]bool{}
		for _, od := range s.unsettled {
			if od.uncounted || od.sessionID != "" || od.lockedUntil.IsZero() || !now.After(od.lockedUntil) {
				continue
			}
			od.uncounted = true
			od.l.unsettled--
			c.uncount(1)
			freed[od.l] = true
		}
		for l := range freed {
			s.pump(l)
		}
	}
}

// renewedLocks records the new expiries of locks renewed through $management
// (exp[i] for tokens[i]), so that renewed deliveries keep counting, and count
// again if they were taken off at their old expiry.
func (c *conn) renewedLocks(tokens []UUID, exp []time.Time) {
	until := make(map[UUID]time.Time, len(tokens))
	for i, t := range tokens {
		if i < len(exp) {
			until[t] = exp[i]
		}
	}
	now := c.now()
	for _, s := range c.sessions {
		for _, od := range s.unsettled {
			t, ok := until[od.token]
			if !ok || od.sessionID != "" {
				continue
			}
			od.lockedUntil = t
			if od.uncounted && t.After(now) && !od.l.detached {
				od.uncounted = false
				od.l.unsettled++
				c.unsettled++
				c.s.stats.unsettled.Add(1)
			}
		}
	}
}
