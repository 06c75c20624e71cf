package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// Groups is the Raft transport of every group of a node: the RPCs of all groups to one
// peer travel over one connection (TypeGroups route 0), each frame naming its group,
// instead of over pooled connections per group. What a group costs in transport is then
// an entry in a map, not listener and connection goroutines and two 256 KiB buffers
// per connection; and the RPCs of many groups that are ready at the same moment, the
// heartbeats of quiet groups above all, leave in one write and one packet.
//
// Frame, both directions: uint32 length of the rest, kind byte (request, response,
// hello), uint64 sequence, uint32 group, one byte (request: the RPC type; response: 0
// ok, 1 error) and the body: the request or response encoded with msgpack as
// hashicorp/raft's NetworkTransport encodes it, or an error text. The dialler sends a
// hello frame (version byte in the type field) after the route header and waits for
// the acceptor's; responses come back on the connection the request went out on, in
// any order. A snapshot goes over a connection of its own (TypeGroups route 1): one
// request frame, the snapshot's bytes, one response frame.
//
// A peer whose cluster port closes the connection without a hello (a node of a release
// before Groups) is spoken to as before, with a raft.NetworkTransport per group over
// TypeRaft routes, and its connections to this node's TypeRaft routes are served by
// the same: GroupTransport.legacy, made when first needed. A peer is asked again after
// LegacyRetry, so an upgraded node is reached the new way.
//
// Goroutines: two per connection (reader and writer), one per incoming snapshot, and
// one short-lived one per incoming RPC that is not a heartbeat (a heartbeat is handed
// to the group's heartbeat handler on the reader goroutine, as NetworkTransport does);
// plus, for a group that talks to an older peer, its NetworkTransport's and one that
// forwards its RPCs. All are tracked by Groups.wg.
type Groups struct {
	m      *Mux
	cfg    GroupsConfig
	local  raft.ServerAddress
	layer  *Layer // route 0: multiplexed connections
	snaps  *Layer // route 1: one snapshot each
	logger hclog.Logger
	codec  *codecs // the frames' encoders and decoders, for reuse

	mu     sync.Mutex
	groups map[uint32]*GroupTransport       // owner: mu
	peers  map[raft.ServerAddress]*peer     // outgoing connections; owner: mu
	legacy map[raft.ServerAddress]time.Time // peers without the route, until; owner: mu
	conns  map[*conn]struct{}               // every live connection; owner: mu
	closed bool                             // owner: mu

	done chan struct{}
	wg   sync.WaitGroup

	stats groupsStats
}

// groupsStats counts what Groups did, for Stats.
type groupsStats struct {
	rpcs, heartbeatRPCs, cachedHeartbeats, beatFrames, beatsServed atomic.Uint64
	probes                                                         atomic.Uint64 // probes started (tests)
	pipelined                                                      atomic.Uint64 // AppendEntries sent through a pipeline
}

// GroupsStats are counters since NewGroups.
type GroupsStats struct {
	RPCs             uint64 // requests sent as frames of their own, heartbeats included
	HeartbeatRPCs    uint64 // heartbeats among them
	CachedHeartbeats uint64 // heartbeats answered from a coalesced heartbeat's answer
	BeatFrames       uint64 // coalesced heartbeat frames sent
	BeatsServed      uint64 // heartbeats handed to groups here from peers' beat frames
}

// Stats returns the counters.
func (g *Groups) Stats() GroupsStats {
	return GroupsStats{
		RPCs: g.stats.rpcs.Load(), HeartbeatRPCs: g.stats.heartbeatRPCs.Load(),
		CachedHeartbeats: g.stats.cachedHeartbeats.Load(), BeatFrames: g.stats.beatFrames.Load(),
		BeatsServed: g.stats.beatsServed.Load(),
	}
}

