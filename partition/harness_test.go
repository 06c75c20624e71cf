package partition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition/transport"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// This file is an in-process cluster for the tests and benchmarks: n nodes, each with
// its own transport.Mux on 127.0.0.1:0 (one port per node for all groups), a data dir,
// and a faultLayer around each group's stream layer so a test can cut a node off.

// testLogger is silent unless QB_RAFT_LOG names a level (e.g. QB_RAFT_LOG=debug).
// QB_LOG_STORE (bolt or wal) sets Config.LogStore of every replica a test opens, unless
// the test's tune sets it.
func testLogger() hclog.Logger {
	if lvl := os.Getenv("QB_RAFT_LOG"); lvl != "" {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(lvl), Output: os.Stderr})
	}
	return hclog.NewNullLogger()
}

// testQueue is a plain queue config with a short lock duration (the fsm takes whatever
// the config says; S-ENT-2 bounds are the admin layer's business).
func testQueue(group uint32, lock time.Duration) fsm.Config {
	return fsm.Config{
		Kind:    fsm.KindQueue,
		GroupID: group,
		Queue: fsm.QueueConfig{
			LockDurationMs:   lock.Milliseconds(),
			MaxDeliveryCount: 10,
			DefaultTTLMs:     fsm.NeverMs,
		},
	}
}

type node struct {
	id  raft.ServerID
	dir string

	mu     sync.Mutex
	mux    *transport.Mux
	addr   string
	layers map[uint32]*faultLayer
	engine *Engine        // the node's shared log engine, opened by the first LogStoreShared replica
	hub    *LeadershipHub // shared by the node's replicas, as cluster does; closed after them
}

// engineOf returns node i's Engine, opening it on first use.
func (c *cluster) engineOf(i int) *Engine {
	c.t.Helper()
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.engine == nil {
		e, err := OpenEngine(EngineConfig{Dir: EngineDir(nd.dir), DataDir: nd.dir, Logger: testLogger()})
		if err != nil {
			c.t.Fatal(err)
		}
		nd.engine = e
	}
	return nd.engine
}

// closeEngine closes node i's Engine, if open: all its replicas must be stopped.
func (c *cluster) closeEngine(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	e := nd.engine
	nd.engine = nil
	nd.mu.Unlock()
	if e != nil {
		if err := e.Close(); err != nil {
			c.t.Errorf("close the log engine of %s: %v", nd.id, err)
		}
	}
}

type cluster struct {
	t     testing.TB
	nodes []*node
	// tune adjusts each replica's config (raft timing, snapshots, ...).
	tune func(*Config)

	mu    sync.Mutex
	parts map[uint32][]*Partition // group -> replica per node (nil when down)
	cfgs  map[uint32]fsm.Config
}

// addrs resolves node IDs to their current addresses, so a restarted node may come back
// on a new port (raft.ServerAddressProvider).
func (c *cluster) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	for _, n := range c.nodes {
		if n.id == id {
			n.mu.Lock()
			defer n.mu.Unlock()
			return raft.ServerAddress(n.addr), nil
		}
	}
	return "", fmt.Errorf("unknown node %s", id)
}

func fastConfig(c *Config) {
	// Long enough that a leader keeps its lease through the multi-second whole-process
	// stalls seen on two shared cores running six agents' builds under -race (a 500ms
	// lease was lost at load average 8; 1s leases at 6 after 3s of silence); failovers
	// then take 2-5s, which the tests' lock durations allow for.
	c.HeartbeatTimeout = 2 * time.Second
	c.ElectionTimeout = 2 * time.Second
	c.LeaderLeaseTimeout = 2 * time.Second
	c.CommitTimeout = 20 * time.Millisecond
	c.NetTimeout = 5 * time.Second
}

