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
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/partition/transport"
)

// Node-to-node calls (forwarding) use the standard library's net/rpc with its gob codec
// over the cluster port's mux (transport.TypeRPC). net/rpc is kept stable by the Go
// team, multiplexes any number of concurrent calls over one connection (so calls to a
// peer are pipelined, never one round trip at a time), and needs no generated code;
// what it lacks, deadlines and typed errors, travels in the request and reply (CallReq,
// WireErr). One connection per peer, redialled after a failure. The codecs (rpccodec.go)
// are net/rpc's gob codecs, except that the calls in flight share write syscalls.

// rpcName is the service name every node registers.
const rpcName = "Q"

type rpcLayer struct {
	n     *Node
	layer *transport.Layer
	srv   *rpc.Server

	mu      sync.Mutex
	clients map[string]*rpc.Client // by peer cluster address; owner: mu
	closed  bool
	conns   map[net.Conn]struct{} // accepted, closed on shutdown
	wg      sync.WaitGroup
}

func startRPC(n *Node) (*rpcLayer, error) {
	layer, err := n.mux.Route(transport.TypeRPC, 0)
	if err != nil {
		return nil, err
	}
	srv := rpc.NewServer()
	if err := srv.RegisterName(rpcName, &rpcService{n: n}); err != nil {
		layer.Close()
		return nil, err
	}
	l := &rpcLayer{n: n, layer: layer, srv: srv, clients: map[string]*rpc.Client{}, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *rpcLayer) accept() {
	defer l.wg.Done()
	for {
		c, err := l.layer.Accept()
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
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.srv.ServeCodec(newServerCodec(c, &l.wg))
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

// client returns the connection to the peer at addr, dialling it when there is none.
// The dial happens outside mu and within ctx (at most 5 s): a peer that accepts TCP but
// answers nothing (paused, SIGSTOP) must not hold up calls to every other peer.
func (l *rpcLayer) client(ctx context.Context, addr string) (*rpc.Client, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if c, ok := l.clients[addr]; ok {
		l.mu.Unlock()
		return c, nil
	}
	l.mu.Unlock()
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(d), time.Millisecond))
	}
	conn, err := l.layer.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrUnavailable, addr, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close()
		return nil, ErrClosed
	}
	if other, ok := l.clients[addr]; ok { // another call dialled meanwhile: keep one
		conn.Close()
		return other, nil
	}
	// The codec's goroutines join l.wg, which close waits on once closed is set: they
	// start under mu, after the check above.
	c := rpc.NewClientWithCodec(newClientCodec(conn, &l.wg))
	l.clients[addr] = c
	return c, nil
}

func (l *rpcLayer) drop(addr string, c *rpc.Client) {
	l.mu.Lock()
	if l.clients[addr] == c {
		delete(l.clients, addr)
	}
	l.mu.Unlock()
	c.Close()
}

// call invokes method on the peer at addr and waits for its reply or ctx. When ctx ends
// first, the call goes on and abandoned (if set) receives its reply, so a caller can undo
// what the peer did on its behalf (release locks nobody will settle).
func (l *rpcLayer) call(ctx context.Context, addr, method string, args, reply any, abandoned func()) (err error) {
	if m := l.n.metrics; m != nil {
		start := time.Now()
		defer func() { m.observeRPC(method, time.Since(start), err) }()
	}
	c, err := l.client(ctx, addr)
	if err != nil {
		return err
	}
	call := c.Go(rpcName+"."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			var se rpc.ServerError
			if !errors.As(call.Error, &se) {
				l.drop(addr, c) // the connection is broken: redial next time
			}
			// The request may have reached the peer and taken effect before the
			// connection broke.
			return fmt.Errorf("%w: %w: call %s on %s: %v", ErrUnavailable, partition.ErrOutcomeUnknown, method, addr, call.Error)
		}
		return nil
	case <-ctx.Done():
		if abandoned != nil {
			go func() {
				if r := <-call.Done; r.Error == nil {
					abandoned()
				}
			}()
		}
		return fmt.Errorf("%w: %s on %s: %w", partition.ErrTimeout, method, addr, ctx.Err())
	}
}

func (l *rpcLayer) close() {
	l.mu.Lock()
	l.closed = true
	for _, c := range l.clients {
		c.Close()
	}
	l.clients = map[string]*rpc.Client{}
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.layer.Close()
	l.wg.Wait()
}

// ---- errors on the wire

// wireSentinels are the errors a caller tests with errors.Is, in a fixed order (a bit
// each in WireErr.Kinds). Append only: nodes of different releases talk to each other.
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

// WireErr is an error as it crosses the network: its text, which sentinels it matches,
// and the details callers extract with errors.As.
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
	if err == nil {
		return nil
	}
	w := &WireErr{Msg: err.Error()}
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

// remoteError is a WireErr decoded on the caller's side.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

func (w *WireErr) err() error {
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