// GroupsConfig tunes Groups. Start from DefaultGroupsConfig, the one place its defaults
// live; NewGroups only checks the values.
type GroupsConfig struct {
	// Timeout bounds an RPC's wait for its response and a dial (a snapshot gets
	// Timeout per 256 KiB); NetworkTransport's Timeout. Above zero.
	Timeout time.Duration
	// LegacyRetry is how long a peer found to lack the route is spoken to through
	// per-group NetworkTransports before it is asked again. Above zero.
	LegacyRetry time.Duration
	// AddressProvider resolves server IDs to addresses (raft.NetworkTransportConfig's).
	AddressProvider raft.ServerAddressProvider
	// Logger: nil means warnings and errors to stderr.
	Logger hclog.Logger
	// Pipeline is how many AppendEntries a group's leader keeps in flight to each
	// follower (raft's pipelined replication, pipeline.go); under 2, one at a time.
	// 0..256.
	Pipeline int
}

// DefaultGroupsConfig returns the defaults: the timeouts of raft's NetworkTransport as
// partition.DefaultConfig sets them (NetTimeout), and partition.DefaultPipeline
// AppendEntries in flight (partition's tests check that the two agree).
func DefaultGroupsConfig() GroupsConfig {
	return GroupsConfig{Timeout: 10 * time.Second, LegacyRetry: 10 * time.Second, Pipeline: 8}
}

// Validate reports a config that cannot work.
func (c *GroupsConfig) Validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("transport: GroupsConfig.Timeout %v: must be above zero", c.Timeout))
	}
	if c.LegacyRetry <= 0 {
		errs = append(errs, fmt.Errorf("transport: GroupsConfig.LegacyRetry %v: must be above zero", c.LegacyRetry))
	}
	if c.Pipeline < 0 || c.Pipeline > 256 {
		errs = append(errs, fmt.Errorf("transport: GroupsConfig.Pipeline %d: want 0..256 (under 2: one at a time)", c.Pipeline))
	}
	return errors.Join(errs...)
}

// Frame kinds and layout.
const (
	kindRequest  byte = 1
	kindResponse byte = 2
	kindHello    byte = 3

	frameHeader = 4 + 1 + 8 + 4 + 1
	// groupsVersion is what this node's hello says it speaks: 1, the frames; 2, and a
	// group's AppendEntries handed to raft in the order they arrive (serveConn), which a
	// pipeline needs. A peer of version 1 (an earlier release) gets no pipeline: it
	// answers each request on a goroutine of its own, in any order.
	groupsVersion  = 2
	orderedVersion = 2
	maxFrame       = 1 << 30
	snapshotScale  = 256 << 10
	groupsRouteRPC = 0
	groupsRouteSnp = 1
)

// RPC types, as NetworkTransport numbers them.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

var (
	// errLegacy: the peer closed the connection without a hello.
	errLegacy = errors.New("transport: peer does not serve Raft groups on one connection")
	// ErrUnknownGroup answers an RPC for a group this node does not run.
	ErrUnknownGroup = errors.New("transport: unknown group")
)

// encHandle encodes as NetworkTransport does (the time format its peers decode);
// decHandle decodes both formats. Handles are safe for concurrent use.
var (
	encHandle = func() *codec.MsgpackHandle {
		h := &codec.MsgpackHandle{}
		h.TimeNotBuiltin = true
		return h
	}()
	decHandle = &codec.MsgpackHandle{}
)

// NewGroups registers the TypeGroups routes on m and serves them. local is the address
// the node advertises (every group's LocalAddr); cfg is DefaultGroupsConfig's, changed
// where needed, and an invalid value is an error.
func NewGroups(m *Mux, local raft.ServerAddress, cfg GroupsConfig) (*Groups, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft-groups", Level: hclog.Warn})
	}
	layer, err := m.Route(TypeGroups, groupsRouteRPC)
	if err != nil {
		return nil, err
	}
	snaps, err := m.Route(TypeGroups, groupsRouteSnp)
	if err != nil {
		layer.Close()
		return nil, err
	}
	g := &Groups{
		m: m, cfg: cfg, local: local, layer: layer, snaps: snaps, logger: cfg.Logger, codec: newCodecs(),
		groups: map[uint32]*GroupTransport{},
		peers:  map[raft.ServerAddress]*peer{},
		legacy: map[raft.ServerAddress]time.Time{},
		conns:  map[*conn]struct{}{},
		done:   make(chan struct{}),
	}
	m.setFallback(TypeRaft, g.legacyLayer)
	g.wg.Go(func() { g.acceptLoop(layer, g.serveConn) })
	g.wg.Go(func() { g.acceptLoop(snaps, g.serveSnapshot) })
	return g, nil
}

