package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/partition/transport"
)

// Node is one Quorumbus node: the cluster port, its replica of the metadata group, and
// the replicas of the entity partitions placed on it. It routes every data-plane
// operation to the partition that owns it (router.go) and serves the admin API's store
// (store.go).
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	mux   *transport.Mux
	meta  *metaGroup

	// mu guards parts and the maps below. Lock order: mu before any partition call is
	// never held across one (calls happen after copying what is needed).
	mu    sync.RWMutex
	parts map[uint32]*replica // by group ID

	kick chan struct{} // cap 1: metadata changed, reconcile
	// recMu serialises reconcile passes (the loop's and those Apply runs to wait for its
	// own change).
	recMu   sync.Mutex
	fwd     map[string]context.CancelFunc // running forwarders by spec key; owner: recMu
	closing chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// replica is one partition replica this node runs.
type replica struct {
	entity string // lower-case entity name
	index  int
	p      *partition.Partition
	cfg    fsm.Config // the configuration last pushed to (or opened with) the group
}

// Start opens (or creates) the node's state under cfg.DataDir and serves once the
// metadata group has a leader and every partition placed here is open. A new node
// bootstraps a single-voter metadata group, names the namespace and creates the default
// key.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger,
		clock:   cfg.Clock,
		parts:   map[uint32]*replica{},
		fwd:     map[string]context.CancelFunc{},
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.clock == nil {
		n.clock = realClock{}
	}
	mux, err := transport.Listen(cfg.ClusterAddr, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", cfg.ClusterAddr, err)
	}
	n.mux = mux
	layer, err := mux.Layer(metaGroupID)
	if err != nil {
		mux.Close()
		return nil, err
	}
	n.meta, err = openMetaGroup(metaGroupConfig{
		dir: filepath.Join(cfg.DataDir, "meta"), nodeID: raft.ServerID(cfg.NodeID), stream: layer,
		timing: cfg.Raft, logger: n.raftLogger("meta"), changed: n.changed, clock: n.clock,
	})
	if err != nil {
		mux.Close()
		return nil, err
	}
	if err := n.bootstrap(ctx); err != nil {
		n.Close()
		return nil, err
	}
	n.reconcile(ctx)
	n.wg.Add(1)
	go n.reconcileLoop()
	// Serve only once every partition placed here has its leader (after a restart, each
	// group elects again and replays its log), so the first request after Start succeeds.
	if err := n.waitApplied(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("cluster: partitions not serving: %w", err)
	}
	return n, nil
}

// ClusterAddr is the address the cluster port is bound to.
func (n *Node) ClusterAddr() string { return n.mux.Addr().String() }

// raftLogger is hashicorp/raft's logger for one group. Raft reports ordinary events
// (an election at start-up) as warnings, so it logs errors only unless the node runs at
// debug level.
func (n *Node) raftLogger(name string) hclog.Logger {
	level := hclog.Error
	if n.log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: "raft." + name, Level: level, Output: os.Stderr})
}

func (n *Node) bootstrap(ctx context.Context) error {
	if err := n.meta.waitLeader(ctx); err != nil {
		return err
	}
	var nsName string
	var key meta.SASKey
	var haveKey bool
	n.meta.read(func(s *meta.State) {
		nsName = s.Namespace().Name
		key, haveKey = s.SASKey(n.cfg.DefaultKeyName)
	})
	if nsName == "" {
		if err := n.meta.propose(ctx, &meta.SetNamespace{Name: n.cfg.Namespace}); err != nil {
			return fmt.Errorf("cluster: name the namespace: %w", err)
		}
	}
	want := n.cfg.DefaultKey
	if !haveKey || (want != "" && want != key.PrimaryKey) {
		if want == "" {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			want = base64.StdEncoding.EncodeToString(b)
		}
		k := meta.SASKey{Name: n.cfg.DefaultKeyName, PrimaryKey: want, SecondaryKey: key.SecondaryKey,
			Rights: meta.RightManage | meta.RightSend | meta.RightListen}
		if err := n.meta.propose(ctx, &meta.PutSASKey{Key: k}); err != nil {
			return fmt.Errorf("cluster: create the default key: %w", err)
		}
	}
	return nil
}

