package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/gossip"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/internal/durable"
	"github.com/quorumbus/quorumbus/internal/hashilog"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/partition/transport"
)

// Node is one Quorumbus node: the cluster port, its membership (cluster/gossip), its replica
// of the metadata group, and the replicas of the entity partitions placed on it. Its
// rooms are types of their own: Router (Node.Router) runs every data-plane operation
// on the partition that owns it, here or on the node that leads it; Store (Node.Store)
// and Ops (Node.Ops) are the admin API's store and operator surface; the reconciler
// (reconcile.go), the steward (membership.go) and the log engine (logengine.go) are the
// node's own.
type Node struct {
	cfg    Config
	log    *slog.Logger
	libLog *hashilog.Bridge // raft's and memberlist's lines into log (docs/operations.md § What is logged)
	clock  Clock
	mux    *transport.Mux
	groups *transport.Groups // every partition group's Raft transport; nil with Bench.PerGroupTransport
	meta   *metagroup.Group
	gossip *gossip.Gossip
	rpc    *rpcLayer
	gone   chan goneEvent    // members gossip declared gone, for goneLoop
	adv    string            // advertised cluster address
	inc    string            // incarnation of the data directory
	bodies *partition.Bodies // nil: every body in memory (Config.BodyMemoryBudget)
	logs   *logEngine        // shared Raft log engine (logengine.go)
	// leaders tells every replica here of its raft's state changes, on one goroutine
	// (partition.LeadershipHub); closed after the replicas.
	leaders *partition.LeadershipHub
	// metrics: the node's Prometheus registry and histograms (metrics.go); set by Start
	// before anything that records into it starts.
	metrics *metrics

	// mu guards parts. Lock order: mu is never held across a call into a partition, the
	// metadata group or the network (calls happen after copying what is needed).
	mu    sync.RWMutex
	parts map[uint32]*replica // by group ID

	hints    sync.Map // group ID -> node ID that last served it as leader
	inflight sync.Map // CallReq.ID -> *inflightCall: a long-poll served for a peer

	// router is the data plane (router.go), ops the operator surface (ops.go), store
	// the admin API's store (store.go); set by Start before anything serves.
	router *Router
	ops    *Ops
	store  *Store

	// rec opens, configures and deletes the replicas placed here (reconciler).
	rec *reconciler
	// steward does the metadata leader's duties (membership.go).
	steward *steward
	// life is the node-lifetime context, cancelled by Close (stop); closing is its Done
	// channel. Every goroutine the node starts runs under it, tracked by wg (goFunc).
	life    context.Context
	stop    context.CancelFunc
	closing <-chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	// wasReady is set once CaughtUp has passed: from then on what other nodes fail at
	// (a leaderless group, a leader that does not answer) no longer makes this node
	// unready (ready.go).
	wasReady atomic.Bool
}

// replica is one partition replica this node runs.
type replica struct {
	entity string // lower-case entity name
	index  int
	p      *partition.Partition
	cfg    fsm.Config // the configuration the reconciler last saw applied (or pushed)
}