// Close stops serving, closes every connection and waits for the goroutines. Every
// group's transport must be closed first, or is closed here.
func (g *Groups) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	groups := make([]*GroupTransport, 0, len(g.groups))
	for _, t := range g.groups {
		groups = append(groups, t)
	}
	conns := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.m.setFallback(TypeRaft, nil)
	close(g.done)
	for _, t := range groups {
		t.Close()
	}
	g.layer.Close()
	g.snaps.Close()
	for _, c := range conns {
		c.fail(ErrClosed)
	}
	g.wg.Wait()
	return nil
}

// Transport returns the raft.Transport of group id; Close it when the group stops.
func (g *Groups) Transport(id uint32) (*GroupTransport, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	if _, ok := g.groups[id]; ok {
		return nil, fmt.Errorf("%w: group %d", ErrInUse, id)
	}
	t := &GroupTransport{g: g, id: id, consumer: make(chan raft.RPC), closed: make(chan struct{})}
	g.groups[id] = t
	return t, nil
}

func (g *Groups) group(id uint32) *GroupTransport {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.groups[id]
}

// goTracked runs f on a goroutine Close waits for; false once closed.
func (g *Groups) goTracked(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

func (g *Groups) acceptLoop(l *Layer, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !g.goTracked(func() { serve(c) }) {
			c.Close()
			return
		}
	}
}

// resolve is NetworkTransport's getProviderAddressOrFallback.
func (g *Groups) resolve(id raft.ServerID, target raft.ServerAddress) raft.ServerAddress {
	if g.cfg.AddressProvider != nil {
		if a, err := g.cfg.AddressProvider.ServerAddr(id); err == nil {
			return a
		}
	}
	return target
}

func (g *Groups) isLegacy(addr raft.ServerAddress) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.legacy[addr]
	if ok && time.Now().After(until) {
		delete(g.legacy, addr)
		return false
	}
	return ok
}

