package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/partition/transport"
)

// Node-to-node calls (forwarding, admin fan-out) travel over the cluster port's RPC
// stream type. One connection per peer, redialled after a failure, multiplexes any
// number of concurrent calls. The protocol is cluster/wire: a caller dials
// wire.RouteID, and both ends negotiate a version (wire.Handshake); calls are typed
// messages with a hand-written binary codec. A peer of an older release knows no such
// route and closes the connection: the caller then dials route 0 and speaks version 1,
// net/rpc with gob (wirev1.go), which this node also serves to older callers. Each
// node-to-node operation is a method of peer, the typed client.

// rpcName is the service name every node registers for version 1.
const rpcName = "Q"

// peerConn is the connection to one peer: exactly one of v2 and v1 is set.
type peerConn struct {
	v2 *wire.Client
	v1 *rpc.Client
}

func (c *peerConn) close() {
	if c.v2 != nil {
		c.v2.Close()
	} else {
		c.v1.Close()
	}
}

type rpcLayer struct {
	n      *Node
	layer  *transport.Layer // route 0: version 1
	layer2 *transport.Layer // wire.RouteID: negotiated versions
	srv    *rpc.Server      // version 1
	svc    *rpcService      // what both versions serve
	// ctx ends when the node starts closing: the parent of every served call's context.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	peers  map[string]*peerConn // by peer cluster address; owner: mu
	closed bool
	conns  map[net.Conn]struct{} // accepted, closed on shutdown
	wg     sync.WaitGroup
}

func startRPC(n *Node) (*rpcLayer, error) {
	layer, err := n.mux.Route(transport.TypeRPC, 0)
	if err != nil {
		return nil, err
	}
	layer2, err := n.mux.Route(transport.TypeRPC, wire.RouteID)
	if err != nil {
		layer.Close()
		return nil, err
	}
	svc := &rpcService{n: n}
	srv := rpc.NewServer()
	if err := srv.RegisterName(rpcName, svc); err != nil {
		layer.Close()
		layer2.Close()
		return nil, err
	}
	l := &rpcLayer{n: n, layer: layer, layer2: layer2, srv: srv, svc: svc, peers: map[string]*peerConn{}, conns: map[net.Conn]struct{}{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(3)
	go l.accept(layer, l.serveV1)
	go l.accept(layer2, l.serveV2)
	go func() {
		defer l.wg.Done()
		select {
		case <-n.closing:
		case <-l.ctx.Done():
		}
		l.cancel()
	}()
	return l, nil
}

func (l *rpcLayer) accept(layer *transport.Layer, serve func(net.Conn)) {
	defer l.wg.Done()
	for {
		c, err := layer.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			serve(c)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

func (l *rpcLayer) serveV1(c net.Conn) {
	l.srv.ServeCodec(newServerCodec(c, &l.wg))
}

func (l *rpcLayer) serveV2(c net.Conn) {
	if _, err := wire.Accept(c, 5*time.Second); err != nil {
		c.Close()
		return
	}
	wire.Serve(c, l.svc.serveWire, wireErrors{}, &l.wg, 0)
}

// conn returns the connection to the peer at addr, dialling it when there is none.
// The dial happens outside mu and within ctx (at most 5 s): a peer that accepts TCP but
// answers nothing (paused, SIGSTOP) must not hold up calls to every other peer.
func (l *rpcLayer) conn(ctx context.Context, addr string) (*peerConn, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if c, ok := l.peers[addr]; ok {
		if c.v2 == nil || c.v2.Err() == nil {
			l.mu.Unlock()
			return c, nil
		}
		// The connection failed before this call was sent (the peer restarted, say):
		// redial rather than fail a call that never left.
		delete(l.peers, addr)
		c.close()
	}
	l.mu.Unlock()
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(d), time.Millisecond))
	}
	conn, v, err := l.dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close()
		return nil, ErrClosed
	}
	if other, ok := l.peers[addr]; ok { // another call dialled meanwhile: keep one
		conn.Close()
		return other, nil
	}
	// The connection's goroutines join l.wg, which close waits on once closed is set:
	// they start under mu, after the check above.
	c := &peerConn{}
	if v >= wire.MinVersion {
		c.v2 = wire.NewClient(conn, wireErrors{}, &l.wg, 0)
	} else {
		c.v1 = rpc.NewClientWithCodec(newClientCodec(conn, &l.wg))
	}
	l.peers[addr] = c
	return c, nil
}