// Start opens (or creates) the node's state under cfg.DataDir, joins or forms the
// cluster, and returns once the metadata group has a leader, this node has caught up
// with it, and every partition placed here is open. A lone node (BootstrapExpect 1, no
// Join) bootstraps a one-voter metadata group, names the namespace and creates the
// default key. cfg is DefaultConfig's, changed where needed: Start fills in nothing, and
// a value that cannot work is an error (Config.Validate).
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:   cfg,
		log:   cfg.Logger,
		clock: cfg.Clock,
		parts: map[uint32]*replica{},
	}
	n.rec = newReconciler(n)
	n.gone = make(chan goneEvent, 16)
	n.logs = newLogEngine(cfg)
	n.leaders = partition.NewLeadershipHub()
	n.ops = &Ops{n: n}
	n.steward = newSteward(n)
	n.life, n.stop = context.WithCancel(context.Background())
	n.closing = n.life.Done()
	if n.log == nil {
		n.log = slog.Default()
	}
	n.libLog = hashilog.New(n.log, nil)
	if n.clock == nil {
		n.clock = realClock{}
	}
	n.metrics = newMetrics(n)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	inc, err := incarnation(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n.inc = inc
	if cfg.BodyMemoryBudget > 0 {
		n.bodies, err = partition.OpenBodies(partition.BodiesConfig{Dir: filepath.Join(cfg.DataDir, "bodies"),
			MemoryBudget: cfg.BodyMemoryBudget, DiskBudget: cfg.BodyDiskBudget, Logger: n.raftLogger("bodies")})
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	tc := transport.DefaultConfig()
	tc.TLS = cfg.TLS
	mux, err := transport.Listen(cfg.ClusterAddr, tc)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", cfg.ClusterAddr, err)
	}
	n.mux = mux
	n.adv = cfg.AdvertiseAddr
	if n.adv == "" {
		n.adv = mux.Addr().String()
	}
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, err
	}
	layer, err := mux.Layer(metagroup.ID)
	if err != nil {
		mux.Close()
		return nil, err
	}
	n.meta, err = metagroup.Open(metagroup.Config{
		Dir: filepath.Join(cfg.DataDir, "meta"), NodeID: raft.ServerID(cfg.NodeID), Stream: layer,
		Tune: cfg.Raft.apply, NoSync: cfg.Storage.NoSync, Logger: n.raftLogger("meta"), Changed: n.rec.changed,
		Clock: n.clock, Addrs: addrProvider{n}, Advertise: raft.ServerAddress(n.adv), BootstrapSelf: n.lone(),
		Place: n.steward.place,
		// Only Commit forwards, and nothing commits before the store is made below.
		Forward: func(ctx context.Context, leader string, cmd meta.Command) (uint64, error) {
			return n.store.applyRemote(ctx, leader, cmd)
		},
	})
	if err != nil {
		mux.Close()
		return nil, err
	}
	// The router and the store read the open metadata group; nothing reaches them
	// before the RPC layer starts below.
	n.router = newRouter(n)
	n.store = newStore(n)
	if err := n.logs.open(n.raftLogger("raft-log")); err != nil {
		return fail(err)
	}
	if !cfg.Bench.PerGroupTransport {
		gc := transport.DefaultGroupsConfig()
		gc.AddressProvider, gc.Logger, gc.Pipeline = addrProvider{n}, n.raftLogger("raft-groups"), cfg.Raft.Pipeline
		n.groups, err = transport.NewGroups(mux, raft.ServerAddress(n.adv), gc)
		if err != nil {
			return fail(err)
		}
	}
	if n.rpc, err = startRPC(n); err != nil {
		return fail(err)
	}
	if n.gossip, err = n.startGossip(); err != nil {
		return fail(err)
	}
	n.goFunc("gone", n.goneLoop)
	if len(cfg.Join) > 0 {
		n.goFunc("join", func(ctx context.Context) { n.gossip.KeepJoined(ctx, n.otherJoinAddrs) })
	}
	if err := n.formOrJoin(ctx); err != nil {
		return fail(err)
	}
	n.gossip.SetFormed()
	if err := n.bootstrap(ctx); err != nil {
		return fail(err)
	}
	n.rec.reconcile(ctx)
	n.goFunc("reconcile", n.rec.reconcileLoop)
	n.goFunc("meta", n.steward.run)
	n.goFunc("txn-recovery", n.router.txnRecoveryLoop)
	n.goFunc("meta-leader-log", func(ctx context.Context) { n.meta.WatchLeader(ctx, logMetaLeader(n.log, n.cfg.NodeID)) })
	// A restarted node's metadata may still lack what changed while it was down (its
	// draining mark, entities created, replicas placed here): catch up with the leader
	// before comparing its record and judging what must serve here.
	if err := n.ops.catchUpMeta(ctx); err != nil {
		n.log.Debug("metadata catch-up at start", "err", err)
	}
	// Register (or update) this node before it serves, so operators and placement see
	// it at once; a node drained before its stop (a rolling restart's preStop) serves
	// again.
	rec := meta.Node{ID: n.cfg.NodeID, Addr: n.adv, Zone: n.cfg.Zone, Incarnation: n.inc}
	if nd, ok := n.ops.localNode(n.cfg.NodeID); !ok || nd != rec {
		if err := n.store.Apply(ctx, &meta.PutNode{Node: rec}); err != nil {
			return fail(fmt.Errorf("cluster: register this node: %w", err))
		}
	}
	// Serve only once every partition placed here has a leader (after a restart, each
	// group elects again and replays its log), so the first request after Start succeeds.
	if err := n.waitServing(ctx); err != nil {
		return fail(fmt.Errorf("cluster: partitions not serving: %w", err))
	}
	n.rec.waitReplicasHere(ctx)
	return n, nil
}