// peer returns the connection to addr, dialling it (and saying hello) when there is
// none; errLegacy when the peer lacks the route.
func (g *Groups) peer(addr raft.ServerAddress) (*peer, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	p := g.peers[addr]
	if p == nil {
		p = &peer{ready: make(chan struct{})}
		g.peers[addr] = p
		g.mu.Unlock()
		p.c, p.err = g.dial(addr)
		g.mu.Lock()
		if p.err != nil && g.peers[addr] == p {
			delete(g.peers, addr) // the next call dials again
		}
		if errors.Is(p.err, errLegacy) {
			g.legacy[addr] = time.Now().Add(g.cfg.LegacyRetry)
		}
		close(p.ready)
		g.mu.Unlock()
		return p, p.err
	}
	g.mu.Unlock()
	select {
	case <-p.ready:
	default:
		t := time.NewTimer(g.cfg.Timeout)
		select {
		case <-p.ready:
			t.Stop()
		case <-t.C:
			return nil, fmt.Errorf("transport: dial %s: timed out", addr)
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	select {
	case <-p.c.dead:
		g.dropPeer(addr, p)
		return g.peer(addr)
	default:
	}
	return p, nil
}

func (g *Groups) dropPeer(addr raft.ServerAddress, p *peer) {
	g.mu.Lock()
	if g.peers[addr] == p {
		delete(g.peers, addr)
	}
	g.mu.Unlock()
}

// dial connects to addr's route 0 and exchanges hellos.
func (g *Groups) dial(addr raft.ServerAddress) (*conn, error) {
	nc, err := g.layer.Dial(addr, g.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(g.cfg.Timeout))
	// The hello names this node's address, so that the peer can tell when it is gone.
	if _, err := nc.Write(frame(kindHello, 0, 0, groupsVersion, []byte(g.local))); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	h, _, err := readFrame(br)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err):
		nc.Close()
		return nil, errLegacy
	case err != nil:
		nc.Close()
		return nil, err
	case h.kind != kindHello || h.typ < 1:
		nc.Close()
		return nil, fmt.Errorf("transport: %s answered %d to hello", addr, h.kind)
	}
	_ = nc.SetDeadline(time.Time{})
	c := g.newConn(nc, br)
	if c == nil {
		return nil, ErrClosed
	}
	c.addr = addr
	c.version = h.typ
	c.pending = map[uint64]*call{}
	c.lastRecv.Store(time.Now().UnixNano())
	c.beats, c.beaters = map[uint32]*beat{}, map[uint32]*GroupTransport{}
	if !g.goTracked(c.readResponses) || !g.goTracked(c.beatLoop) {
		c.fail(ErrClosed)
		return nil, ErrClosed
	}
	return c, nil
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// newConn starts the writer of a connection and records it; nil once closed.
func (g *Groups) newConn(nc net.Conn, br *bufio.Reader) *conn {
	c := &conn{g: g, nc: nc, br: br, out: make(chan outFrame, 256), dead: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		nc.Close()
		return nil
	}
	g.conns[c] = struct{}{}
	g.wg.Go(c.writeLoop)
	g.mu.Unlock()
	return c
}

// serveConn answers the hello of an incoming connection, then its requests.
func (g *Groups) serveConn(nc net.Conn) {
	br := bufio.NewReaderSize(nc, 64<<10)
	_ = nc.SetDeadline(time.Now().Add(g.cfg.Timeout))
	h, from, err := readFrame(br)
	if err != nil || h.kind != kindHello {
		nc.Close()
		return
	}
	if _, err := nc.Write(frame(kindHello, 0, 0, groupsVersion, []byte(g.local))); err != nil {
		nc.Close()
		return
	}
	_ = nc.SetDeadline(time.Time{})
	c := g.newConn(nc, br)
	if c == nil {
		return
	}
	c.addr = raft.ServerAddress(from) // probed when the connection fails
	// handed is, per group, closed once the connection's latest AppendEntries of that
	// group was handed to its raft: the next one waits for it, so that a leader's
	// pipelined requests reach the follower's raft in the order sent (each request is
	// answered on a goroutine of its own). Owner: this loop.
	handed := map[uint32]chan struct{}{}
	for {
		h, body, err := readFrame(br)
		if err != nil {
			c.fail(err)
			return
		}
		if h.kind == kindBeat {
			f, err := g.serveBeat(h.seq, body)
			if err != nil {
				c.fail(err)
				return
			}
			c.send(f, true)
			continue
		}
		if h.kind != kindRequest {
			c.fail(fmt.Errorf("transport: unexpected frame kind %d", h.kind))
			return
		}
		rpc, respCh, err := g.codec.decodeRequest(h.typ, body, nil)
		if err != nil {
			c.fail(err)
			return
		}
		t := g.group(h.group)
		if t == nil {
			c.send(g.codec.responseFrame(h.seq, h.group, nil, fmt.Errorf("%w %d", ErrUnknownGroup, h.group)), false)
			continue
		}
		heartbeat := isHeartbeat(rpc.Command)
		if fn := t.heartbeatFn(); fn != nil && heartbeat {
			fn(rpc)
			c.send(respond(h, t, respCh), true)
			continue
		}
		var after, mine chan struct{}
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
			after, mine = handed[h.group], make(chan struct{})
			handed[h.group] = mine
		}
		if !g.goTracked(func() {
			if after != nil {
				select {
				case <-after:
				case <-t.closed:
				}
			}
			ok := t.deliver(rpc)
			if mine != nil {
				close(mine)
			}
			if ok {
				c.send(respond(h, t, respCh), heartbeat || isEmptyAppend(rpc.Command))
			} else {
				c.send(g.codec.responseFrame(h.seq, h.group, nil, ErrClosed), false)
			}
		}) {
			return
		}
	}
}