func newCluster(t testing.TB, n int, tune func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, tune: tune, parts: map[uint32][]*Partition{}, cfgs: map[uint32]fsm.Config{}}
	root := t.TempDir()
	for i := range n {
		nd := &node{id: raft.ServerID(fmt.Sprintf("n%d", i+1)), dir: fmt.Sprintf("%s/n%d", root, i+1), hub: NewLeadershipHub()}
		c.nodes = append(c.nodes, nd)
		c.startMux(nd)
	}
	t.Cleanup(c.closeAll)
	return c
}

func (c *cluster) startMux(nd *node) {
	m, err := transport.Listen("127.0.0.1:0", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.mu.Lock()
	nd.mux, nd.addr, nd.layers = m, m.Addr().String(), map[uint32]*faultLayer{}
	nd.mu.Unlock()
}

func (c *cluster) peers() []raft.Server {
	var s []raft.Server
	for _, nd := range c.nodes {
		s = append(s, raft.Server{Suffrage: raft.Voter, ID: nd.id, Address: raft.ServerAddress(nd.addr)})
	}
	return s
}

// addGroup starts a replica of group g on every node.
func (c *cluster) addGroup(fc fsm.Config) []*Partition {
	c.t.Helper()
	c.mu.Lock()
	c.cfgs[fc.GroupID] = fc
	c.parts[fc.GroupID] = make([]*Partition, len(c.nodes))
	c.mu.Unlock()
	peers := c.peers()
	for i := range c.nodes {
		c.open(fc.GroupID, i, peers)
	}
	return c.group(fc.GroupID)
}

func (c *cluster) open(g uint32, i int, peers []raft.Server) *Partition {
	c.t.Helper()
	nd := c.nodes[i]
	nd.mu.Lock()
	l, err := nd.mux.Layer(g)
	if err != nil {
		nd.mu.Unlock()
		c.t.Fatal(err)
	}
	fl := newFaultLayer(l)
	nd.layers[g] = fl
	nd.mu.Unlock()

	c.mu.Lock()
	fc := c.cfgs[g]
	c.mu.Unlock()
	cfg := DefaultConfig()
	cfg.DataDir = nd.dir
	cfg.Entity = fmt.Sprintf("queue-%d", g)
	cfg.NodeID = nd.id
	cfg.Stream = fl
	cfg.AddressProvider = c
	cfg.FSM = fc
	cfg.Peers = peers
	cfg.Logger = testLogger()
	cfg.Leadership = nd.hub
	cfg.LogStore = os.Getenv("QB_LOG_STORE") // "": bolt; wal or shared runs every test on it
	fastConfig(cfg)
	if c.tune != nil {
		c.tune(cfg)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir(), engineIDFile)); cfg.LogStore == LogStoreShared || err == nil {
		cfg.Engine = c.engineOf(i)
	}
	p, err := Open(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.parts[g][i] = p
	c.mu.Unlock()
	return p
}

func (c *cluster) group(g uint32) []*Partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Partition(nil), c.parts[g]...)
}

// stop closes replica i of group g without a leadership transfer (abrupt for raft).
func (c *cluster) stop(g uint32, i int) {
	c.t.Helper()
	c.mu.Lock()
	p := c.parts[g][i]
	c.parts[g][i] = nil
	c.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			c.t.Logf("close %s: %v", c.nodes[i].id, err)
		}
	}
}

// restart reopens replica i of group g from its files.
func (c *cluster) restart(g uint32, i int) *Partition {
	c.t.Helper()
	return c.open(g, i, c.peers())
}

// restartNode closes a node's mux (and log engine) and starts a new one on a new port:
// the node's replicas must be stopped first. Peers find it through ServerAddr.
func (c *cluster) restartNode(i int) {
	c.closeEngine(i)
	nd := c.nodes[i]
	nd.mu.Lock()
	m := nd.mux
	nd.mu.Unlock()
	m.Close()
	c.startMux(nd)
}

func (c *cluster) closeAll() {
	c.mu.Lock()
	var ps []*Partition
	for g := range c.parts {
		for i, p := range c.parts[g] {
			if p != nil {
				ps = append(ps, p)
				c.parts[g][i] = nil
			}
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.Close() }()
	}
	wg.Wait()
	for i, nd := range c.nodes {
		nd.hub.Close()
		nd.mux.Close()
		c.closeEngine(i)
	}
}

