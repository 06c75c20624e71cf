package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// gp is one partition group as the router uses it: the partition API, executed on the
// group's leader wherever it is (call).
type gp struct {
	n *Node
	g group
}

func (n *Node) on(g group) gp { return gp{n, g} }

func (p gp) do(ctx context.Context, req *CallReq) *CallResp { return p.n.call(ctx, p.g, req, nil) }

func (p gp) Enqueue(ctx context.Context, msgs []*fsm.Message) ([]int64, error) {
	r := p.do(ctx, &CallReq{Op: opEnqueue, Msgs: msgs})
	return r.Seqs, r.err
}

func (p gp) Schedule(ctx context.Context, msgs []*fsm.Message) ([]int64, error) {
	r := p.do(ctx, &CallReq{Op: opSchedule, Msgs: msgs})
	return r.Seqs, r.err
}

func (p gp) Cancel(ctx context.Context, seqs []int64) error {
	return p.do(ctx, &CallReq{Op: opCancel, Seqs: seqs}).err
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
	r := p.n.call(ctx, p.g, &CallReq{Op: opReceive, Receive: req, Wait: wait}, func(lost *CallResp) {
		p.release(req.Mode, req.Target, req.SessionID, req.Owner, lost.Msgs)
	})
	if r.err != nil && req.Mode == fsm.PeekLock && errors.Is(r.err, partition.ErrOutcomeUnknown) {
		// Before the caller's next receive: a session's holder must get the released
		// messages first, in order (S-SES-3).
		p.releaseSalted(req)
	}
	return r.Msgs, r.err
}

// releaseSalted releases what a receive with req's salt locked, once a leader answers.
func (p gp) releaseSalted(req fsm.Receive) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := p.n.call(ctx, p.g, &CallReq{Op: opLockedWithSalt, Target: req.Target, Receive: fsm.Receive{Salt: req.Salt}}, nil)
	if r.err != nil || len(r.Tokens) == 0 {
		return
	}
	p.n.call(ctx, p.g, &CallReq{Op: opSettle, Settle: fsm.Settle{Target: req.Target, Tokens: r.Tokens,
		Disposition: fsm.Release, SessionID: req.SessionID, Owner: req.Owner}}, nil)
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
	p.n.call(ctx, p.g, &CallReq{Op: opSettle, Settle: fsm.Settle{Target: t, Tokens: toks, Disposition: fsm.Release,
		SessionID: sessionID, Owner: owner}}, nil)
}

func (p gp) ReceiveDeferred(ctx context.Context, req fsm.ReceiveDeferred) ([]*fsm.Message, error) {
	r := p.n.call(ctx, p.g, &CallReq{Op: opReceiveDeferred, Deferred: req}, func(lost *CallResp) {
		p.release(req.Mode, req.Target, req.SessionID, req.Owner, lost.Msgs)
	})
	return r.Msgs, r.err
}

func (p gp) Settle(ctx context.Context, req fsm.Settle) ([]error, error) {
	r := p.do(ctx, &CallReq{Op: opSettle, Settle: req})
	return r.tokenErrs, r.err
}

func (p gp) RenewLock(ctx context.Context, t fsm.Target, tokens []fsm.LockToken) ([]int64, error) {
	r := p.do(ctx, &CallReq{Op: opRenewLock, Target: t, Tokens: tokens})
	return r.Until, r.err
}

func (p gp) AcceptSession(ctx context.Context, req fsm.AcceptSession, wait time.Duration) (string, int64, error) {
	r := p.n.call(ctx, p.g, &CallReq{Op: opAcceptSession, Accept: req, Wait: wait}, func(lost *CallResp) {
		if lost.err == nil && lost.Session != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p.n.call(ctx, p.g, &CallReq{Op: opReleaseSession, Target: req.Target, Session: lost.Session, Owner: req.Owner}, nil)
		}
	})
	var until int64
	if len(r.Until) > 0 {
		until = r.Until[0]
	}
	return r.Session, until, r.err
}

func (p gp) ReleaseSession(ctx context.Context, t fsm.Target, sessionID, owner string) error {
	return p.do(ctx, &CallReq{Op: opReleaseSession, Target: t, Session: sessionID, Owner: owner}).err
}

func (p gp) RenewSession(ctx context.Context, t fsm.Target, sessionID, owner string) (int64, error) {
	r := p.do(ctx, &CallReq{Op: opRenewSession, Target: t, Session: sessionID, Owner: owner})
	var until int64
	if len(r.Until) > 0 {
		until = r.Until[0]
	}
	return until, r.err
}

func (p gp) SetSessionState(ctx context.Context, req fsm.SetSessionState) error {
	return p.do(ctx, &CallReq{Op: opSetState, SetState: req}).err
}

func (p gp) SessionState(ctx context.Context, t fsm.Target, sessionID string) ([]byte, error) {
	r := p.do(ctx, &CallReq{Op: opGetState, Target: t, Session: sessionID})
	return r.State, r.err
}

func (p gp) HeldSessionState(ctx context.Context, t fsm.Target, sessionID, owner string) ([]byte, error) {
	r := p.do(ctx, &CallReq{Op: opGetState, Target: t, Session: sessionID, Owner: owner})
	return r.State, r.err
}

func (p gp) ListSessions(ctx context.Context, t fsm.Target) ([]string, error) {
	r := p.do(ctx, &CallReq{Op: opListSessions, Target: t})
	return r.Sessions, r.err
}

func (p gp) SessionsUpdatedSince(ctx context.Context, t fsm.Target, since int64) ([]string, error) {
	r := p.do(ctx, &CallReq{Op: opSessionsUpdatedSince, Target: t, From: since})
	return r.Sessions, r.err
}

func (p gp) Peek(ctx context.Context, t fsm.Target, from int64, max int) ([]*fsm.Message, error) {
	r := p.do(ctx, &CallReq{Op: opPeek, Target: t, From: from, Max: max})
	return r.Msgs, r.err
}

func (p gp) Purge(ctx context.Context, t fsm.Target) (int, error) {
	r := p.do(ctx, &CallReq{Op: opPurge, Target: t})
	return r.Count, r.err
}

// IsLeader reports whether the group's leader is this node's replica.
func (p gp) IsLeader() bool { return p.g.local != nil && p.g.local.p.IsLeader() }

// Changed returns a channel closed when the partition may have changed: the local
// replica's signal when this node leads the group, else a remote wait on the leader,
// which returns at once when the receive (or accept) may find something.
func (p gp) Changed(req fsm.Receive, accept bool) <-chan struct{} {
	if p.IsLeader() {
		return p.g.local.p.Changed()
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		leader := p.n.leaderOf(p.g, 0)
		addr := p.n.addrOf(leader)
		if addr == "" || leader == p.n.cfg.NodeID {
			t := time.NewTimer(50 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.n.closing:
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), remoteWaitCap+5*time.Second)
		defer cancel()
		var ok bool
		if err := p.n.rpc.call(ctx, addr, "WaitChange", &WaitReq{Group: p.g.id, Receive: req, Accept: accept, Timeout: remoteWaitCap}, &ok, nil); err != nil {
			t := time.NewTimer(100 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.n.closing:
			}
		}
	}()
	return ch
}