// lone reports whether this node runs alone: no cluster to form (bootstrap-expect 1)
// and no other node to join (--join empty, or naming only this node).
func (n *Node) lone() bool { return n.cfg.BootstrapExpect <= 1 && len(n.otherJoinAddrs()) == 0 }

// NodeID is this node's identity.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// ClusterAddr is the address the cluster port is bound to.
func (n *Node) ClusterAddr() string { return n.mux.Addr().String() }

// raftLogger is hashicorp/raft's logger for one group, through the node's slog logger:
// raft's ordinary events at debug, its per-RPC failures limited (internal/hashilog).
func (n *Node) raftLogger(name string) hclog.Logger { return n.libLog.Raft("raft." + name) }

// startGossip starts this node's membership: gossip packets over UDP on the cluster
// port's host and number, memberlist's streams over the cluster port's mux
// (transport.TypeGossip), memberlist's lines through the node's slog logger like raft's.
func (n *Node) startGossip() (*gossip.Gossip, error) {
	layer, err := n.mux.Route(transport.TypeGossip, 0)
	if err != nil {
		return nil, err
	}
	bound := n.mux.Addr().(*net.TCPAddr)
	return gossip.Start(gossip.Config{
		Self: gossip.Meta{ID: n.cfg.NodeID, Cluster: n.adv, AMQP: n.cfg.AMQPAddr, Admin: n.cfg.AdminAddr, Zone: n.cfg.Zone,
			Formed: n.meta.HadState(), Inc: n.inc, Level: n.dataLevel()},
		Bind:    &net.UDPAddr{IP: bound.IP, Port: bound.Port},
		Streams: gossipStreams{layer},
		Key:     n.cfg.GossipKey, AcceptKeys: n.cfg.GossipAcceptKeys,
		Changed: n.rec.changed, Gone: n.peerGone, Logger: n.libLog.Memberlist(), Events: n.log,
	})
}

// peerGone is called when gossip declares a member dead or gone. It hands the event to
// goneLoop without blocking memberlist (a full queue drops it: the reconcile pass that
// gossip's change kicks wakes the replicas too, only later).
func (n *Node) peerGone(m gossip.Meta, alive map[string]bool) {
	select {
	case n.gone <- goneEvent{m, alive}:
	default:
	}
}

// goneEvent is a member gossip declared dead or gone, and the live members after.
type goneEvent struct {
	m     gossip.Meta
	alive map[string]bool
}

// goneLoop acts on members gossip declares gone, until ctx (the node's lifetime) ends:
// the quiet replicas they led wake now, not at the next reconcile pass (which may be busy
// opening groups), and the RPC connection to them is dropped (rpcLayer.dropAddr), so
// that calls waiting on it fail over.
func (n *Node) goneLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-n.gone:
			n.rec.wakeOrphans(ev.alive)
			if ev.m.Cluster != "" {
				n.rpc.dropAddr(ev.m.Cluster)
			}
		}
	}
}

// gossipStreams is the cluster port's gossip route as gossip.Streams.
type gossipStreams struct{ *transport.Layer }

func (s gossipStreams) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return s.Layer.Dial(raft.ServerAddress(addr), timeout)
}