// DefaultKey returns the default key's name and primary key (for the printed
// connection string).
func (n *Node) DefaultKey() (name, key string) {
	n.meta.read(func(s *meta.State) {
		if k, ok := s.SASKey(n.cfg.DefaultKeyName); ok {
			name, key = k.Name, k.PrimaryKey
		}
	})
	return name, key
}

// Namespace returns the namespace name.
func (n *Node) Namespace() string {
	var name string
	n.meta.read(func(s *meta.State) { name = s.Namespace().Name })
	return name
}

// LoadEmulatorConfig creates what an emulator Config.json declares and does not exist
// yet (entities changed through the admin API since are left alone). It returns the
// file's warnings (unknown fields).
func (n *Node) LoadEmulatorConfig(ctx context.Context, data []byte) ([]string, error) {
	ec, warnings, err := meta.LoadEmulatorConfig(data)
	if err != nil {
		return warnings, err
	}
	var plan []meta.Command
	n.meta.read(func(s *meta.State) { plan = ec.Plan(s) })
	for _, cmd := range plan {
		if _, ok := cmd.(*meta.SetNamespace); ok {
			continue // the node's --namespace names it; Config.json's name is informational
		}
		if err := n.Apply(ctx, cmd); err != nil {
			//lint:ignore ST1005 Config.json is the file's name
			return warnings, fmt.Errorf("Config.json: %s: %w", cmd.Op(), err)
		}
	}
	n.reconcile(ctx)
	return warnings, nil
}

// Ready reports whether the node can serve: the metadata group has a leader and every
// partition placed here has one.
func (n *Node) Ready() error {
	select {
	case <-n.closing:
		return ErrClosed
	default:
	}
	if n.meta.raft.State() != raft.Leader {
		if addr, _ := n.meta.raft.LeaderWithID(); addr == "" {
			return errors.New("metadata group has no leader")
		}
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, r := range n.parts {
		id, _ := r.p.Leader()
		if id == "" {
			return fmt.Errorf("partition %d of %s has no leader", r.index, r.entity)
		}
		// A leader serves reads only after its post-election barrier; until then this
		// node would answer with an error (or, worse, stale state).
		if id == n.cfg.NodeID && !r.p.IsLeader() {
			return fmt.Errorf("partition %d of %s is catching up after its election", r.index, r.entity)
		}
	}
	return nil
}

// changed runs on the metadata group's apply goroutine; it must not block.
func (n *Node) changed() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.closing:
			return
		case <-n.kick:
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-n.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			n.reconcile(ctx)
			cancel()
		}
	}
}

// desired is one partition replica the metadata places on this node.
type desired struct {
	entity string
	index  int
	cfg    fsm.Config
}