// respond waits for the group's answer to a request and frames it.
func respond(h frameHead, t *GroupTransport, respCh chan raft.RPCResponse) []byte {
	select {
	case r := <-respCh:
		return t.g.codec.responseFrame(h.seq, h.group, r.Response, r.Error)
	case <-t.closed:
		return t.g.codec.responseFrame(h.seq, h.group, nil, ErrClosed)
	}
}

// serveSnapshot reads one InstallSnapshot request and its data, and answers it.
func (g *Groups) serveSnapshot(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 64<<10)
	_ = nc.SetReadDeadline(time.Now().Add(g.cfg.Timeout))
	h, body, err := readFrame(br)
	if err != nil || h.kind != kindRequest || h.typ != rpcInstallSnapshot {
		return
	}
	req := new(raft.InstallSnapshotRequest)
	if err := g.codec.decode(body, req); err != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(snapshotTimeout(g.cfg.Timeout, req.Size)))
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: req, Reader: io.LimitReader(br, req.Size), RespChan: respCh}
	var out []byte
	if t := g.group(h.group); t == nil {
		out = g.codec.responseFrame(h.seq, h.group, nil, fmt.Errorf("%w %d", ErrUnknownGroup, h.group))
	} else if !t.deliver(rpc) {
		out = g.codec.responseFrame(h.seq, h.group, nil, ErrClosed)
	} else {
		out = respond(h, t, respCh)
	}
	_ = nc.SetWriteDeadline(time.Now().Add(g.cfg.Timeout))
	_, _ = nc.Write(out)
}

func snapshotTimeout(base time.Duration, size int64) time.Duration {
	return base * time.Duration(max(1, size/snapshotScale))
}

// legacyLayer is the Mux's fallback for TypeRaft: an older peer dialling a group's
// route reaches that group's NetworkTransport, made now if needed.
func (g *Groups) legacyLayer(id uint32) *Layer {
	t := g.group(id)
	if t == nil {
		return nil
	}
	if _, err := t.legacyTransport(); err != nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.legacyStream
}

// peer is an outgoing connection, once dialled.
type peer struct {
	ready chan struct{} // closed once c or err is set
	c     *conn
	err   error
}

// conn is one multiplexed connection, dialled (with pending calls) or accepted.
type conn struct {
	g    *Groups
	nc   net.Conn
	br   *bufio.Reader
	out  chan outFrame      // frames for the writer
	dead chan struct{}      // closed by fail
	addr raft.ServerAddress // the peer: the one dialled, or the one an accepted hello named
	// version is the groupsVersion the peer's hello named (dialled connections).
	version uint8
	// lastRecv is when a frame last arrived (Unix ns; dialled connections), so that a
	// connection whose peer went silent is dropped and dialled again.
	lastRecv atomic.Int64

	mu      sync.Mutex
	err     error            // why it failed; owner: mu
	seq     uint64           // last request sequence; owner: mu
	pending map[uint64]*call // dialled connections: calls awaiting a response; owner: mu
	// beats are the groups whose heartbeats this dialled connection coalesces
	// (beats.go), with their transports; owner: mu.
	beats   map[uint32]*beat
	beaters map[uint32]*GroupTransport
}

// outFrame is a frame for the writer; a lazy one (a heartbeat or its answer) may wait
// up to heartbeatLinger for company before it is flushed.
type outFrame struct {
	f    []byte
	lazy bool
}

// heartbeatLinger is how long a heartbeat or another AppendEntries without entries, or
// its answer, may wait for other frames to the same peer before it is written: the heartbeats of a node's groups go
// out every 100 to 200 ms each, at random moments, and would otherwise cost a write
// and a wake-up each; 10 ms against a 500 ms leader lease.
const heartbeatLinger = 10 * time.Millisecond

type call struct {
	done chan struct{}
	resp any // decoded into
	err  error
}

// send queues a frame for the writer; false once the connection failed.
func (c *conn) send(f []byte, lazy bool) bool {
	select {
	case c.out <- outFrame{f, lazy}:
		return true
	case <-c.dead:
		return false
	}
}