// incarnation returns the random identity of this data directory, created with it: a
// node restarted on an empty disk has a new one.
func incarnation(dir string) (string, error) {
	path := filepath.Join(dir, "incarnation")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	inc := fmt.Sprintf("%x", r[:])
	// Durably: a power loss must not give the directory (and the Raft state in it) a
	// new incarnation, which says its disk was wiped.
	if err := durable.WriteFile(path, []byte(inc+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	return inc, nil
}

// otherJoinAddrs is --join without this node's own address.
func (n *Node) otherJoinAddrs() []string {
	var out []string
	for _, a := range n.cfg.Join {
		if a != n.adv && a != n.mux.Addr().String() {
			out = append(out, a)
		}
	}
	return out
}

// formOrJoin waits until this node belongs to a metadata group with a leader. A node
// with state, or a lone node, only waits for the election. A new node of a multi-node
// cluster either is added by the leader of a formed cluster (when any member says it is
// formed), or, once BootstrapExpect nodes with no state see each other, forms the
// cluster with them: the node with the smallest ID among the first BootstrapExpect (by
// ID) bootstraps the metadata group with all of them as voters; the others grant it their
// votes and receive the log. A node that had state never bootstraps again.
func (n *Node) formOrJoin(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	logged := false
	for n.meta.Leader() == "" {
		// Only nodes told to form a cluster of two or more form one: a node started with
		// --join and --bootstrap-expect 1 joins an existing cluster, it never forms its
		// own (it could see another new node before the cluster and split it).
		if !n.meta.HadState() && n.cfg.BootstrapExpect >= 2 {
			ms := n.gossip.Members()
			formed := false
			for _, m := range ms {
				formed = formed || m.Formed
			}
			if !formed && len(ms) >= n.cfg.BootstrapExpect {
				voters := ms[:n.cfg.BootstrapExpect]
				if voters[0].ID == n.cfg.NodeID && n.meta.Servers() == nil {
					var servers []raft.Server
					for _, m := range voters {
						servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Cluster)})
					}
					if err := n.meta.Form(servers); err != nil {
						return fmt.Errorf("cluster: form the metadata group: %w", err)
					}
					n.log.Info("formed the cluster", "voters", servers)
				}
			} else if !logged {
				n.log.Info("waiting for the cluster", "seen", len(ms), "bootstrap-expect", n.cfg.BootstrapExpect, "formed", formed)
				logged = true
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: no metadata leader (seen %d of %d expected nodes): %w",
				len(n.gossip.Members()), n.cfg.BootstrapExpect, ctx.Err())
		case <-n.closing:
			return ErrClosed
		case <-t.C:
		}
	}
	return nil
}

// bootstrap creates what every namespace has (its name, the default key) once. The
// metadata leader does it; other nodes wait until they see it.
func (n *Node) bootstrap(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		var nsName string
		var haveKey bool
		n.meta.Read(func(s *meta.State) {
			nsName = s.Namespace().Name
			_, haveKey = s.SASKey(n.cfg.DefaultKeyName)
		})
		if n.meta.IsLeader() {
			err := n.bootstrapAsLeader(ctx)
			if err == nil || n.meta.IsLeader() {
				return err
			}
			// The leadership moved while this node bootstrapped (an election at
			// formation on a loaded machine): the new leader does it; wait for it.
			n.log.Debug("metadata leadership moved during bootstrap; waiting for the new leader", "err", err)
		}
		if nsName != "" && haveKey {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for the namespace from the metadata leader %q: %w", n.meta.Leader(), ctx.Err())
		case <-n.closing:
			return ErrClosed
		case <-t.C:
		}
	}
}

