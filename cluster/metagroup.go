package cluster

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// metaGroupID is the metadata group's route on the cluster port. Partition groups are
// numbered from 1 by the metadata state, so 0 is free.
const metaGroupID = 0

// metaGroup is the metadata Raft group: the namespace, its entities, keys and placement
// (cluster/meta.State) replicated on the metadata voters. Reads are served from the local
// replica; writes are proposed to the leader.
type metaGroup struct {
	// hadState: the group had state on disk when opened (or was bootstrapped as a single
	// node): this node belongs to a formed cluster.
	hadState bool
	raft     *raft.Raft
	store    *raftboltdb.BoltStore
	fsm      *metaFSM
	clock    Clock
	closed   chan struct{}
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
		return applyResult{fmt.Errorf("cluster: metadata log entry %d: %w", l.Index, err)}
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

// metaGroupConfig is what openMetaGroup needs.
type metaGroupConfig struct {
	dir     string
	nodeID  raft.ServerID
	stream  raft.StreamLayer
	timing  RaftTiming
	logger  hclog.Logger
	changed func()
	clock   Clock
	addrs   raft.ServerAddressProvider
	// advertise is this node's Raft address as peers dial it.
	advertise raft.ServerAddress
	// bootstrapSelf: with no state on disk, form a one-voter group (a single node).
	bootstrapSelf bool
}

func openMetaGroup(c metaGroupConfig) (*metaGroup, error) {
	if err := os.MkdirAll(c.dir, 0o750); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(c.dir, "raft.db"), NoSync: c.timing.NoSync})
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log store: %w", err)
	}
	cache, err := raft.NewLogCache(256, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.dir, 2, c.logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: metadata snapshot store: %w", err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: c.stream, MaxPool: 2, Timeout: 10 * time.Second, Logger: c.logger,
		ServerAddressProvider: c.addrs,
		MaxRPCsInFlight:       1, // no pipelining: see partition.Open (a hashicorp/raft deadlock)
	})
	rc := raft.DefaultConfig()
	rc.LocalID = c.nodeID
	rc.Logger = c.logger
	c.timing.apply(rc)
	rc.SnapshotThreshold = 1024
	rc.TrailingLogs = 1024
	f := &metaFSM{state: meta.New(), changed: c.changed}
	hasState, err := raft.HasExistingState(cache, store, snaps)
	if err != nil {
		store.Close()
		return nil, err
	}
	if !hasState && c.bootstrapSelf {
		// One voter: this node. A node of a multi-node cluster forms the group through
		// metaGroup.form (bootstrap-expect) or is added by the leader.
		cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: c.nodeID, Address: c.advertise}}}
		if err := raft.BootstrapCluster(rc, cache, store, snaps, trans, cfg); err != nil {
			store.Close()
			return nil, fmt.Errorf("cluster: bootstrap metadata group: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, f, cache, store, snaps, trans)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: metadata group: %w", err)
	}
	return &metaGroup{raft: r, store: store, fsm: f, clock: c.clock, closed: make(chan struct{}),
		hadState: hasState || c.bootstrapSelf}, nil
}

// propose replicates one metadata command and returns the state's verdict (ErrExists,
// ErrNotFound, a *meta.ValidationError, ...) once it is committed and applied here.
func (g *metaGroup) propose(ctx context.Context, cmd meta.Command) error {
	_, err := g.proposeIndex(ctx, cmd)
	return err
}

// proposeIndex is propose, also returning the log index the command committed at.
func (g *metaGroup) proposeIndex(ctx context.Context, cmd meta.Command) (uint64, error) {
	// Everything that does not depend on the state (names, S-ENT-2 bounds, key and rule
	// syntax) is checked before the command enters the log, so that Apply's verdict
	// depends on the state alone and later releases can replay this log (P1, P3).
	if err := meta.ValidateCommand(cmd); err != nil {
		return 0, err
	}
	if g.raft.State() != raft.Leader {
		return 0, ErrNotMetadataLeader
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
			return 0, ErrNotMetadataLeader
		}
		if errors.Is(err, raft.ErrLeadershipLost) {
			return 0, fmt.Errorf("%w: leadership lost while committing; the change may or may not apply", ErrNotMetadataLeader)
		}
		return 0, fmt.Errorf("cluster: metadata commit: %w", err)
	}
	if r, ok := fut.Response().(applyResult); ok {
		return fut.Index(), r.err
	}
	return fut.Index(), nil
}

// waitIndex waits until the local replica has applied index (read-your-writes after a
// change committed through another node).
func (g *metaGroup) waitIndex(ctx context.Context, index uint64) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for g.appliedIndex() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: metadata index %d not applied here: %v", ErrUnavailable, index, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// appliedIndex is the index of the last entry the local state has applied (raft's own
// AppliedIndex moves when an entry is handed to the FSM, before it is applied).
func (g *metaGroup) appliedIndex() uint64 {
	g.fsm.mu.RLock()
	defer g.fsm.mu.RUnlock()
	if g.fsm.restored {
		// raft records a snapshot's index once Restore has returned.
		return max(g.fsm.applied, g.raft.AppliedIndex())
	}
	return g.fsm.applied
}

// leader returns the metadata leader's node ID ("" when none is known).
func (g *metaGroup) leader() string {
	_, id := g.raft.LeaderWithID()
	return string(id)
}

// isLeader reports whether this node leads the metadata group.
func (g *metaGroup) isLeader() bool { return g.raft.State() == raft.Leader }

// servers returns the metadata group's configuration.
func (g *metaGroup) servers() []raft.Server {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return f.Configuration().Servers
}

// read runs fn with the local replica's state under the read lock; fn must not keep
// references into the state past its return.
func (g *metaGroup) read(fn func(s *meta.State)) {
	g.fsm.mu.RLock()
	defer g.fsm.mu.RUnlock()
	fn(g.fsm.state)
}

// digest is the SHA-256 of the metadata state and the index raft has applied (every
// entry, not only commands: once no entry is in flight, equal on every member).
func (g *metaGroup) digest() MetaDigest {
	var d [32]byte
	g.read(func(s *meta.State) { d = s.Digest() })
	return MetaDigest{Digest: hex.EncodeToString(d[:]), Applied: g.raft.AppliedIndex()}
}

func (g *metaGroup) close() error {
	err := g.raft.Shutdown().Error()
	return errors.Join(err, g.store.Close())
}