// dial connects to addr and negotiates a version: the newest both speak, or version 1
// when the peer closes the negotiating route (a release before cluster/wire).
func (l *rpcLayer) dial(addr string, timeout time.Duration) (net.Conn, int, error) {
	start := time.Now()
	conn, err := l.layer2.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: dial %s: %v", ErrUnavailable, addr, err)
	}
	v, err := wire.Handshake(conn, timeout)
	if err == nil {
		return conn, v, nil
	}
	conn.Close()
	if errors.Is(err, wire.ErrNoVersion) {
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, err)
	}
	conn, err = l.layer.Dial(raft.ServerAddress(addr), max(timeout-time.Since(start), time.Millisecond))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: dial %s: %v", ErrUnavailable, addr, err)
	}
	l.n.log.Debug("peer speaks wire version 1", "addr", addr)
	return conn, 1, nil
}

func (l *rpcLayer) drop(addr string, c *peerConn) {
	l.mu.Lock()
	if l.peers[addr] == c {
		delete(l.peers, addr)
	}
	l.mu.Unlock()
	c.close()
}

// dropAddr closes the connection to the peer at addr, if there is one: calls in flight
// on it fail at once, their outcome unknown, and the next call dials again. The node
// calls it when gossip declares the peer dead or gone: a node cut off by the network, or
// paused, leaves its connections open and silent, and a call forwarded to it (a send to
// a quiet group whose leader it was, say) would otherwise wait out its whole deadline
// before the client could retry on the new leader.
func (l *rpcLayer) dropAddr(addr string) {
	l.mu.Lock()
	c, ok := l.peers[addr]
	if ok {
		delete(l.peers, addr)
	}
	l.mu.Unlock()
	if ok {
		c.close()
	}
}

// invoke calls method m on the peer at addr and waits for its reply or ctx. When ctx
// ends first, the call goes on and abandoned (if set) runs once its reply has arrived, so
// a caller can undo what the peer did on its behalf (release locks nobody will settle).
func (l *rpcLayer) invoke(ctx context.Context, addr string, m wire.Method, args, reply wire.Message, abandoned func()) (err error) {
	if mt := l.n.metrics; mt != nil {
		start := time.Now()
		defer func() { mt.observeRPC(m.String(), time.Since(start), err) }()
	}
	c, err := l.conn(ctx, addr)
	if err != nil {
		return err
	}
	if c.v2 != nil {
		// The reply is decoded on the caller's goroutine (no goroutine per call).
		resp := c.v2.Go(m, args)
		select {
		case r := <-resp:
			if r.Err == nil {
				r.Err = wire.Decode(r.Body, reply, wireErrors{})
			}
			return l.outcome(addr, c, m, r.Err)
		case <-ctx.Done():
			if abandoned != nil {
				go func() {
					if r := <-resp; r.Err == nil && wire.Decode(r.Body, reply, wireErrors{}) == nil {
						abandoned()
					}
				}()
			}
			return fmt.Errorf("%w: %s on %s: %w", partition.ErrTimeout, m, addr, ctx.Err())
		}
	}
	done, err := goV1(c.v1, m, args, reply)
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return l.outcome(addr, c, m, err)
	case <-ctx.Done():
		if abandoned != nil {
			go func() {
				if err := <-done; err == nil {
					abandoned()
				}
			}()
		}
		return fmt.Errorf("%w: %s on %s: %w", partition.ErrTimeout, m, addr, ctx.Err())
	}
}

// outcome is the error of a call that got an answer or failed: nil, or unavailable
// with an unknown outcome (the request may have reached the peer and taken effect
// before the connection broke). A broken connection is dropped, to be redialled.
func (l *rpcLayer) outcome(addr string, c *peerConn, m wire.Method, err error) error {
	if err == nil {
		return nil
	}
	var se *wire.ServerError
	var rse rpc.ServerError
	if !errors.As(err, &se) && !errors.As(err, &rse) {
		l.drop(addr, c)
	}
	return fmt.Errorf("%w: %w: call %s on %s: %v", ErrUnavailable, partition.ErrOutcomeUnknown, m, addr, err)
}

func (l *rpcLayer) close() {
	l.cancel()
	l.mu.Lock()
	l.closed = true
	for _, c := range l.peers {
		c.close()
	}
	l.peers = map[string]*peerConn{}
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.layer.Close()
	l.layer2.Close()
	l.wg.Wait()
}

// ---- the typed client

// peer is the typed client of one node: one method per node-to-node call.
type peer struct {
	l    *rpcLayer
	addr string
}