// writeLoop writes queued frames, flushing when the queue is empty: frames queued
// together leave in one write. When all it holds are heartbeats (or their answers), it
// waits up to heartbeatLinger for more, so that those of many groups share a write.
func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var urgent bool
	// write buffers one frame; false (the connection failed) when it cannot.
	write := func(o outFrame) bool {
		urgent = urgent || !o.lazy
		if _, err := bw.Write(o.f); err != nil {
			c.fail(err)
			return false
		}
		return true
	}
	for {
		var o outFrame
		select {
		case o = <-c.out:
		case <-c.dead:
			return
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.g.cfg.Timeout))
		urgent = false
		if !write(o) {
			return
		}
		waiting := false
	more:
		for {
			select {
			case o = <-c.out:
				if !write(o) {
					return
				}
				continue
			default:
			}
			if urgent || bw.Buffered() > 32<<10 {
				break more
			}
			if !waiting {
				linger.Reset(heartbeatLinger)
				waiting = true
			}
			select {
			case o = <-c.out:
				if !write(o) {
					return
				}
			case <-linger.C:
				waiting = false
				break more
			case <-c.dead:
				return
			}
		}
		if waiting && !linger.Stop() {
			<-linger.C
		}
		if err := bw.Flush(); err != nil {
			c.fail(err)
			return
		}
	}
}

// fail closes the connection and fails its pending calls (once).
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.dead)
	c.mu.Unlock()
	c.nc.Close()
	for _, cl := range pending {
		cl.err = fmt.Errorf("transport: connection lost: %w", err)
		close(cl.done)
	}
	c.g.mu.Lock()
	delete(c.g.conns, c)
	closed := c.g.closed
	c.g.mu.Unlock()
	if c.addr != "" && !closed {
		c.g.goTracked(func() { c.g.probe(c.addr) })
	}
}

// readResponses hands each response to its call.
func (c *conn) readResponses() {
	for {
		h, body, err := readFrame(c.br)
		if err != nil {
			c.fail(err)
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		if h.kind == kindBeatAck {
			if err := c.beatAcked(body); err != nil {
				c.fail(err)
				return
			}
			continue
		}
		if h.kind != kindResponse {
			c.fail(fmt.Errorf("transport: unexpected frame kind %d", h.kind))
			return
		}
		c.mu.Lock()
		cl := c.pending[h.seq]
		delete(c.pending, h.seq)
		c.mu.Unlock()
		if cl == nil {
			continue // its caller gave up
		}
		cl.err = c.g.codec.decodeResponse(h.typ, body, cl.resp)
		close(cl.done)
	}
}

// roundTrip sends one request and waits for its response.
func (c *conn) roundTrip(group uint32, typ uint8, args, resp any, timeout time.Duration) error {
	cl, seq, err := c.start(group, typ, args, resp)
	if err != nil {
		return err
	}
	return c.wait(cl, seq, timeout)
}

// start sends one request; wait for its response with wait.
func (c *conn) start(group uint32, typ uint8, args, resp any) (*call, uint64, error) {
	cl := &call{done: make(chan struct{}), resp: resp}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, 0, fmt.Errorf("transport: connection lost: %w", err)
	}
	c.seq++
	seq := c.seq
	c.pending[seq] = cl
	c.mu.Unlock()
	f, err := c.g.codec.requestFrame(seq, group, typ, args)
	if err != nil {
		c.forget(seq)
		return nil, 0, err
	}
	c.g.stats.rpcs.Add(1)
	if !c.send(f, isEmptyAppend(args)) {
		c.forget(seq)
		return nil, 0, fmt.Errorf("transport: connection lost: %w", c.failure())
	}
	return cl, seq, nil
}

// wait waits up to timeout for the response to the request start sent as seq.
func (c *conn) wait(cl *call, seq uint64, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-cl.done:
		return cl.err
	case <-t.C:
		if c.forget(seq) {
			// A peer that answered nothing at all (not even a coalesced heartbeat)
			// for that long may be gone without a reset reaching us (a partition, a
			// dead host): drop the connection, so the next call dials again.
			if time.Since(time.Unix(0, c.lastRecv.Load())) >= timeout {
				c.fail(fmt.Errorf("transport: %s silent for %v", c.nc.RemoteAddr(), timeout))
			}
			return fmt.Errorf("transport: no response within %v", timeout)
		}
		<-cl.done // answered meanwhile
		return cl.err
	}
}

