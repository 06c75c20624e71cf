package metagroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// ID is the metadata group's route on the cluster port. Partition groups are numbered
// from 1 by the metadata state, so 0 is free.
const ID = 0

// Errors. A caller tests them with errors.Is.
var (
	// ErrNotLeader: this node cannot change metadata now (no leader, or another node
	// leads and forwarding failed). Wrapped with "may or may not apply" when leadership
	// was lost while the command was committing. It is cluster.ErrNotMetadataLeader,
	// whose text crosses the node-to-node wire (cluster/testdata errors.golden): the
	// text keeps the "cluster:" prefix it had when cluster defined it.
	ErrNotLeader = errors.New("cluster: not the metadata leader")
	// ErrNotApplied: the local replica has not applied an index in time.
	ErrNotApplied = errors.New("metagroup: metadata index not applied here")
)

// Group is this node's replica of the metadata Raft group: the namespace, its entities,
// keys and placement (cluster/meta.State) replicated on the metadata voters. Reads are
// served from the local replica; writes are proposed to the leader.
type Group struct {
	// hadState: the group had state on disk when opened (or was bootstrapped as a single
	// node): this node belongs to a formed cluster.
	hadState bool
	raft     *raft.Raft
	store    *raftboltdb.BoltStore
	fsm      *metaFSM
	clock    Clock
	place    func(partitions int32) [][]string
	forward  func(ctx context.Context, leader string, cmd meta.Command) (uint64, error)
}

// metaFSM adapts meta.State to raft.FSM. mu guards state: raft's apply goroutine writes,
// readers take the read lock.
type metaFSM struct {
	mu      sync.RWMutex
	state   *meta.State
	applied uint64 // index of the last entry applied to state; guarded by mu
	// restored: the state came from a snapshot since the last applied entry (whose
	// index the FSM is not told); guarded by mu.
	restored bool
	changed  func() // called after every applied entry, outside mu; never blocks
}

// applyResult is what Apply returns through the raft future: the state's verdict.
type applyResult struct{ err error }

func (f *metaFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		f.mu.Lock()
		f.applied = max(f.applied, l.Index)
		f.mu.Unlock()
		return nil
	}
	e, err := meta.DecodeEntry(l.Data)
	if err != nil {
		// A log entry this release cannot decode is written by a newer release or is
		// corrupt; refusing it keeps the state unchanged and reports why.
		return applyResult{fmt.Errorf("metagroup: log entry %d: %w", l.Index, err)}
	}
	f.mu.Lock()
	err = f.state.Apply(e)
	f.applied, f.restored = l.Index, false
	f.mu.Unlock()
	if f.changed != nil {
		f.changed()
	}
	return applyResult{err}
}

func (f *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	var buf bytes.Buffer
	f.mu.RLock()
	err := f.state.Snapshot(&buf)
	f.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return &metaSnapshot{b: buf.Bytes()}, nil
}

func (f *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := meta.New()
	if err := s.Restore(rc); err != nil {
		return err
	}
	f.mu.Lock()
	f.state, f.restored = s, true
	f.mu.Unlock()
	if f.changed != nil {
		f.changed()
	}
	return nil
}

type metaSnapshot struct{ b []byte }

func (s *metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.b); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *metaSnapshot) Release() {}

// Clock is the time source of the timestamps the leader writes into each entry.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config is what Open needs. Dir, NodeID, Stream and Advertise are required.
type Config struct {
	Dir    string
	NodeID raft.ServerID
	Stream raft.StreamLayer // the cluster port's route ID
	// Tune sets the Raft timing shared by the node's groups (nil: raft's defaults);
	// NoSync skips fsync of the log (unsafe; tests only).
	Tune   func(*raft.Config)
	NoSync bool
	Logger hclog.Logger
	// Changed is called on raft's apply goroutine after every applied entry or restored
	// snapshot; it must not block. Nil: not called.
	Changed func()
	Clock   Clock // nil: the real clock
	Addrs   raft.ServerAddressProvider
	// Advertise is this node's Raft address as peers dial it.
	Advertise raft.ServerAddress
	// BootstrapSelf: with no state on disk, form a one-voter group (a single node).
	BootstrapSelf bool
	// Place chooses the replicas of a new queue's or topic's partitions when the leader
	// proposes its creation without them (nil: they start unplaced).
	Place func(partitions int32) [][]string
	// Forward hands a command to the metadata leader on another node and returns the
	// index it committed at (Commit, on a node that does not lead); its errors wrap
	// ErrNotLeader when the command did not reach the leader. Nil: Commit only proposes
	// here.
	Forward func(ctx context.Context, leader string, cmd meta.Command) (uint64, error)
}