// peer returns the client of the node at cluster address addr.
func (n *Node) peer(addr string) peer { return peer{n.rpc, addr} }

// Call runs an operation on a partition group the peer hosts.
func (p peer) Call(ctx context.Context, c *wire.Call, abandoned func(*wire.Reply)) (*wire.Reply, error) {
	r := &wire.Reply{}
	var onAbandon func()
	if abandoned != nil {
		onAbandon = func() { abandoned(r) }
	}
	if err := p.l.invoke(ctx, p.addr, wire.MethodCall, c, r, onAbandon); err != nil {
		return nil, err
	}
	return r, nil
}

// Multi runs independent calls concurrently on the peer.
func (p peer) Multi(ctx context.Context, m *wire.Multi) (*wire.MultiReply, error) {
	r := &wire.MultiReply{}
	return r, p.l.invoke(ctx, p.addr, wire.MethodMulti, m, r, nil)
}

// WaitChange returns when a partition the peer leads may have changed.
func (p peer) WaitChange(ctx context.Context, w *wire.Wait) error {
	return p.l.invoke(ctx, p.addr, wire.MethodWaitChange, w, wire.Empty{}, nil)
}

// MetaApply applies a metadata command on the peer, the metadata leader.
func (p peer) MetaApply(ctx context.Context, m *wire.MetaApply) (*wire.MetaApplied, error) {
	r := &wire.MetaApplied{}
	return r, p.l.invoke(ctx, p.addr, wire.MethodMetaApply, m, r, nil)
}

// GroupStatus asks what the peer knows of groups ids (none: all it hosts).
func (p peer) GroupStatus(ctx context.Context, ids []uint32) ([]GroupInfo, error) {
	r := &wire.GroupStatus{}
	if err := p.l.invoke(ctx, p.addr, wire.MethodGroupStatus, &wire.GroupIDs{IDs: ids}, r, nil); err != nil {
		return nil, err
	}
	out := make([]GroupInfo, len(r.Groups))
	for i, g := range r.Groups {
		out[i] = GroupInfo{Group: g.Group, Leader: g.Leader, IsLeader: g.IsLeader, LastIndex: g.LastIndex, Applied: g.Applied}
		for _, s := range g.Servers {
			out[i].Servers = append(out[i].Servers, ServerInfo{ID: s.ID, Voter: s.Voter})
		}
	}
	return out, nil
}

// Transfer asks the peer, the leader of group, to hand its leadership to node to. The
// first error is the call's, the second the peer's answer.
func (p peer) Transfer(ctx context.Context, group uint32, to string) (remote, err error) {
	return p.done(ctx, wire.MethodTransfer, &wire.Transfer{Group: group, To: to})
}

// HandOver drains the peer: it hands over the leadership of every group it leads.
func (p peer) HandOver(ctx context.Context) (remote, err error) {
	return p.done(ctx, wire.MethodHandOver, &wire.Transfer{Timeout: timeLeft(ctx)})
}

// RemoveNode asks the peer, the metadata leader, to remove node id.
func (p peer) RemoveNode(ctx context.Context, id string) (remote, err error) {
	return p.done(ctx, wire.MethodRemoveNode, &wire.Transfer{To: id, Timeout: timeLeft(ctx)})
}

func (p peer) done(ctx context.Context, m wire.Method, t *wire.Transfer) (remote, err error) {
	r := &wire.Done{}
	if err := p.l.invoke(ctx, p.addr, m, t, r, nil); err != nil {
		return nil, err
	}
	return r.Err, nil
}

// Digests asks for the state digests of the partition replicas the peer hosts.
func (p peer) Digests(ctx context.Context) (map[uint32]string, error) {
	r := &wire.Digests{}
	return r.ByGroup, p.l.invoke(ctx, p.addr, wire.MethodDigests, wire.Empty{}, r, nil)
}

// MetaDigest asks for the peer's metadata digest.
func (p peer) MetaDigest(ctx context.Context) (MetaDigest, error) {
	r := &wire.MetaDigest{}
	err := p.l.invoke(ctx, p.addr, wire.MethodMetaDigest, wire.Empty{}, r, nil)
	return MetaDigest{Digest: r.Digest, Applied: r.Applied}, err
}

// Cancel cancels the long-poll with call id on the peer.
func (p peer) Cancel(ctx context.Context, id uint64) error {
	return p.l.invoke(ctx, p.addr, wire.MethodCancel, &wire.CancelCall{ID: id}, &wire.Cancelled{}, nil)
}

