package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// GroupTransport is one group's raft.Transport over its node's Groups.
type GroupTransport struct {
	g        *Groups
	id       uint32
	consumer chan raft.RPC
	closed   chan struct{}
	once     sync.Once

	mu          sync.Mutex
	hb          func(raft.RPC)                    // owner: mu
	leaderState func() (term uint64, leader bool) // SetLeaderState; owner: mu
	onPeerDown  func(raft.ServerAddress)          // SetPeerDown; owner: mu
	// legacy speaks to peers of an older release (Groups doc); nil until first needed.
	legacy       *raft.NetworkTransport // owner: mu
	legacyStream *Layer                 // its route; owner: mu
}

var (
	_ raft.Transport   = (*GroupTransport)(nil)
	_ raft.WithPreVote = (*GroupTransport)(nil)
	_ raft.WithClose   = (*GroupTransport)(nil)
)

// Consumer implements raft.Transport.
func (t *GroupTransport) Consumer() <-chan raft.RPC { return t.consumer }

// LocalAddr implements raft.Transport.
func (t *GroupTransport) LocalAddr() raft.ServerAddress { return t.g.local }

// AppendEntriesPipeline implements raft.Transport: up to GroupsConfig.Pipeline
// AppendEntries in flight to the peer over its connection (pipeline.go). Not supported
// with Pipeline under 2, or to a peer of an older release (spoken to through the
// legacy transport, or whose Groups may reorder a group's requests: groupsVersion 1).
func (t *GroupTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.g.cfg.Pipeline < 2 {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	select {
	case <-t.closed:
		return nil, raft.ErrTransportShutdown
	default:
	}
	addr := t.g.resolve(id, target)
	if t.g.isLegacy(addr) {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	p, err := t.g.peer(addr)
	if errors.Is(err, errLegacy) {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	if err != nil {
		return nil, err
	}
	if p.c.version < orderedVersion {
		return nil, raft.ErrPipelineReplicationNotSupported // it may reorder them
	}
	pl := newPipeline(t, p.c, t.g.cfg.Pipeline)
	if pl == nil {
		return nil, raft.ErrTransportShutdown
	}
	return pl, nil
}

// AppendEntries implements raft.Transport. A heartbeat is answered from the peer's
// latest answer to the coalesced heartbeats when that is fresh (beats.go).
func (t *GroupTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.call(id, target, rpcAppendEntries, args, resp, func(l *raft.NetworkTransport, a raft.ServerAddress) error {
		return l.AppendEntries(id, a, args, resp)
	})
}

// heartbeat sends a heartbeat over c, or answers it from c's beats.
func (t *GroupTransport) heartbeat(c *conn, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.mu.Lock()
	coalesce := t.leaderState != nil
	t.mu.Unlock()
	if coalesce && c.cachedHeartbeat(t, args, resp) {
		t.g.stats.cachedHeartbeats.Add(1)
		return nil
	}
	t.g.stats.heartbeatRPCs.Add(1)
	if err := c.roundTrip(t.id, rpcAppendEntries, args, resp, t.g.cfg.Timeout); err != nil {
		return err
	}
	c.heartbeatAnswered(t.id, args, resp)
	return nil
}

// RequestVote implements raft.Transport.
func (t *GroupTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(id, target, rpcRequestVote, args, resp, func(l *raft.NetworkTransport, a raft.ServerAddress) error {
		return l.RequestVote(id, a, args, resp)
	})
}

// RequestPreVote implements raft.WithPreVote.
func (t *GroupTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(id, target, rpcRequestPreVote, args, resp, func(l *raft.NetworkTransport, a raft.ServerAddress) error {
		return l.RequestPreVote(id, a, args, resp)
	})
}

// TimeoutNow implements raft.Transport.
func (t *GroupTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.call(id, target, rpcTimeoutNow, args, resp, func(l *raft.NetworkTransport, a raft.ServerAddress) error {
		return l.TimeoutNow(id, a, args, resp)
	})
}

// call sends one RPC to a peer: over the peer's connection, or through the legacy
// transport to a peer of an older release.
func (t *GroupTransport) call(id raft.ServerID, target raft.ServerAddress, typ uint8, args, resp any, legacy func(*raft.NetworkTransport, raft.ServerAddress) error) error {
	select {
	case <-t.closed:
		return raft.ErrTransportShutdown
	default:
	}
	addr := t.g.resolve(id, target)
	if !t.g.isLegacy(addr) {
		p, err := t.g.peer(addr)
		if err == nil {
			if hb, ok := args.(*raft.AppendEntriesRequest); ok && isHeartbeat(hb) {
				return t.heartbeat(p.c, hb, resp.(*raft.AppendEntriesResponse))
			}
			return p.c.roundTrip(t.id, typ, args, resp, t.g.cfg.Timeout)
		}
		if !errors.Is(err, errLegacy) {
			return err
		}
	}
	l, err := t.legacyTransport()
	if err != nil {
		return err
	}
	return legacy(l, addr)
}

// InstallSnapshot implements raft.Transport: a connection of its own carries the
// request, the data and the answer.
func (t *GroupTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	addr := t.g.resolve(id, target)
	if !t.g.isLegacy(addr) {
		// Ask for the peer's connection first: it tells an older peer apart.
		_, err := t.g.peer(addr)
		if err == nil {
			return t.sendSnapshot(addr, args, resp, data)
		}
		if !errors.Is(err, errLegacy) {
			return err
		}
	}
	l, err := t.legacyTransport()
	if err != nil {
		return err
	}
	return l.InstallSnapshot(id, addr, args, resp, data)
}

func (t *GroupTransport) sendSnapshot(addr raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	nc, err := t.g.snaps.Dial(addr, t.g.cfg.Timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(snapshotTimeout(t.g.cfg.Timeout, args.Size)))
	f, err := t.g.codec.requestFrame(0, t.id, rpcInstallSnapshot, args)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(nc, 64<<10)
	if _, err := bw.Write(f); err != nil {
		return err
	}
	if _, err := io.Copy(bw, data); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	h, body, err := readFrame(bufio.NewReader(nc))
	if err != nil {
		return err
	}
	if h.kind != kindResponse {
		return fmt.Errorf("transport: unexpected frame kind %d", h.kind)
	}
	return t.g.codec.decodeResponse(h.typ, body, resp)
}

// EncodePeer implements raft.Transport as NetworkTransport does.
func (t *GroupTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport as NetworkTransport does.
func (t *GroupTransport) DecodePeer(buf []byte) raft.ServerAddress { return raft.ServerAddress(buf) }

// SetHeartbeatHandler implements raft.Transport.
func (t *GroupTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	t.mu.Lock()
	t.hb = cb
	l := t.legacy
	t.mu.Unlock()
	if l != nil {
		l.SetHeartbeatHandler(cb)
	}
}

func (t *GroupTransport) heartbeatFn() func(raft.RPC) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hb
}

// deliver hands an RPC to raft; false once the group's transport is closed.
func (t *GroupTransport) deliver(rpc raft.RPC) bool {
	select {
	case t.consumer <- rpc:
		return true
	case <-t.closed:
		return false
	}
}

// Close implements raft.WithClose: the group no longer takes RPCs, and its legacy
// transport, if any, is closed.
func (t *GroupTransport) Close() error {
	t.once.Do(func() {
		close(t.closed)
		t.g.mu.Lock()
		if t.g.groups[t.id] == t {
			delete(t.g.groups, t.id)
		}
		t.g.mu.Unlock()
		t.mu.Lock()
		l := t.legacy
		t.mu.Unlock()
		if l != nil {
			l.Close() // closes its route too
		}
	})
	return nil
}

// legacyTransport returns the group's NetworkTransport on its TypeRaft route, making
// it on first use, with a goroutine that hands its RPCs to raft.
func (t *GroupTransport) legacyTransport() (*raft.NetworkTransport, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.legacy != nil {
		return t.legacy, nil
	}
	select {
	case <-t.closed:
		return nil, raft.ErrTransportShutdown
	default:
	}
	layer, err := t.g.m.Route(TypeRaft, t.id)
	if err != nil {
		return nil, err
	}
	l := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:                layer,
		ServerAddressProvider: t.g.cfg.AddressProvider,
		MaxPool:               2,
		Timeout:               t.g.cfg.Timeout,
		Logger:                t.g.logger.Named(fmt.Sprintf("legacy.%d", t.id)),
		MaxRPCsInFlight:       1, // no pipelining, as partition.Open
	})
	if t.hb != nil {
		l.SetHeartbeatHandler(t.hb)
	}
	if !t.g.goTracked(func() {
		for {
			select {
			case rpc := <-l.Consumer():
				if !t.deliver(rpc) {
					rpc.Respond(nil, raft.ErrTransportShutdown)
				}
			case <-t.closed:
				return
			}
		}
	}) {
		l.Close()
		return nil, ErrClosed
	}
	t.legacy, t.legacyStream = l, layer
	t.g.logger.Info("group talks to a peer of an older release", "group", t.id)
	return l, nil
}

// SetPeerDown has f called with a peer's address when the transport finds that
// nothing listens on the peer's port any more (its process is gone), so that a group
// it led need not wait for its heartbeat timeout (see CampaignNow).
func (t *GroupTransport) SetPeerDown(f func(raft.ServerAddress)) {
	t.mu.Lock()
	t.onPeerDown = f
	t.mu.Unlock()
}

func (t *GroupTransport) peerDown(addr raft.ServerAddress) {
	t.mu.Lock()
	f := t.onPeerDown
	t.mu.Unlock()
	if f != nil {
		f(addr)
	}
}

// CampaignNow has the group's raft start an election at once, as a leadership
// transfer's TimeoutNow does: the other voters grant their votes although they may
// still think they have a leader, and refuse them, as always, to a log behind theirs.
func (t *GroupTransport) CampaignNow() error {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{
		Command: &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(t.g.local),
		}},
		RespChan: respCh,
	}
	timer := time.NewTimer(t.g.cfg.Timeout)
	defer timer.Stop()
	select {
	case t.consumer <- rpc:
	case <-t.closed:
		return raft.ErrTransportShutdown
	case <-timer.C:
		return fmt.Errorf("transport: group %d took no TimeoutNow within %v", t.id, t.g.cfg.Timeout)
	}
	select {
	case r := <-respCh:
		return r.Error
	case <-t.closed:
		return raft.ErrTransportShutdown
	case <-timer.C:
		return fmt.Errorf("transport: group %d answered no TimeoutNow within %v", t.id, t.g.cfg.Timeout)
	}
}
