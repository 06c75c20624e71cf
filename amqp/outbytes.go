package amqp

import (
	"context"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// ---- bytes queued for a client (Config.MaxConnOutgoing) ----
//
// A client that stops reading (its TCP window full) must not make the node
// buffer what its links would send. conn.queued counts the bytes held for one
// connection and not yet written to its socket: deliveries and $management or
// $cbs responses from the moment they are encoded (in the goroutine that
// fetched them) until they are framed, plus the framed bytes waiting for the
// writer. Everything that adds to it first reserves room (reserveOut):
//
//   - a peek-lock receive keeps the deliveries that fit and releases the rest
//     to the queue; the owner then starts no receive on any link until the
//     writer made room (outStalled, loop);
//   - a receive-and-delete receive (its messages are already gone from the
//     queue) and an RPC response wait in their goroutine until they fit;
//   - the owner itself stops reading from the peer while its framed bytes pass
//     the bound (send), so it takes no new requests meanwhile.
//
// One item larger than the bound is let through when nothing else is queued,
// so a message of any allowed size can still be delivered.

// addQueued changes the bytes queued for this connection by n (any goroutine).
func (c *conn) addQueued(n int64) {
	if n == 0 {
		return
	}
	v := c.queued.Add(n)
	c.s.stats.outQueued.Add(n)
	if n > 0 {
		c.s.stats.notePeak(v)
		return
	}
	if c.roomWaiters.Load() > 0 && v < c.cfg.MaxConnOutgoing {
		c.roomMu.Lock()
		if c.roomCh != nil {
			close(c.roomCh)
			c.roomCh = nil
		}
		c.roomMu.Unlock()
	}
}

// tryReserveOut adds n to the queued bytes if they fit under MaxConnOutgoing,
// or if nothing but mine (what the caller itself reserved and still holds) is
// queued: an item larger than the bound, or one a goroutine holding earlier
// items of its batch would otherwise wait for forever.
func (c *conn) tryReserveOut(n, mine int64) bool {
	for {
		cur := c.queued.Load()
		if cur > mine && cur+n > c.cfg.MaxConnOutgoing {
			return false
		}
		if c.queued.CompareAndSwap(cur, cur+n) {
			c.s.stats.outQueued.Add(n)
			c.s.stats.notePeak(cur + n)
			return true
		}
	}
}

// reserveOut waits until n bytes fit (tryReserveOut), or ctx ends.
func (c *conn) reserveOut(ctx context.Context, n, mine int64) error {
	for {
		if c.tryReserveOut(n, mine) {
			return nil
		}
		c.roomWaiters.Add(1)
		c.roomMu.Lock()
		if c.roomCh == nil {
			c.roomCh = make(chan struct{})
		}
		ch := c.roomCh
		c.roomMu.Unlock()
		if c.tryReserveOut(n, mine) { // room was made before the channel existed
			c.roomWaiters.Add(-1)
			return nil
		}
		select {
		case <-ch:
			c.roomWaiters.Add(-1)
		case <-ctx.Done():
			c.roomWaiters.Add(-1)
			return ctx.Err()
		}
	}
}

// outRoomFor reports whether the owner may start more outgoing work that
// needs about n bytes. When not, receivers wait for the writer (outStalled).
func (c *conn) outRoomFor(n int64) bool {
	cur := c.queued.Load()
	if cur == 0 || cur+n <= c.cfg.MaxConnOutgoing {
		return true
	}
	c.outStalled = true
	c.outNeed = max(c.outNeed, n)
	c.s.stats.outStalls.Add(1)
	return false
}

// outResume restarts the receivers and RPC links that stopped at
// MaxConnOutgoing once what they need fits again (owner, each loop turn).
func (c *conn) outResume() {
	if !c.outStalled {
		return
	}
	if cur := c.queued.Load(); cur > 0 && cur+c.outNeed > c.cfg.MaxConnOutgoing {
		return
	}
	c.outStalled, c.outNeed = false, 0
	for _, s := range c.sessions {
		for _, l := range s.links {
			if l.role == frames.RoleSender && l.node != nodeEntity {
				s.topUp(l)
			}
		}
		s.pumpAll()
	}
}