// ---- the server side of version 2

// serveWire serves one version-2 call from a peer: decode, run, encode the reply.
func (s *rpcService) serveWire(m wire.Method, body []byte) (wire.Message, error) {
	n := s.n
	serve := func(args wire.Message, run func() wire.Message) (wire.Message, error) {
		if err := wire.Decode(body, args, wireErrors{}); err != nil {
			return nil, fmt.Errorf("%v: %v", m, err)
		}
		return run(), nil
	}
	switch m {
	case wire.MethodCall:
		c := &wire.Call{}
		return serve(c, func() wire.Message { r := s.serveCall(c); return &r })
	case wire.MethodMulti:
		c := &wire.Multi{}
		return serve(c, func() wire.Message { r := s.serveMulti(c); return &r })
	case wire.MethodWaitChange:
		w := &wire.Wait{}
		return serve(w, func() wire.Message { s.waitChange(w); return wire.Empty{} })
	case wire.MethodMetaApply:
		a := &wire.MetaApply{}
		return serve(a, func() wire.Message { r := s.serveMetaApply(a); return &r })
	case wire.MethodGroupStatus:
		ids := &wire.GroupIDs{}
		return serve(ids, func() wire.Message { r := toWireGroups(n.localGroupStatus(ids.IDs)); return &r })
	case wire.MethodTransfer, wire.MethodHandOver, wire.MethodRemoveNode:
		t := &wire.Transfer{}
		return serve(t, func() wire.Message { return &wire.Done{Err: s.serveTransfer(m, t)} })
	case wire.MethodDigests:
		return serve(wire.Empty{}, func() wire.Message { return &wire.Digests{ByGroup: n.ops.localDigests()} })
	case wire.MethodMetaDigest:
		return serve(wire.Empty{}, func() wire.Message {
			d := metaDigest(n.meta)
			return &wire.MetaDigest{Digest: d.Digest, Applied: d.Applied}
		})
	case wire.MethodCancel:
		c := &wire.CancelCall{}
		return serve(c, func() wire.Message { return &wire.Cancelled{OK: s.cancelInflight(c.ID)} })
	case wire.MethodBackup:
		c := &wire.Backup{}
		return serve(c, func() wire.Message {
			ctx, cancel := context.WithCancel(n.rpc.ctx)
			defer cancel()
			r := n.serveBackup(ctx, c)
			return &r
		})
	}
	return nil, fmt.Errorf("unknown method %v", m)
}

func toWireGroups(gs []GroupInfo) wire.GroupStatus {
	out := wire.GroupStatus{Groups: make([]wire.GroupInfo, len(gs))}
	for i, g := range gs {
		out.Groups[i] = wire.GroupInfo{Group: g.Group, Leader: g.Leader, IsLeader: g.IsLeader, LastIndex: g.LastIndex, Applied: g.Applied}
		for _, s := range g.Servers {
			out.Groups[i].Servers = append(out.Groups[i].Servers, wire.Server{ID: s.ID, Voter: s.Voter})
		}
	}
	return out
}

// serveTransfer runs a leadership transfer, a drain or a node removal for a peer.
func (s *rpcService) serveTransfer(m wire.Method, t *wire.Transfer) error {
	n := s.n
	switch m {
	case wire.MethodTransfer:
		return n.transferLocal(t.Group, t.To)
	case wire.MethodHandOver:
		ctx, cancel := n.rpc.callContext(t.Timeout)
		defer cancel()
		return n.ops.handOverLogged(ctx, "drain")
	default:
		ctx, cancel := n.rpc.callContext(t.Timeout)
		defer cancel()
		return n.ops.RemoveNode(ctx, t.To)
	}
}

// ---- version 1: net/rpc with gob