// reconcile makes the partitions this node runs match the metadata: it opens the ones
// placed here, pushes changed entity configuration to their leaders (S-ENT-3), and closes
// and deletes the ones whose entity is gone. It reports whether everything matches; when
// a push had to wait for a partition's leader, it kicks itself to try again.
func (n *Node) reconcile(ctx context.Context) (converged bool) {
	n.recMu.Lock()
	defer n.recMu.Unlock()
	converged = true
	want := map[uint32]desired{}
	n.meta.read(func(s *meta.State) {
		for _, pl := range s.Placements() {
			for i, part := range pl.Partitions {
				if !containsNode(part.Replicas, n.cfg.NodeID) {
					continue
				}
				cfg, err := s.PartitionConfig(pl.Entity, i)
				if err != nil {
					n.log.Error("partition config", "entity", pl.Entity, "partition", i, "err", err)
					continue
				}
				want[part.GroupID] = desired{entity: strings.ToLower(pl.Entity), index: i, cfg: cfg}
			}
		}
	})
	n.mu.RLock()
	var open, gone []*replica
	var update []*replica
	var updateCfg []fsm.Config
	for id, r := range n.parts {
		d, ok := want[id]
		if !ok {
			gone = append(gone, r)
			continue
		}
		if !reflect.DeepEqual(d.cfg, r.cfg) {
			update = append(update, r)
			updateCfg = append(updateCfg, d.cfg)
		}
	}
	n.mu.RUnlock()
	for id, d := range want {
		n.mu.RLock()
		_, have := n.parts[id]
		n.mu.RUnlock()
		if have {
			continue
		}
		r, err := n.openReplica(d)
		if err != nil {
			n.log.Error("open partition", "entity", d.entity, "partition", d.index, "err", err)
			continue
		}
		open = append(open, r)
	}
	for i, r := range update {
		if !r.p.IsLeader() {
			// The group's leader pushes it. Here that is this replica once its
			// election and barrier complete: try again shortly.
			converged = false
			n.retrySoon()
			continue
		}
		if err := r.p.UpdateEntity(ctx, updateCfg[i]); err != nil {
			n.log.Warn("update partition config", "entity", r.entity, "partition", r.index, "err", err)
			converged = false
			n.retrySoon()
			continue
		}
		n.mu.Lock()
		r.cfg = updateCfg[i]
		n.mu.Unlock()
	}
	for _, r := range gone {
		n.mu.Lock()
		delete(n.parts, r.cfg.GroupID)
		n.mu.Unlock()
		if err := r.p.Close(); err != nil {
			n.log.Warn("close partition", "entity", r.entity, "partition", r.index, "err", err)
		}
		dir := partition.Dir(n.cfg.DataDir, r.entity, r.index)
		if err := os.RemoveAll(dir); err != nil {
			n.log.Warn("remove partition data", "entity", r.entity, "partition", r.index, "err", err)
		}
		_ = os.Remove(filepath.Dir(dir)) // the entity's directory, once its last partition is gone
	}
	_ = open
	n.reconcileForwarders()
	return converged
}

// retrySoon kicks the reconcile loop after a short pause.
func (n *Node) retrySoon() {
	t := time.AfterFunc(50*time.Millisecond, n.changed)
	go func() {
		select {
		case <-n.closing:
			t.Stop()
		case <-time.After(time.Second):
		}
	}()
}

func containsNode(replicas []string, id string) bool {
	for _, r := range replicas {
		if r == id {
			return true
		}
	}
	return false
}

func (n *Node) openReplica(d desired) (*replica, error) {
	layer, err := n.mux.Layer(d.cfg.GroupID)
	if err != nil {
		return nil, err
	}
	pc := partition.DefaultConfig()
	pc.DataDir = n.cfg.DataDir
	pc.Entity = d.entity
	pc.Index = d.index
	pc.NodeID = raft.ServerID(n.cfg.NodeID)
	pc.Stream = layer
	pc.FSM = d.cfg
	pc.Peers = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.mux.Addr().String())}}
	pc.HeartbeatTimeout = n.cfg.Raft.HeartbeatTimeout
	pc.ElectionTimeout = n.cfg.Raft.ElectionTimeout
	pc.LeaderLeaseTimeout = n.cfg.Raft.LeaderLeaseTimeout
	pc.CommitTimeout = n.cfg.Raft.CommitTimeout
	pc.NoSync = n.cfg.Raft.NoSync
	pc.Logger = n.raftLogger(fmt.Sprintf("%s.%d", d.entity, d.index))
	p, err := partition.Open(pc)
	if err != nil {
		layer.Close()
		return nil, err
	}
	r := &replica{entity: d.entity, index: d.index, p: p, cfg: d.cfg}
	n.mu.Lock()
	n.parts[d.cfg.GroupID] = r
	n.mu.Unlock()
	return r, nil
}

// Close stops the node: partitions first (each answers its pending calls), then the
// metadata group and the cluster port.
func (n *Node) Close() error {
	var err error
	n.once.Do(func() {
		close(n.closing)
		n.wg.Wait()
		n.mu.Lock()
		parts := n.parts
		n.parts = map[uint32]*replica{}
		n.mu.Unlock()
		for _, r := range parts {
			err = errors.Join(err, r.p.Close())
		}
		err = errors.Join(err, n.meta.close(), n.mux.Close())
	})
	return err
}