// forget drops a pending call; false when it was already answered.
func (c *conn) forget(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[seq]; !ok {
		return false
	}
	delete(c.pending, seq)
	return true
}

func (c *conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// frameHead is a frame's fixed part.
type frameHead struct {
	kind  byte
	seq   uint64
	group uint32
	typ   uint8
}

func frame(kind byte, seq uint64, group uint32, typ uint8, body []byte) []byte {
	f := append(make([]byte, frameHeader, frameHeader+len(body)), body...)
	putHeader(f, kind, seq, group, typ)
	return f
}

// putHeader writes the fixed part of frame f, whose body follows it.
func putHeader(f []byte, kind byte, seq uint64, group uint32, typ uint8) {
	binary.BigEndian.PutUint32(f[0:], uint32(len(f)-4))
	f[4] = kind
	binary.BigEndian.PutUint64(f[5:], seq)
	binary.BigEndian.PutUint32(f[13:], group)
	f[17] = typ
}

func readFrame(r *bufio.Reader) (frameHead, []byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frameHead{}, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[0:])
	if n < frameHeader-4 || n > maxFrame {
		return frameHead{}, nil, fmt.Errorf("transport: bad frame length %d", n)
	}
	h := frameHead{kind: hdr[4], seq: binary.BigEndian.Uint64(hdr[5:]), group: binary.BigEndian.Uint32(hdr[13:]), typ: hdr[17]}
	body := make([]byte, int(n)-(frameHeader-4))
	if _, err := io.ReadFull(r, body); err != nil {
		return h, nil, err
	}
	return h, body, nil
}

// encoder is a reusable msgpack encoder with its buffer (a codec.Encoder is costly to
// make, and every RPC needs one).
type encoder struct {
	buf bytes.Buffer
	enc *codec.Encoder
}

// codecs keeps the msgpack encoders and decoders of a Groups for reuse.
type codecs struct {
	encoders, decoders sync.Pool
}

func newCodecs() *codecs {
	return &codecs{
		encoders: sync.Pool{New: func() any {
			e := &encoder{}
			e.enc = codec.NewEncoder(&e.buf, encHandle)
			return e
		}},
		decoders: sync.Pool{New: func() any { return codec.NewDecoderBytes(nil, decHandle) }},
	}
}

// encodeFrame frames v, msgpack-encoded.
func (cs *codecs) encodeFrame(kind byte, seq uint64, group uint32, typ uint8, v any) ([]byte, error) {
	e := cs.encoders.Get().(*encoder)
	defer cs.encoders.Put(e)
	e.buf.Reset()
	e.buf.Write(make([]byte, frameHeader))
	e.enc.Reset(&e.buf)
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	f := append([]byte(nil), e.buf.Bytes()...)
	putHeader(f, kind, seq, group, typ)
	return f, nil
}

func (cs *codecs) decode(body []byte, v any) error {
	d := cs.decoders.Get().(*codec.Decoder)
	defer cs.decoders.Put(d)
	d.ResetBytes(body)
	return d.Decode(v)
}

func (cs *codecs) requestFrame(seq uint64, group uint32, typ uint8, args any) ([]byte, error) {
	return cs.encodeFrame(kindRequest, seq, group, typ, args)
}

// responseFrame frames a group's answer: its error text, or the encoded response.
func (cs *codecs) responseFrame(seq uint64, group uint32, resp any, rerr error) []byte {
	if rerr == nil {
		f, err := cs.encodeFrame(kindResponse, seq, group, 0, resp)
		if err == nil {
			return f
		}
		rerr = err
	}
	return frame(kindResponse, seq, group, 1, []byte(rerr.Error()))
}

func (cs *codecs) decodeResponse(status uint8, body []byte, resp any) error {
	if status != 0 {
		return errors.New(string(body))
	}
	return cs.decode(body, resp)
}