// isolate cuts node i off from every peer in group g (both directions), or heals it.
func (c *cluster) isolate(g uint32, i int, cut bool) {
	nd := c.nodes[i]
	nd.mu.Lock()
	fl := nd.layers[g]
	nd.mu.Unlock()
	fl.setCut(cut)
}

// leader waits for a replica of g that leads and has caught up, and returns its index.
func (c *cluster) leader(g uint32, timeout time.Duration) (int, *Partition) {
	c.t.Helper()
	var idx int
	var lp *Partition
	testutil.WaitFor(c.t, timeout, func() error {
		n := 0
		for i, p := range c.group(g) {
			if p != nil && p.IsLeader() {
				idx, lp = i, p
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("group %d has %d leaders, want 1", g, n)
		}
		return nil
	})
	return idx, lp
}

// checkConverged waits until every running replica of g holds the same fsm state: the
// leader runs a Barrier, every replica reaches its applied index, then all digests agree
// (retried, since the leader's ticks may still be applying).
func (c *cluster) checkConverged(g uint32) {
	c.t.Helper()
	_, lp := c.leader(g, 20*time.Second)
	if err := lp.raft.Barrier(5 * time.Second).Error(); err != nil {
		c.t.Fatalf("barrier: %v", err)
	}
	target := lp.AppliedIndex()
	var last string
	testutil.WaitFor(c.t, 15*time.Second, func() error {
		var first [32]byte
		var parts []string
		ok := true
		for i, p := range c.group(g) {
			if p == nil {
				continue
			}
			if p.AppliedIndex() < target {
				ok = false
			}
			d := p.Digest()
			parts = append(parts, fmt.Sprintf("%s@%d:%x", c.nodes[i].id, p.AppliedIndex(), d[:4]))
			if len(parts) == 1 {
				first = d
			} else if d != first {
				ok = false
			}
		}
		last = strings.Join(parts, " ")
		if !ok {
			return fmt.Errorf("replicas of group %d not converged on index %d: %s", g, target, last)
		}
		return nil
	})
	c.t.Logf("converged: %s", last)
}

// retry runs op on the current leader of g until it does not fail with ErrNotLeader. An
// error after which the op may have been applied (ErrOutcomeUnknown) is not retried: the
// test could not tell what happened.
func retry[T any](t testing.TB, c *cluster, g uint32, op func(p *Partition) (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, p := c.leader(g, 20*time.Second)
		v, err := op(p)
		if err == nil {
			return v
		}
		if !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) || time.Now().After(deadline) {
			t.Fatalf("op: %v", err)
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// faultLayer wraps one group's stream layer; while cut, it refuses dials, drops every
// incoming connection and has closed every connection it handed out, so the node is
// partitioned from its peers in both directions.
type faultLayer struct {
	raft.StreamLayer

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func newFaultLayer(l raft.StreamLayer) *faultLayer {
	return &faultLayer{StreamLayer: l, conns: map[net.Conn]struct{}{}}
}

var errCut = errors.New("faultLayer: cut")

func (f *faultLayer) setCut(cut bool) {
	f.mu.Lock()
	f.cut = cut
	var cs []net.Conn
	if cut {
		for c := range f.conns {
			cs = append(cs, c)
		}
		f.conns = map[net.Conn]struct{}{}
	}
	f.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (f *faultLayer) keep(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *faultLayer) Accept() (net.Conn, error) {
	for {
		c, err := f.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if f.keep(c) {
			return c, nil
		}
		c.Close()
	}
}

func (f *faultLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	f.mu.Lock()
	cut := f.cut
	f.mu.Unlock()
	if cut {
		return nil, errCut
	}
	c, err := f.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	if !f.keep(c) {
		c.Close()
		return nil, errCut
	}
	return c, nil
}
