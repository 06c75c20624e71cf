package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// gp is one partition group as the router uses it: operations (wire.Request) run on the
// group's leader wherever it is (call). Most operations need nothing more than do; the
// methods below are the ones that do more than run one request: receives, whose locks
// a caller that gave up must not leave behind, and the change signal.
type gp struct {
	rt *Router
	g  group
}

func (rt *Router) on(g group) gp { return gp{rt, g} }

// do runs req on the group's leader.
func (p gp) do(ctx context.Context, req wire.Request) (wire.Result, error) {
	return p.rt.call(ctx, p.g, req, nil)
}

// Receive long-polls on the leader. Messages a forwarded peek-lock receive locked after
// its caller gave up are released at once, not left locked until their lock expires.
//
// A receive whose answer was lost (the leader died after committing it: outcome
// unknown) would leave what it locked locked until the locks, or for a session the
// session lock, expire, and a session's holder would meanwhile receive later messages
// first. The receive carries a salt chosen here, which every lock it takes bears, so
// those locks are found on the new leader and released.
func (p gp) Receive(ctx context.Context, req fsm.Receive, wait time.Duration) ([]*fsm.Message, error) {
	if req.Mode == fsm.PeekLock && req.Salt == 0 {
		req.Salt = uint32(randomID())
	}
	r, err := p.rt.call(ctx, p.g, &wire.Receive{Req: req, Wait: wait}, func(lost *wire.Reply) {
		p.release(req.Mode, req.Target, req.SessionID, req.Owner, lost.Msgs)
	})
	if err != nil && req.Mode == fsm.PeekLock && errors.Is(err, partition.ErrOutcomeUnknown) {
		// Before the caller's next receive: a session's holder must get the released
		// messages first, in order (S-SES-3).
		p.releaseSalted(req)
	}
	return r.Msgs, err
}

// releaseSalted releases what a receive with req's salt locked, once a leader answers.
func (p gp) releaseSalted(req fsm.Receive) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.do(ctx, &wire.LockedWithSalt{Target: req.Target, Salt: req.Salt})
	if err != nil || len(r.Tokens) == 0 {
		return
	}
	_, _ = p.do(ctx, &wire.Settle{Req: fsm.Settle{Target: req.Target, Tokens: r.Tokens,
		Disposition: fsm.Release, SessionID: req.SessionID, Owner: req.Owner}})
}

func (p gp) release(mode fsm.ReceiveMode, t fsm.Target, sessionID, owner string, msgs []*fsm.Message) {
	if mode != fsm.PeekLock || len(msgs) == 0 {
		return
	}
	toks := make([]fsm.LockToken, len(msgs))
	for i, m := range msgs {
		toks[i] = m.LockToken
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = p.do(ctx, &wire.Settle{Req: fsm.Settle{Target: t, Tokens: toks, Disposition: fsm.Release,
		SessionID: sessionID, Owner: owner}})
}

func (p gp) ReceiveDeferred(ctx context.Context, req fsm.ReceiveDeferred) ([]*fsm.Message, error) {
	r, err := p.rt.call(ctx, p.g, &wire.ReceiveDeferred{Req: req}, func(lost *wire.Reply) {
		p.release(req.Mode, req.Target, req.SessionID, req.Owner, lost.Msgs)
	})
	return r.Msgs, err
}

func (p gp) AcceptSession(ctx context.Context, req fsm.AcceptSession, wait time.Duration) (string, int64, error) {
	r, err := p.rt.call(ctx, p.g, &wire.AcceptSession{Req: req, Wait: wait}, func(lost *wire.Reply) {
		if lost.Err == nil && lost.Session != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = p.do(ctx, &wire.ReleaseSession{SessionRef: wire.SessionRef{Target: req.Target, Session: lost.Session, Owner: req.Owner}})
		}
	})
	return r.Session, r.Until, err
}

// Stats counts the group's messages.
func (p gp) Stats(ctx context.Context) (fsm.Stats, error) {
	r, err := p.do(ctx, &wire.Stats{})
	if err != nil || r.Stats == nil {
		return fsm.Stats{}, err
	}
	return *r.Stats, nil
}

// IsLeader reports whether the group's leader is this node's replica.
func (p gp) IsLeader() bool { return p.g.leadsHere() }

// Changed returns a channel closed when the partition may have changed: the local
// replica's signal when this node leads the group, else a remote wait on the leader,
// which returns at once when the receive (or accept) may find something.
func (p gp) Changed(req fsm.Receive, accept bool) <-chan struct{} {
	if p.IsLeader() {
		return p.g.localPartition().Changed()
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		leader := p.rt.loc.leaderOf(p.g, 0)
		addr := p.rt.n.addrOf(leader)
		if addr == "" || leader == p.rt.self {
			t := time.NewTimer(50 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.rt.closing:
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), remoteWaitCap+5*time.Second)
		defer cancel()
		if err := p.rt.n.peer(addr).WaitChange(ctx, &wire.Wait{Group: p.g.id, Receive: req, Accept: accept, Timeout: remoteWaitCap}); err != nil {
			t := time.NewTimer(100 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.rt.closing:
			}
		}
	}()
	return ch
}
