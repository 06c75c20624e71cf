package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// The partition seam: every data-plane operation on a partition is a wire.Request,
// which runs itself on the node that leads the partition's group. call runs it here
// when this node's replica leads, and otherwise forwards it to the leader (peer.Call),
// following leader changes until the caller's deadline.

// retriable reports whether a failed attempt of req may be tried again on another
// replica: the attempt certainly did not take effect (the node was not the leader and
// the command never entered its log, or the node could not be reached), or req may be
// repeated whatever its first attempt did (wire.Request.Idempotent).
func retriable(req wire.Request, err error) bool {
	unknown := errors.Is(err, partition.ErrOutcomeUnknown)
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) {
		unknown = unknown || nl.Unknown
	}
	failover := errors.Is(err, partition.ErrNotLeader) || errors.Is(err, ErrUnavailable) || errors.Is(err, partition.ErrClosed)
	return failover && (!unknown || req.Idempotent())
}

// call runs req on the leader of g: here when the local replica leads, otherwise on the
// node that does, retrying on leader changes and unreachable nodes until ctx ends (at most
// callPatience when ctx has no deadline). abandon, when set, receives the outcome of a
// forwarded call whose caller gave up, so that locks it took can be released.
func (rt *Router) call(ctx context.Context, g group, req wire.Request, abandon func(*wire.Reply)) (wire.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callPatience)
		defer cancel()
	}
	loc := rt.loc
	backoff := 5 * time.Millisecond
	var last error
	tried := 0
	start := time.Now()
	for {
		target := loc.leaderOf(g, tried)
		var res wire.Result
		var err error
		if loc.leaderSilent(g, target, start) {
			// Wait for the election instead (silent.go): not a failed guess.
			err = fmt.Errorf("%w: %w: partition group %d", ErrUnavailable, errLeaderSilent, g.id)
			loc.forget(g.id)
		} else if target == rt.self && g.isHosted() {
			res, err = rt.execLocal(ctx, g.hostedReplica(), req)
		} else if target == "" {
			err = fmt.Errorf("%w: partition group %d has no known leader", ErrUnavailable, g.id)
		} else {
			res, err = rt.remote(ctx, target, g.id, req, abandon)
		}
		if err == nil || !retriable(req, err) {
			if err == nil {
				loc.noteLeader(g.id, target)
			}
			return res, err
		}
		last = err
		if !rt.loc.groupExists(g.id) {
			return wire.Result{}, fmt.Errorf("%w: partition group %d no longer exists (its entity was deleted)", fsm.ErrNotFound, g.id)
		}
		rt.log.Debug("partition call to retry", "node", rt.self, "group", g.id, "op", req.Op(), "target", target,
			"local", g.isHosted(), "err", err)
		var nl *partition.NotLeaderError
		switch {
		case errors.Is(err, errLeaderSilent):
		case errors.As(err, &nl) && nl.LeaderID != "" && nl.LeaderID != target:
			loc.hint(g.id, nl.LeaderID)
		default:
			loc.forget(g.id)
			tried++
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return wire.Result{}, fmt.Errorf("%w: %w", partition.ErrTimeout, last)
		case <-rt.closing:
			t.Stop()
			return wire.Result{}, ErrClosed
		case <-t.C:
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// callPatience bounds how long a call without a deadline follows leader changes.
const callPatience = 30 * time.Second

// remote sends req for group to node id.
func (rt *Router) remote(ctx context.Context, id string, group uint32, req wire.Request, abandon func(*wire.Reply)) (wire.Result, error) {
	addr := rt.n.addrOf(id)
	if addr == "" {
		return wire.Result{}, fmt.Errorf("%w: node %q has no known address", ErrUnavailable, id)
	}
	c := &wire.Call{Group: group, Req: req}
	if dl, ok := ctx.Deadline(); ok {
		c.Timeout = time.Until(dl)
	}
	switch req.(type) {
	case *wire.Enqueue, *wire.Schedule:
		r := rt.batcher(addr).send(ctx, c)
		return r.Result, r.Err
	}
	if abandon != nil {
		// A receive the caller gives up is cancelled on the peer too: a long-poll still
		// waiting there then locks nothing that nobody would take (what it locked before
		// the cancel arrives is released by abandon).
		c.ID = randomID()
		finished := make(chan struct{})
		defer close(finished)
		go func() {
			select {
			case <-ctx.Done():
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = rt.n.peer(addr).Cancel(cctx, c.ID)
			case <-finished:
			}
		}()
	}
	r, err := rt.n.peer(addr).Call(ctx, c, abandon)
	if err != nil {
		if c.ID != 0 && ctx.Err() == nil && errors.Is(err, partition.ErrOutcomeUnknown) {
			// The connection broke under the call (the peer restarted, or gossip
			// declared it dead and dropRPC closed it): the peer may still be serving
			// it, and a long-poll there would lock what arrives next for an answer that
			// cannot come back. Cancel it on a new connection, and return only once
			// the peer says it ended (having given back what it locked), so that the
			// caller's next receive, and its release by salt, come after it.
			cctx, cancel := context.WithTimeout(context.Background(), cancelPatience)
			_ = rt.n.peer(addr).Cancel(cctx, c.ID)
			cancel()
		}
		return wire.Result{}, err
	}
	return r.Result, r.Err
}

// serveCall runs a call from a peer on the replica hosted here.
func (s *rpcService) serveCall(c *wire.Call) wire.Reply {
	n := s.n
	ctx, cancel := n.rpc.callContext(c.Timeout)
	defer cancel()
	if c.ID != 0 {
		f := &inflightCall{cancel: cancel, done: make(chan struct{})}
		n.inflight.Store(c.ID, f)
		defer func() { n.inflight.Delete(c.ID); close(f.done) }()
	}
	switch r := n.routes().hosted(c.Group); {
	case r != nil:
		res, err := n.router.execLocal(ctx, r, c.Req)
		return wire.Reply{Result: res, Err: err}
	case !n.routes().groupExists(c.Group):
		return wire.Reply{Err: fmt.Errorf("%w: partition group %d does not exist", fsm.ErrNotFound, c.Group)}
	default:
		return wire.Reply{Err: &partition.NotLeaderError{}}
	}
}

// inflightCall is a long-polling call served for a peer (a receive): its context's
// cancel, and done, closed once the call has returned.
type inflightCall struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// cancelInflight cancels a long-polling call whose caller gave up, and answers once the
// call has returned (at most cancelPatience later): a receive cancelled there gave back
// what it had locked (partition.Receive), so the caller's next receive finds it.
func (s *rpcService) cancelInflight(id uint64) bool {
	n := s.n
	v, ok := n.inflight.LoadAndDelete(id)
	if !ok {
		return false
	}
	c := v.(*inflightCall)
	c.cancel()
	t := time.NewTimer(cancelPatience)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
	return true
}

// cancelPatience bounds how long a cancel waits for the call it cancelled to return.
const cancelPatience = 10 * time.Second

// callContext is the context of a call served for a peer: its deadline, and the node's
// shutdown (through the RPC layer's context, so a served call starts no goroutine of
// its own to watch for it).
func (l *rpcLayer) callContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		timeout = callPatience
	}
	return context.WithTimeout(l.ctx, timeout)
}