// decodeRequest makes the raft.RPC a request frame carries.
func (cs *codecs) decodeRequest(typ uint8, body []byte, r io.Reader) (raft.RPC, chan raft.RPCResponse, error) {
	var cmd any
	switch typ {
	case rpcAppendEntries:
		cmd = new(raft.AppendEntriesRequest)
	case rpcRequestVote:
		cmd = new(raft.RequestVoteRequest)
	case rpcRequestPreVote:
		cmd = new(raft.RequestPreVoteRequest)
	case rpcTimeoutNow:
		cmd = new(raft.TimeoutNowRequest)
	default:
		return raft.RPC{}, nil, fmt.Errorf("transport: unknown rpc type %d", typ)
	}
	if err := cs.decode(body, cmd); err != nil {
		return raft.RPC{}, nil, err
	}
	respCh := make(chan raft.RPCResponse, 1)
	return raft.RPC{Command: cmd, Reader: r, RespChan: respCh}, respCh, nil
}

// isEmptyAppend reports an AppendEntries without entries: a heartbeat, or what raft's
// leader sends each follower every CommitTimeout to tell it the commit index. Neither
// is urgent, so it (and its answer) may linger for company like a heartbeat.
func isEmptyAppend(cmd any) bool {
	req, ok := cmd.(*raft.AppendEntriesRequest)
	return ok && len(req.Entries) == 0
}

// isHeartbeat is NetworkTransport's test for the AppendEntries its heartbeat handler
// takes.
func isHeartbeat(cmd any) bool {
	req, ok := cmd.(*raft.AppendEntriesRequest)
	if !ok {
		return false
	}
	leader := req.RPCHeader.Addr
	if len(leader) == 0 {
		//lint:ignore SA1019 what older peers set
		leader = req.Leader
	}
	return req.Term != 0 && leader != nil && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// probe dials a peer whose connection just failed: when nothing listens on its port any
// more (connection refused: its process is gone), or its port no longer serves this
// transport (the hello is answered by a closed connection: its groups are closed, the
// process is stopping), every group here whose leader it was hears of it at once
// (GroupTransport.SetPeerDown) instead of after its heartbeat timeout. A peer that
// answers the hello, or is only slow or cut off, is left to the heartbeat timeouts.
//
// It asks three times, 100 ms apart: a process being killed closes its connections and
// its listener in no particular order. A node that stops closes its transport before
// its port; only a plain connect, as this did before, took such a node for alive for as
// long as its port stayed open (200 ms were not always enough beside busy loops).
func (g *Groups) probe(addr raft.ServerAddress) {
	g.stats.probes.Add(1)
	for i := 0; ; i++ {
		err := g.hello(addr)
		if err == nil {
			if i == 2 {
				return // still there
			}
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-g.done:
				return
			}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, errNoTransport) {
			return
		}
		break
	}
	g.mu.Lock()
	groups := make([]*GroupTransport, 0, len(g.groups))
	for _, t := range g.groups {
		groups = append(groups, t)
	}
	g.mu.Unlock()
	g.logger.Info("peer gone: its port refuses connections or serves no Raft transport", "peer", addr, "groups", len(groups))
	for _, t := range groups {
		t.peerDown(addr)
	}
}

// errNoTransport is a peer whose port takes connections but closes them at the hello:
// nothing there serves this transport any more.
var errNoTransport = errors.New("transport: peer's port serves no Raft transport")

// hello dials addr's route 0 and exchanges hellos, then hangs up. Its hello names no
// address, so that the peer does not probe back when it hangs up (two live nodes would
// probe each other for ever).
func (g *Groups) hello(addr raft.ServerAddress) error {
	nc, err := g.layer.Dial(addr, g.cfg.Timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(g.cfg.Timeout))
	if _, err := nc.Write(frame(kindHello, 0, 0, groupsVersion, nil)); err != nil {
		if isReset(err) {
			return errNoTransport
		}
		return err
	}
	h, _, err := readFrame(bufio.NewReader(nc))
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err):
		return errNoTransport
	case err != nil:
		return err
	case h.kind != kindHello:
		return fmt.Errorf("transport: %s answered %d to hello", addr, h.kind)
	}
	return nil
}