// goV1 sends a version-1 call; the channel reports its outcome once reply is filled.
func goV1(c *rpc.Client, m wire.Method, args, reply wire.Message) (<-chan error, error) {
	var a, r any
	var fill func()
	switch m {
	case wire.MethodCall:
		call := args.(*wire.Call)
		req, err := v1Call(call)
		if err != nil {
			return nil, err
		}
		resp := &CallResp{}
		a, r, fill = req, resp, func() { *reply.(*wire.Reply) = fromV1Reply(call.Req, resp) }
	case wire.MethodMulti:
		calls := args.(*wire.Multi).Calls
		req := &MultiReq{Calls: make([]CallReq, len(calls))}
		for i := range calls {
			c, err := v1Call(&calls[i])
			if err != nil {
				return nil, err
			}
			req.Calls[i] = *c
		}
		resp := &MultiResp{}
		a, r, fill = req, resp, func() {
			out := reply.(*wire.MultiReply)
			out.Replies = make([]wire.Reply, len(resp.Resps))
			for i := range resp.Resps {
				if i < len(calls) {
					out.Replies[i] = fromV1Reply(calls[i].Req, &resp.Resps[i])
				}
			}
		}
	case wire.MethodWaitChange:
		w := args.(*wire.Wait)
		a, r, fill = &WaitReq{Group: w.Group, Receive: w.Receive, Accept: w.Accept, Timeout: w.Timeout}, new(bool), func() {}
	case wire.MethodMetaApply:
		ma := args.(*wire.MetaApply)
		resp := &MetaApplyResp{}
		a, r, fill = &MetaApplyReq{Entry: ma.Entry, Timeout: ma.Timeout}, resp, func() {
			*reply.(*wire.MetaApplied) = wire.MetaApplied{Err: resp.E.err(), Index: resp.Index}
		}
	case wire.MethodGroupStatus:
		ids := args.(*wire.GroupIDs).IDs
		if ids == nil {
			ids = []uint32{}
		}
		var gs []GroupInfo
		a, r, fill = ids, &gs, func() { *reply.(*wire.GroupStatus) = toWireGroups(gs) }
	case wire.MethodTransfer, wire.MethodHandOver, wire.MethodRemoveNode:
		t := args.(*wire.Transfer)
		w := &WireErr{}
		a, r, fill = &TransferReq{Group: t.Group, To: t.To, Timeout: t.Timeout}, w, func() {
			if w.Msg != "" {
				reply.(*wire.Done).Err = w.err()
			}
		}
	case wire.MethodDigests:
		var d map[uint32]string
		a, r, fill = struct{}{}, &d, func() { reply.(*wire.Digests).ByGroup = d }
	case wire.MethodMetaDigest:
		var d MetaDigest
		a, r, fill = struct{}{}, &d, func() { *reply.(*wire.MetaDigest) = wire.MetaDigest{Digest: d.Digest, Applied: d.Applied} }
	case wire.MethodCancel:
		var ok bool
		a, r, fill = args.(*wire.CancelCall).ID, &ok, func() { reply.(*wire.Cancelled).OK = ok }
	default:
		return nil, fmt.Errorf("%w: method %v is unknown to a peer speaking wire version 1", fsm.ErrBadCommand, m)
	}
	call := c.Go(rpcName+"."+m.String(), a, r, make(chan *rpc.Call, 1))
	out := make(chan error, 1)
	go func() {
		<-call.Done
		if call.Error == nil {
			fill()
		}
		out <- call.Error
	}()
	return out, nil
}

// rpcService is what a node serves its peers: the serveX methods run the calls of
// either version; the exported ones are version 1's net/rpc methods (named as the
// wire.Method names), which convert and delegate.
type rpcService struct{ n *Node }

// Call executes an operation on a partition replica hosted here.
func (s *rpcService) Call(req *CallReq, resp *CallResp) error {
	c, err := fromV1Call(req)
	if err != nil {
		*resp = CallResp{E: toWire(err)}
		return nil
	}
	r := s.serveCall(c)
	*resp = v1Reply(&r)
	return nil
}

// Multi runs a batch of calls concurrently on the replicas hosted here.
func (s *rpcService) Multi(req *MultiReq, resp *MultiResp) error {
	resp.Resps = make([]CallResp, len(req.Calls))
	var wg sync.WaitGroup
	for i := range req.Calls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = s.Call(&req.Calls[i], &resp.Resps[i])
		}(i)
	}
	wg.Wait()
	return nil
}

// WaitChange returns when the partition changed or the timeout passed.
func (s *rpcService) WaitChange(req *WaitReq, resp *bool) error {
	s.waitChange(&wire.Wait{Group: req.Group, Receive: req.Receive, Accept: req.Accept, Timeout: req.Timeout})
	*resp = true
	return nil
}

// MetaApply applies a metadata command on the leader.
func (s *rpcService) MetaApply(req *MetaApplyReq, resp *MetaApplyResp) error {
	r := s.serveMetaApply(&wire.MetaApply{Entry: req.Entry, Timeout: req.Timeout})
	resp.Index, resp.E = r.Index, toWire(r.Err)
	return nil
}