// waitChange returns when the partition a peer asks about changed (or may have a
// message for its receive) or the timeout passed; a remote receiver spanning several
// partitions sleeps on it.
func (s *rpcService) waitChange(req *wire.Wait) {
	n := s.n
	r := n.routes().hosted(req.Group)
	if r == nil {
		return
	}
	ch := r.p.Changed()
	var ok bool
	var err error
	if req.Accept {
		ok, err = r.p.SessionAvailable(req.Receive.Target)
	} else {
		ok, err = r.p.Available(req.Receive)
	}
	if ok || err != nil { // something to take, or not the leader: the caller tries again
		return
	}
	t := time.NewTimer(min(req.Timeout, remoteWaitCap))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-n.closing:
	}
}

// remoteWaitCap bounds one remote wait (the leader may change meanwhile). No wake-up is
// lost: the leader takes the change signal before it checks availability.
const remoteWaitCap = 5 * time.Second

// serveMetaApply applies a metadata command a peer forwarded to this node, the leader.
func (s *rpcService) serveMetaApply(req *wire.MetaApply) wire.MetaApplied {
	n := s.n
	ctx, cancel := n.rpc.callContext(req.Timeout)
	defer cancel()
	var out wire.MetaApplied
	e, err := meta.DecodeEntry(req.Entry)
	if err == nil {
		out.Index, err = n.meta.ProposeIndex(ctx, e.Cmd)
	}
	out.Err = err
	return out
}

// GroupInfo is what a node knows of one partition group it hosts.
type GroupInfo struct {
	Group     uint32
	Leader    string
	IsLeader  bool
	LastIndex uint64
	Applied   uint64
	Servers   []ServerInfo
}

type ServerInfo struct {
	ID    string
	Voter bool
}

// execLocal runs req on a replica hosted here: the partition API, or a configuration
// sync, which needs the node's metadata.
func (rt *Router) execLocal(ctx context.Context, r *replica, req wire.Request) (wire.Result, error) {
	if sc, ok := req.(*wire.SyncConfig); ok {
		return wire.Result{}, rt.n.rec.syncConfig(ctx, r, sc.MetaIndex)
	}
	return req.Run(ctx, r.p)
}

// ctxOutcome is the error of a call whose caller gave up after it was handed on.
func ctxOutcome(ctx context.Context) error {
	return fmt.Errorf("%w: %w: %w", partition.ErrTimeout, partition.ErrOutcomeUnknown, ctx.Err())
}

func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return binary.BigEndian.Uint64(b[:]) | 1
}