// Open opens (or creates) the group's state under c.Dir and starts its Raft replica.
func Open(c Config) (*Group, error) {
	if err := os.MkdirAll(c.Dir, 0o750); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(c.Dir, "raft.db"), NoSync: c.NoSync})
	if err != nil {
		return nil, fmt.Errorf("metagroup: log store: %w", err)
	}
	cache, err := raft.NewLogCache(256, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.Dir, 2, c.Logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("metagroup: snapshot store: %w", err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: c.Stream, MaxPool: 2, Timeout: 10 * time.Second, Logger: c.Logger,
		ServerAddressProvider: c.Addrs,
		MaxRPCsInFlight:       1, // one at a time: metadata changes are few (partition groups pipeline)
	})
	rc := raft.DefaultConfig()
	rc.LocalID = c.NodeID
	rc.Logger = c.Logger
	if c.Tune != nil {
		c.Tune(rc)
	}
	rc.SnapshotThreshold = 1024
	rc.TrailingLogs = 1024
	f := &metaFSM{state: meta.New(), changed: c.Changed}
	hasState, err := raft.HasExistingState(cache, store, snaps)
	if err != nil {
		store.Close()
		return nil, err
	}
	if !hasState && c.BootstrapSelf {
		// One voter: this node. A node of a multi-node cluster forms the group through
		// Form (bootstrap-expect) or is added by the leader.
		cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: c.NodeID, Address: c.Advertise}}}
		if err := raft.BootstrapCluster(rc, cache, store, snaps, trans, cfg); err != nil {
			store.Close()
			return nil, fmt.Errorf("metagroup: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, f, cache, store, snaps, trans)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("metagroup: %w", err)
	}
	g := &Group{raft: r, store: store, fsm: f, clock: c.Clock, place: c.Place, forward: c.Forward,
		hadState: hasState || c.BootstrapSelf}
	if g.clock == nil {
		g.clock = realClock{}
	}
	return g, nil
}

// HadState reports whether the group had state on disk when opened (or was bootstrapped
// as a single node): this node belongs to a formed cluster.
func (g *Group) HadState() bool { return g.hadState }