// GroupStatus reports the groups hosted here (all of them when ids is empty).
func (s *rpcService) GroupStatus(ids []uint32, resp *[]GroupInfo) error {
	*resp = s.n.localGroupStatus(ids)
	return nil
}

// Transfer hands leadership of a group led here to another voter.
func (s *rpcService) Transfer(req *TransferReq, resp *WireErr) error {
	if w := toWire(s.n.transferLocal(req.Group, req.To)); w != nil {
		*resp = *w
	}
	return nil
}

// Cancel cancels a long-polling call whose caller gave up.
func (s *rpcService) Cancel(id uint64, resp *bool) error {
	*resp = s.cancelInflight(id)
	return nil
}

// ---- errors on the wire

// wireSentinels are the errors a caller tests with errors.Is, in a fixed order (a bit
// each in wire.Error.Kinds and WireErr.Kinds). Append only: nodes of different releases
// talk to each other.
var wireSentinels = []error{
	fsm.ErrLockLost, fsm.ErrSessionLockLost, fsm.ErrSessionCannotBeLocked, fsm.ErrNoSessionAvailable,
	fsm.ErrQuotaExceeded, fsm.ErrMessageTooLarge, fsm.ErrSessionRequired, fsm.ErrSessionNotAllowed,
	fsm.ErrNotFound, fsm.ErrEntityDisabled, fsm.ErrBadCommand,
	partition.ErrNotLeader, partition.ErrTimeout, partition.ErrOutcomeUnknown, partition.ErrClosed,
	meta.ErrExists, meta.ErrNotFound, meta.ErrInvalid,
	ErrUnavailable, ErrNotMetadataLeader, ErrClosed, admin.ErrUnavailable,
	context.DeadlineExceeded, context.Canceled,
	fsm.ErrTxnTimeout, fsm.ErrTxnDecided,
	fsm.ErrUploadIncomplete,
}

// wireErrors is the cluster's wire.ErrorCodec: the sentinels above and the error types
// callers extract with errors.As.
type wireErrors struct{}

func (wireErrors) ToWire(err error) *wire.Error {
	if err == nil {
		return nil
	}
	w := &wire.Error{Msg: err.Error()}
	for i, s := range wireSentinels {
		if errors.Is(err, s) {
			w.Kinds |= 1 << i
		}
	}
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) {
		w.HasLeader, w.LeaderID, w.LeaderAddr, w.Unknown = true, nl.LeaderID, nl.LeaderAddr, nl.Unknown
	}
	var ve *meta.ValidationError
	if errors.As(err, &ve) {
		w.HasInvalid, w.Field, w.Reason = true, ve.Field, ve.Reason
	}
	return w
}

func (wireErrors) FromWire(w *wire.Error) error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Msg}
	for i, s := range wireSentinels {
		if w.Kinds&(1<<i) != 0 {
			e.errs = append(e.errs, s)
		}
	}
	if w.HasLeader {
		e.errs = append(e.errs, &partition.NotLeaderError{LeaderID: w.LeaderID, LeaderAddr: w.LeaderAddr, Unknown: w.Unknown})
	}
	if w.HasInvalid {
		e.errs = append(e.errs, &meta.ValidationError{Field: w.Field, Reason: w.Reason})
	}
	return e
}

// WireErr is an error as version 1 carries it (wire.Error's fields, gob's names).
type WireErr struct {
	Msg        string
	Kinds      uint64
	LeaderID   string // *partition.NotLeaderError
	LeaderAddr string
	Unknown    bool
	HasLeader  bool
	Field      string // *meta.ValidationError
	Reason     string
	HasInvalid bool
}

func toWire(err error) *WireErr {
	w := wireErrors{}.ToWire(err)
	if w == nil {
		return nil
	}
	return &WireErr{Msg: w.Msg, Kinds: w.Kinds, LeaderID: w.LeaderID, LeaderAddr: w.LeaderAddr, Unknown: w.Unknown,
		HasLeader: w.HasLeader, Field: w.Field, Reason: w.Reason, HasInvalid: w.HasInvalid}
}

func (w *WireErr) err() error {
	if w == nil {
		return nil
	}
	return wireErrors{}.FromWire(&wire.Error{Msg: w.Msg, Kinds: w.Kinds, LeaderID: w.LeaderID, LeaderAddr: w.LeaderAddr,
		Unknown: w.Unknown, HasLeader: w.HasLeader, Field: w.Field, Reason: w.Reason, HasInvalid: w.HasInvalid})
}

// remoteError is an error decoded on the caller's side.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }
