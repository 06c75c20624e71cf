package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/placement"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// reconciler makes the partition replicas this node runs match the metadata: it opens
// the ones placed here, pushes entity configuration and moves the membership of the
// groups led here toward the placement (membership.go), starts and stops the
// auto-forwarders of the replicas led here (forward.go), and closes and deletes the
// replicas placed elsewhere. Its loop runs on the node's lifetime (goFunc); Apply and
// Start run passes too.
type reconciler struct {
	// n is the node's shared state the passes read and change: the metadata, gossip,
	// the parts map (under Node.mu), the cluster port, the log engine, the peers.
	n    *Node
	kick chan struct{} // cap 1: metadata or membership changed, reconcile
	// gen counts the changes (changed calls): the loop skips a pass while nothing
	// changed since its last converged pass (reconcileLoop).
	gen atomic.Uint64
	// mu serialises reconcile passes (the loop's and those Apply runs to wait for its
	// own change). Lock order: mu before Node.mu.
	mu  sync.Mutex
	fwd map[string]context.CancelFunc // running forwarders by spec key; owner: mu
	// cfgMu serialises the entity configuration pushes of the groups led here
	// (pushConfig): each computes what it proposes under it. Lock order: mu before
	// cfgMu.
	cfgMu sync.Mutex
	// underRep: the groups led here last seen under-replicated (replication.go); owner:
	// mu.
	underRep underReplicated
}

func newReconciler(n *Node) *reconciler {
	return &reconciler{n: n, kick: make(chan struct{}, 1), fwd: map[string]context.CancelFunc{}, underRep: underReplicated{}}
}

// changed runs on the metadata group's apply goroutine, memberlist's event goroutine
// and a partition's leadership goroutines; it must not block.
func (rc *reconciler) changed() {
	rc.gen.Add(1)
	select {
	case rc.kick <- struct{}{}:
	default:
	}
}

// reconcileInterval is how often the reconciler runs while the node has not converged
// (a replica to open or remove, a membership step under way) or something changed.
const reconcileInterval = time.Second

// reconcileSettledInterval is how often it runs anyway once a pass converged and nothing
// changed since: what it reacts to (the metadata, gossip's members, this node's
// leaderships) calls changed, so the pass is a safety net. Every pass reads every
// placement: with 10,000 groups per node, a pass a second was most of an idle node's CPU.
const reconcileSettledInterval = 10 * time.Second

// reconcileLoop runs reconcile when kicked and every reconcileInterval, until ctx (the
// node's lifetime) ends; Close cancels a pass in progress. After a converged pass it
// skips the ticks until something changes or reconcileSettledInterval passes.
func (rc *reconciler) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	var settled bool // the last pass converged
	var passGen uint64
	var passAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-rc.kick:
		case <-t.C:
		}
		g := rc.gen.Load()
		if settled && g == passGen && time.Since(passAt) < reconcileSettledInterval {
			continue
		}
		passGen, passAt = g, time.Now()
		settled = rc.reconcile(ctx)
	}
}

// desired is one partition replica the metadata places on this node.
type desired struct {
	entity    string
	index     int
	cfg       fsm.Config // current configuration
	base      fsm.Config // creation configuration (the log replays from it)
	bootstrap []string   // initial voters; this node bootstraps the group if among them
}

// reconcile makes the partitions this node runs match the metadata: it opens the ones
// placed here, and, for the groups it leads, pushes changed entity configuration
// (S-ENT-3) and moves the group's membership one safe step toward the placement
// (membership.go). It closes and deletes a replica only once its entity is gone or its
// group no longer counts this node. It reports whether everything matches.
func (rc *reconciler) reconcile(ctx context.Context) (converged bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.n.gossip != nil {
		rc.wakeOrphans(rc.n.gossip.Alive())
	}
	converged = true
	want := map[uint32]desired{}
	groups := map[uint32]meta.Partition{}
	rc.n.meta.Read(func(s *meta.State) {
		for _, pl := range s.PlacementsView() {
			for i, part := range pl.Partitions {
				groups[part.GroupID] = part
				if !containsNode(part.Replicas, rc.n.cfg.NodeID) {
					continue
				}
				cfg, err := s.PartitionConfig(pl.Entity, i)
				if err != nil {
					rc.n.log.Error("partition config", "entity", pl.Entity, "partition", i, "err", err)
					continue
				}
				d := desired{entity: strings.ToLower(pl.Entity), index: i, cfg: cfg, base: cfg, bootstrap: part.Bootstrap}
				if len(part.Base) > 0 {
					if e, err := fsm.DecodeEntry(part.Base); err == nil && len(e.Cmds) == 1 {
						if u, ok := e.Cmds[0].(*fsm.UpdateEntity); ok {
							d.base = u.Config
						}
					}
				}
				if part.Bootstrap == nil {
					// Created before placements recorded their voters: a single node's.
					d.bootstrap = []string{rc.n.cfg.NodeID}
				}
				want[part.GroupID] = d
			}
		}
	})
	if hook := rc.n.cfg.afterConfigRead; hook != nil {
		hook()
	}
	rc.n.mu.RLock()
	var gone []*replica
	var lead []*replica
	var leaving []*replica // groups led here that are placed elsewhere now
	for id, r := range rc.n.parts {
		if _, ok := want[id]; !ok {
			gone = append(gone, r)
			if _, placed := groups[id]; placed && r.p.IsLeader() {
				leaving = append(leaving, r)
			}
			continue
		}
		if r.p.IsLeader() {
			lead = append(lead, r)
		}
	}
	rc.n.mu.RUnlock()
	for id, d := range want {
		rc.n.mu.RLock()
		_, have := rc.n.parts[id]
		rc.n.mu.RUnlock()
		if have {
			continue
		}
		if hold := rc.n.cfg.holdReplica; hold != nil && hold(d.entity) {
			converged = false
			continue
		}
		if _, err := rc.openReplica(d); err != nil {
			// The next pass opens it again. A new group's bootstrap that finds state was
			// raced by a peer's first campaign, whose vote request this replica recorded
			// (hashicorp/raft refuses to bootstrap then): routine, and the next open finds
			// that state and joins without bootstrapping.
			level := slog.LevelWarn
			if errors.Is(err, raft.ErrCantBootstrap) {
				level = slog.LevelDebug
			}
			rc.n.log.Log(ctx, level, "open partition", "entity", d.entity, "partition", d.index, "err", err)
			converged = false
		}
	}
	for _, r := range lead {
		d := want[r.cfg.GroupID]
		if !reflect.DeepEqual(r.p.EntityConfig(), d.cfg) {
			// d.cfg is what the metadata said when this pass began; pushConfig reads
			// it again, so a change pushed meanwhile is never undone.
			if err := rc.pushConfig(ctx, r, true); err != nil {
				rc.n.log.Warn("update partition config", "entity", r.entity, "partition", r.index, "err", err)
				converged = false
				continue
			}
		}
		if !rc.reconcileMembers(ctx, r, groups[r.cfg.GroupID]) {
			converged = false
		}
	}
	// A group whose placement dropped this node while it leads (a replica moved away by
	// qbctl node remove, rebalancing or a zone move): this leader moves the group on
	// like any other, adding and promoting the new replica, and hands its leadership
	// over last (reconcileMembers, step 3); nothing else would, since no other replica
	// leads it.
	for _, r := range leaving {
		if !rc.reconcileMembers(ctx, r, groups[r.cfg.GroupID]) {
			converged = false
		}
	}
	rc.underRep.note(rc.n.log, lead, rc.n.gossip.Alive(), placement.Want(rc.n.cfg.Replicas, registeredNodes(rc.n.meta)))
	for _, r := range gone {
		if part, exists := groups[r.cfg.GroupID]; exists && rc.stillMember(r) && !rc.leaderDropped(ctx, r, part) {
			// Placed elsewhere now, but the group still counts this replica: its leader
			// removes it first (never delete data a quorum may need).
			converged = false
			continue
		}
		rc.n.mu.Lock()
		delete(rc.n.parts, r.cfg.GroupID)
		rc.n.mu.Unlock()
		if err := r.p.Close(); err != nil {
			rc.n.log.Warn("close partition", "entity", r.entity, "partition", r.index, "err", err)
		}
		dir := partition.Dir(rc.n.cfg.DataDir, r.entity, r.index)
		if err := rc.n.logs.removeReplicaData(r); err != nil {
			rc.n.log.Warn("remove partition data", "entity", r.entity, "partition", r.index, "err", err)
		}
		_ = os.Remove(filepath.Dir(dir)) // the entity's directory, once its last partition is gone
	}
	rc.reconcileForwarders()
	return converged
}

// wakeOrphans wakes every quiet replica here whose leader's node is not in alive (the
// live members gossip counts). It runs at each reconcile pass and at once when gossip
// declares a member gone (Node.peerGone). A quiet group sends no heartbeats
// (RaftConfig.QuiesceAfter, raft patch 4), so its followers would not notice a leader
// paused or cut off; a leader whose port refuses connections is found at once by the
// transport instead. Woken, a follower's
// election timer runs from its last contact, so it campaigns unless the leader speaks.
func (rc *reconciler) wakeOrphans(alive map[string]bool) {
	rc.n.mu.RLock()
	defer rc.n.mu.RUnlock()
	for _, r := range rc.n.parts {
		if id, _ := r.p.Leader(); id != "" && id != rc.n.cfg.NodeID && !alive[id] && r.p.Quiet() {
			rc.n.log.Info("waking a quiet partition: its leader's node is not alive", "entity", r.entity, "partition", r.index, "leader", id)
			r.p.Wake()
		}
	}
}

// leaderDropped reports whether the leader of r's group, among the replicas placement
// now names, has committed a configuration without this node. hashicorp/raft stops
// replicating to a server as soon as it appends the configuration that removes it, so
// the removed replica may never see that entry and would go on counting itself a
// member, keeping its data for good. Only a leader that has applied everything it
// holds (so the removal is committed) is believed.
func (rc *reconciler) leaderDropped(ctx context.Context, r *replica, part meta.Partition) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, id := range part.Replicas {
		addr := rc.n.addrOf(id)
		if id == rc.n.cfg.NodeID || addr == "" {
			continue
		}
		gs, err := rc.n.peer(addr).GroupStatus(ctx, []uint32{r.cfg.GroupID})
		if err != nil {
			continue
		}
		for _, g := range gs {
			if g.Group != r.cfg.GroupID || !g.IsLeader {
				continue
			}
			for _, s := range g.Servers {
				if s.ID == rc.n.cfg.NodeID {
					return false
				}
			}
			return g.Applied >= g.LastIndex
		}
	}
	return false
}

// stillMember reports whether r's group still has this node in its configuration.
func (rc *reconciler) stillMember(r *replica) bool {
	servers, err := r.p.Servers()
	if err != nil {
		return true // unknown: keep it
	}
	for _, s := range servers {
		if string(s.ID) == rc.n.cfg.NodeID {
			return true
		}
	}
	return false
}

func containsNode(replicas []string, id string) bool {
	for _, r := range replicas {
		if r == id {
			return true
		}
	}
	return false
}

func (rc *reconciler) openReplica(d desired) (*replica, error) {
	pc := partition.DefaultConfig()
	var closeTransport func() error
	if rc.n.groups != nil {
		tr, err := rc.n.groups.Transport(d.cfg.GroupID)
		if err != nil {
			return nil, err
		}
		pc.Transport, closeTransport = tr, tr.Close
	} else {
		layer, err := rc.n.mux.Layer(d.cfg.GroupID)
		if err != nil {
			return nil, err
		}
		pc.Stream, closeTransport = layer, layer.Close
	}
	pc.DataDir = rc.n.cfg.DataDir
	pc.Entity = d.entity
	pc.Index = d.index
	pc.NodeID = raft.ServerID(rc.n.cfg.NodeID)
	pc.FSM = d.base
	pc.AddressProvider = addrProvider{rc.n}
	if containsNode(d.bootstrap, rc.n.cfg.NodeID) {
		for _, id := range d.bootstrap {
			addr := rc.n.addrOf(id)
			if addr == "" {
				addr = id // resolved through the address provider once known
			}
			pc.Peers = append(pc.Peers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
		}
	}
	pc.HeartbeatTimeout = rc.n.cfg.Raft.HeartbeatTimeout
	pc.ElectionTimeout = rc.n.cfg.Raft.ElectionTimeout
	pc.LeaderLeaseTimeout = rc.n.cfg.Raft.LeaderLeaseTimeout
	pc.CommitTimeout = rc.n.cfg.Raft.CommitTimeout
	if d := rc.n.cfg.Raft.PartitionCommitTimeout; d > 0 {
		pc.CommitTimeout = d
	}
	pc.NoSync = rc.n.cfg.Storage.NoSync
	pc.Pipeline = rc.n.cfg.Raft.Pipeline
	pc.QuiesceAfter = rc.n.cfg.Raft.QuiesceAfter
	pc.Bodies = rc.n.bodies
	pc.LogStore = rc.n.logs.logStore()
	pc.Engine = rc.n.logs.engine
	pc.Leadership = rc.n.leaders
	if rc.n.cfg.Bench.WholeBodies {
		pc.ChunkBytes = 0
	}
	pc.Logger = rc.n.raftLogger(fmt.Sprintf("%s.%d", d.entity, d.index))
	pc.LeadershipChanged = rc.changed // a leader may have configuration or members to move
	if rc.n.metrics != nil {
		pc.Observer = rc.n.metrics
	}
	if c, ok := rc.n.clock.(partition.Clock); ok {
		pc.Clock = c // a test clock that also arms timers drives the partitions too
	}
	p, err := partition.Open(pc)
	if err != nil {
		closeTransport()
		return nil, err
	}
	r := &replica{entity: d.entity, index: d.index, p: p, cfg: d.cfg}
	rc.n.mu.Lock()
	rc.n.parts[d.cfg.GroupID] = r
	rc.n.mu.Unlock()
	return r, nil
}

// syncConfig makes the group r leads apply the entity configuration of this node's
// metadata as of index (or later): a metadata change that alters an entity is visible
// to the entity's next operation through any node, as it was on a single node (S-ENT-3).
func (rc *reconciler) syncConfig(ctx context.Context, r *replica, index uint64) error {
	if !r.p.IsLeader() {
		return r.p.NotLeader()
	}
	if err := rc.n.meta.WaitIndex(ctx, index); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return rc.pushConfig(ctx, r, false)
}

// pushConfig makes the group r leads run the entity configuration of this node's
// metadata as it is now, if the group runs another one.
//
// A configuration is proposed whole, so one computed from older metadata than the
// group's current one undoes a change: a subscription created meanwhile vanished from
// its topic's partitions until the next pass, and messages sent in between were not
// copied to it (nor could it be received from: "subscription not found"). So pushes
// are serialised on the node and each reads the metadata under the lock: one node's
// pushes only move forward. A push nobody asked for at a given index (catchUp: the
// reconcile pass) first catches this node's metadata up with the metadata leader's
// (SyncMeta): a new leader of the group whose metadata replica lags would otherwise
// push what the previous leader had already replaced. syncConfig waits for its index
// instead.
func (rc *reconciler) pushConfig(ctx context.Context, r *replica, catchUp bool) error {
	rc.cfgMu.Lock()
	defer rc.cfgMu.Unlock()
	if !r.p.IsLeader() {
		return r.p.NotLeader()
	}
	if catchUp {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rc.n.store.SyncMeta(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("catching the metadata up before pushing a configuration: %w", err)
		}
	}
	want, ok := rc.desiredConfig(r.cfg.GroupID)
	if !ok {
		return nil // the entity is gone
	}
	if reflect.DeepEqual(r.p.EntityConfig(), want) {
		return nil
	}
	return r.p.UpdateEntity(ctx, want)
}

// desiredConfig is the configuration group id must run with according to the local
// metadata.
func (rc *reconciler) desiredConfig(id uint32) (fsm.Config, bool) {
	var cfg fsm.Config
	var ok bool
	rc.n.meta.Read(func(s *meta.State) {
		for _, pl := range s.PlacementsView() {
			for i, p := range pl.Partitions {
				if p.GroupID == id {
					c, err := s.PartitionConfig(pl.Entity, i)
					cfg, ok = c, err == nil
					return
				}
			}
		}
	})
	return cfg, ok
}