// Commit applies cmd through the metadata leader, here (Propose) or on the leader's
// node (Config.Forward), and returns the index it committed at. While no leader is
// known, or the one asked no longer leads, it tries again (with a growing pause, until
// ctx ends) when the command certainly did not commit, or when committing it twice is
// committing it once (idempotent).
func (g *Group) Commit(ctx context.Context, cmd meta.Command) (uint64, error) {
	if err := meta.ValidateCommand(cmd); err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		var idx uint64
		var err error
		leader := g.Leader()
		switch {
		case g.IsLeader():
			idx, err = g.ProposeIndex(ctx, cmd)
		case leader == "" || g.forward == nil:
			err = ErrNotLeader
		default:
			idx, err = g.forward(ctx, leader, cmd)
		}
		// The text, not the error chain, says whether the outcome is unknown: it crosses
		// the network as text when another node forwarded the command.
		uncertain := err != nil && strings.Contains(err.Error(), "may or may not")
		if err == nil || !errors.Is(err, ErrNotLeader) || (uncertain && !idempotent(cmd)) || ctx.Err() != nil {
			return idx, err
		}
		t := time.NewTimer(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// idempotent reports whether applying cmd twice has the effect of applying it once,
// so that Commit may repeat it after an attempt whose outcome is unknown (the metadata
// leader lost leadership while committing it). PutNode sets a node's record: a node
// registering itself while the metadata leader changes (a loaded machine, a rolling
// restart) retries instead of failing its start.
func idempotent(cmd meta.Command) bool {
	switch cmd.(type) {
	case *meta.PutNode:
		return true
	}
	return false
}

// Propose replicates one metadata command from this node, the leader, and returns the
// state's verdict (ErrExists, ErrNotFound, a *meta.ValidationError, ...) once it is
// committed and applied here.
func (g *Group) Propose(ctx context.Context, cmd meta.Command) error {
	_, err := g.ProposeIndex(ctx, cmd)
	return err
}

// ProposeIndex is Propose, also returning the log index the command committed at. The
// creation of a queue or topic proposed without replicas gets them from Config.Place
// first: the leader decides placement and writes it into the command (P1).
func (g *Group) ProposeIndex(ctx context.Context, cmd meta.Command) (uint64, error) {
	// Everything that does not depend on the state (names, S-ENT-2 bounds, key and rule
	// syntax) is checked before the command enters the log, so that Apply's verdict
	// depends on the state alone and later releases can replay this log (P1, P3).
	if err := meta.ValidateCommand(cmd); err != nil {
		return 0, err
	}
	if g.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	if g.place != nil {
		switch c := cmd.(type) {
		case *meta.CreateQueue:
			if c.Replicas == nil {
				c.Replicas = g.place(c.Properties.PartitionCount)
			}
		case *meta.CreateTopic:
			if c.Replicas == nil {
				c.Replicas = g.place(c.Properties.PartitionCount)
			}
		}
	}
	g.fsm.mu.RLock()
	now := max(g.clock.Now().UnixMilli(), g.fsm.state.Now())
	// Forwarding loops are refused here, on the leader's current state, not by Apply
	// (see meta.State.CheckForwardLoop).
	loopErr := g.fsm.state.CheckForwardLoop(cmd)
	g.fsm.mu.RUnlock()
	if loopErr != nil {
		return 0, loopErr
	}
	data, err := meta.AppendEntry(nil, &meta.Entry{Now: now, Cmd: cmd})
	if err != nil {
		return 0, err
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	fut := g.raft.Apply(data, timeout)
	if err := fut.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return 0, ErrNotLeader
		}
		if errors.Is(err, raft.ErrLeadershipLost) {
			return 0, fmt.Errorf("%w: leadership lost while committing; the change may or may not apply", ErrNotLeader)
		}
		return 0, fmt.Errorf("metagroup: commit: %w", err)
	}
	if r, ok := fut.Response().(applyResult); ok {
		return fut.Index(), r.err
	}
	return fut.Index(), nil
}

// WaitIndex waits until the local replica has applied index (read-your-writes after a
// change committed through another node); ErrNotApplied when ctx ends first.
func (g *Group) WaitIndex(ctx context.Context, index uint64) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for g.AppliedIndex() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: index %d: %v", ErrNotApplied, index, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// AppliedIndex is the index of the last entry the local state has applied (raft's own
// AppliedIndex moves when an entry is handed to the FSM, before it is applied).
func (g *Group) AppliedIndex() uint64 {
	g.fsm.mu.RLock()
	defer g.fsm.mu.RUnlock()
	if g.fsm.restored {
		// raft records a snapshot's index once Restore has returned.
		return max(g.fsm.applied, g.raft.AppliedIndex())
	}
	return g.fsm.applied
}

// Leader returns the metadata leader's node ID ("" when none is known).
func (g *Group) Leader() string {
	_, id := g.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this node leads the metadata group.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Servers returns the metadata group's configuration (nil when unknown).
func (g *Group) Servers() []raft.Server {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return f.Configuration().Servers
}

// Read runs fn with the local replica's state under the read lock; fn must not keep
// references into the state past its return, nor call back into the group.
func (g *Group) Read(fn func(s *meta.State)) {
	g.fsm.mu.RLock()
	defer g.fsm.mu.RUnlock()
	fn(g.fsm.state)
}

// Digest is the SHA-256 of the metadata state and the index raft has applied (every
// entry, not only commands: once no entry is in flight, equal on every member).
func (g *Group) Digest() (sum [32]byte, applied uint64) {
	g.Read(func(s *meta.State) { sum = s.Digest() })
	return sum, g.raft.AppliedIndex()
}

// Indexes are raft's last log index and last applied index here (every entry, not only
// commands), for the leader's catch-up checks and the group status.
func (g *Group) Indexes() (last, applied uint64) {
	return g.raft.LastIndex(), g.raft.AppliedIndex()
}

// Form bootstraps the group with servers as its voters, on a node with no state (a
// cluster forming with bootstrap-expect); nothing when the group exists already.
func (g *Group) Form(servers []raft.Server) error {
	err := g.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// Barrier waits until every entry committed before it is applied here (on the leader).
func (g *Group) Barrier(timeout time.Duration) error { return g.raft.Barrier(timeout).Error() }

// AddNonvoter adds node id, reached at addr, as a non-voter (on the leader).
func (g *Group) AddNonvoter(id, addr string, timeout time.Duration) error {
	return g.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// AddVoter adds node id, reached at addr, as a voter, or promotes it (on the leader).
func (g *Group) AddVoter(id, addr string, timeout time.Duration) error {
	return g.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// DemoteVoter makes voter id a non-voter, which still receives every entry (on the
// leader).
func (g *Group) DemoteVoter(id string, timeout time.Duration) error {
	return g.raft.DemoteVoter(raft.ServerID(id), 0, timeout).Error()
}

// RemoveServer removes node id from the group (on the leader).
func (g *Group) RemoveServer(id string, timeout time.Duration) error {
	return g.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error()
}

// TransferLeadership hands leadership to another voter (on the leader).
func (g *Group) TransferLeadership() error { return g.raft.LeadershipTransfer().Error() }

// TransferLeadershipTo hands this node's leadership to voter id at addr and waits for it.
func (g *Group) TransferLeadershipTo(id, addr string) error {
	return g.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
}

// WatchLeader calls fn with each change of the group's leader as this node sees it (""
// when it has none) and the term, until ctx ends. Raft's observer drops observations
// when the channel is full, so a slow fn never holds up the group; the next change is
// reported.
func (g *Group) WatchLeader(ctx context.Context, fn func(leader string, term uint64)) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	g.raft.RegisterObserver(obs)
	defer g.raft.DeregisterObserver(obs)
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-ch:
			fn(string(o.Data.(raft.LeaderObservation).LeaderID), g.raft.CurrentTerm())
		}
	}
}

// Close stops the replica and closes its log store.
func (g *Group) Close() error {
	err := g.raft.Shutdown().Error()
	return errors.Join(err, g.store.Close())
}