// bootstrapAsLeader is bootstrap on the metadata leader: it names the namespace, creates
// or updates the default key and registers this node.
func (n *Node) bootstrapAsLeader(ctx context.Context) error {
	var nsName string
	var key meta.SASKey
	var haveKey bool
	if err := n.meta.Barrier(10 * time.Second); err != nil {
		return fmt.Errorf("cluster: metadata barrier: %w", err)
	}
	n.meta.Read(func(s *meta.State) {
		nsName = s.Namespace().Name
		key, haveKey = s.SASKey(n.cfg.DefaultKeyName)
	})
	if nsName == "" {
		if err := n.meta.Propose(ctx, &meta.SetNamespace{Name: n.cfg.Namespace}); err != nil {
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
		if err := n.meta.Propose(ctx, &meta.PutSASKey{Key: k}); err != nil {
			return fmt.Errorf("cluster: create the default key: %w", err)
		}
	}
	return register(ctx, n.meta, gossip.Meta{ID: n.cfg.NodeID, Cluster: n.adv, Zone: n.cfg.Zone, Inc: n.inc})
}

// DefaultKey returns the default key's name and primary key (for the printed
// connection string).
func (n *Node) DefaultKey() (name, key string) {
	n.meta.Read(func(s *meta.State) {
		if k, ok := s.SASKey(n.cfg.DefaultKeyName); ok {
			name, key = k.Name, k.PrimaryKey
		}
	})
	return name, key
}

// Namespace returns the namespace name.
func (n *Node) Namespace() string {
	var name string
	n.meta.Read(func(s *meta.State) { name = s.Namespace().Name })
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
	// Every node of a cluster may load the same file at start-up, all at once: another
	// node can create an entity between this node's plan and its command (ErrExists), or
	// commit one whose partitions are not serving yet. A fresh plan leaves out what the
	// others did, so a failed round is planned again, a few times, before giving up.
	const rounds = 6
	for round := 1; ; round++ {
		err := n.applyEmulatorPlan(ctx, ec)
		if err == nil {
			break
		}
		if round == rounds || ctx.Err() != nil {
			return warnings, err
		}
		t := time.NewTimer(time.Duration(round) * 500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return warnings, err
		case <-t.C:
		}
	}
	n.rec.reconcile(ctx)
	return warnings, nil
}

// applyEmulatorPlan applies what ec declares beyond the current metadata.
func (n *Node) applyEmulatorPlan(ctx context.Context, ec *meta.EmulatorConfig) error {
	var plan []meta.Command
	n.meta.Read(func(s *meta.State) { plan = ec.Plan(s) })
	for _, cmd := range plan {
		if _, ok := cmd.(*meta.SetNamespace); ok {
			continue // the node's --namespace names it; Config.json's name is informational
		}
		if err := n.store.Apply(ctx, cmd); err != nil {
			//lint:ignore ST1005 Config.json is the file's name
			return fmt.Errorf("Config.json: %s: %w", cmd.Op(), err)
		}
	}
	return nil
}

// Ready reports whether the node can serve: the metadata group has a leader and every
// partition placed here has one.
func (n *Node) Ready() error {
	select {
	case <-n.closing:
		return ErrClosed
	default:
	}
	if n.meta.Leader() == "" {
		return errors.New("metadata group has no leader")
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

// addrProvider resolves node IDs to their advertised cluster addresses for Raft.
type addrProvider struct{ n *Node }

func (a addrProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if addr := a.n.addrOf(string(id)); addr != "" {
		return raft.ServerAddress(addr), nil
	}
	return "", fmt.Errorf("cluster: no address known for node %q", id)
}

// addrOf is a node's advertised cluster address: from gossip, else from the metadata's
// node records ("" when unknown).
func (n *Node) addrOf(id string) string {
	if id == n.cfg.NodeID {
		return n.adv
	}
	if n.gossip != nil {
		if m, ok := n.gossip.Member(id); ok {
			return m.Cluster
		}
	}
	var addr string
	n.meta.Read(func(s *meta.State) {
		if nd, ok := s.Node(id); ok {
			addr = nd.Addr
		}
	})
	return addr
}

// goFunc runs fn on a goroutine of its own with the node's lifetime context, tracked by
// n.wg: Close cancels the context and waits for fn to return. name labels the goroutine
// in profiles (pprof label "cluster").
func (n *Node) goFunc(name string, fn func(ctx context.Context)) {
	n.wg.Go(func() { pprof.Do(n.life, pprof.Labels("cluster", name), fn) })
}

// Close stops the node at once: the node's goroutines (their context is cancelled,
// Close waits for them), the partitions (each answers its pending calls), then the
// metadata group, RPC, gossip and the cluster port. Shutdown is the graceful stop.
func (n *Node) Close() error {
	var err error
	n.once.Do(func() {
		n.stop()
		n.wg.Wait()
		n.mu.Lock()
		parts := n.parts
		n.parts = map[uint32]*replica{}
		n.mu.Unlock()
		for _, r := range parts {
			err = errors.Join(err, r.p.Close())
		}
		n.leaders.Close()
		if n.bodies != nil {
			n.bodies.Close()
		}
		err = errors.Join(err, n.logs.close())
		if n.groups != nil {
			err = errors.Join(err, n.groups.Close())
		}
		if n.rpc != nil {
			n.rpc.close()
		}
		if n.meta != nil {
			err = errors.Join(err, n.meta.Close())
		}
		if n.gossip != nil {
			err = errors.Join(err, n.gossip.Close())
		}
		err = errors.Join(err, n.mux.Close())
	})
	return err
}
