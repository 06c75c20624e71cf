package transport

import (
	"bufio"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testNode is one node of a test cluster: a Mux, and either Groups or (an older
// release) a NetworkTransport per group.
type testNode struct {
	id     raft.ServerID
	mux    *Mux
	groups *Groups // nil: the older release
}

func newTestNode(t testing.TB, id string, legacy bool) *testNode {
	return newPipelineNode(t, id, legacy, 0)
}

// newPipelineNode is newTestNode with GroupsConfig.Pipeline set to pipeline.
func newPipelineNode(t testing.TB, id string, legacy bool, pipeline int) *testNode {
	t.Helper()
	n := &testNode{id: raft.ServerID(id), mux: newMux(t)}
	if !legacy {
		gc := DefaultGroupsConfig()
		gc.Timeout, gc.Logger, gc.Pipeline = 5*time.Second, hclog.NewNullLogger(), pipeline
		g, err := NewGroups(n.mux, n.addr(), gc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		n.groups = g
	}
	return n
}

func (n *testNode) addr() raft.ServerAddress { return raft.ServerAddress(n.mux.Addr().String()) }

// transport returns the node's transport for group id.
func (n *testNode) transport(t testing.TB, id uint32) raft.Transport {
	t.Helper()
	if n.groups != nil {
		tr, err := n.groups.Transport(id)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: mustLayer(t, n.mux, id), MaxPool: 2, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(), MaxRPCsInFlight: 1,
	})
}

// testGroup is one Raft group with a replica on each node.
type testGroup struct {
	id    uint32
	rafts []*raft.Raft
	fsms  []*raft.MockFSM
}

func testRaftConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
	c.Logger = hclog.NewNullLogger()
	return c
}

// startGroup starts group id on nodes (bootstrapped with all of them) and stops it when
// the test ends.
func startGroup(t testing.TB, id uint32, nodes []*testNode, edit func(*raft.Config)) *testGroup {
	t.Helper()
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: n.addr()})
	}
	g := &testGroup{id: id}
	for _, n := range nodes {
		conf := testRaftConfig(n.id)
		if edit != nil {
			edit(conf)
		}
		fsm := &raft.MockFSM{}
		tr := n.transport(t, id)
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), tr)
		if err != nil {
			t.Fatal(err)
		}
		if gt, ok := tr.(*GroupTransport); ok {
			gt.SetLeaderState(func() (uint64, bool) { return r.CurrentTerm(), r.State() == raft.Leader })
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			r.Shutdown().Error()
			if c, ok := tr.(raft.WithClose); ok {
				c.Close()
			}
		})
		g.rafts = append(g.rafts, r)
		g.fsms = append(g.fsms, fsm)
	}
	return g
}

// apply applies cmd through the group's leader, retrying while there is none.
func (g *testGroup) apply(t testing.TB, cmd string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error = fmt.Errorf("no leader")
		for _, r := range g.rafts {
			if r.State() == raft.Leader {
				err = r.Apply([]byte(cmd), 5*time.Second).Error()
				break
			}
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d: apply %q: %v", g.id, cmd, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitApplied waits until every replica's fsm holds want commands.
func (g *testGroup) awaitApplied(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, f := range g.fsms {
			if len(f.Logs()) < want {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var got []int
			for _, f := range g.fsms {
				got = append(got, len(f.Logs()))
			}
			t.Fatalf("group %d: replicas applied %v, want %d each", g.id, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many groups on three nodes, all over Groups: every group elects a leader and
// replicates to all its replicas, over one connection per pair of nodes.
func TestGroupsCarryManyRaftGroups(t *testing.T) {
	nodes := []*testNode{newTestNode(t, "a", false), newTestNode(t, "b", false), newTestNode(t, "c", false)}
	var groups []*testGroup
	for id := uint32(1); id <= 24; id++ {
		groups = append(groups, startGroup(t, id, nodes, nil))
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				g.apply(t, fmt.Sprintf("g%d-%d", g.id, i))
			}
		}()
	}
	wg.Wait()
	for _, g := range groups {
		g.awaitApplied(t, 3)
	}
	for _, n := range nodes {
		n.groups.mu.Lock()
		conns, legacy := len(n.groups.conns), len(n.groups.legacy)
		n.groups.mu.Unlock()
		// One connection dialled to each of two peers and one accepted from each.
		if conns != 4 || legacy != 0 {
			t.Errorf("node %s: %d connections, %d legacy peers; want 4 and 0", n.id, conns, legacy)
		}
	}
}

// A follower that joins after the log was compacted gets a snapshot over its own
// connection.
func TestGroupsInstallSnapshot(t *testing.T) {
	nodes := []*testNode{newTestNode(t, "a", false), newTestNode(t, "b", false)}
	g := startGroup(t, 7, nodes, func(c *raft.Config) {
		c.TrailingLogs = 1
		c.SnapshotThreshold = 1
	})
	for i := 0; i < 20; i++ {
		g.apply(t, fmt.Sprintf("m%d", i))
	}
	var leader *raft.Raft
	for _, r := range g.rafts {
		if r.State() == raft.Leader {
			leader = r
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	if err := leader.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	late := newTestNode(t, "late", false)
	conf := testRaftConfig(late.id)
	fsm := &raft.MockFSM{}
	tr := late.transport(t, 7)
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error(); tr.(raft.WithClose).Close() })
	if err := leader.AddVoter(late.id, late.addr(), 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	g.fsms = append(g.fsms, fsm)
	g.awaitApplied(t, 20)
	if fsm.Logs()[0] == nil || string(fsm.Logs()[19]) != "m19" {
		t.Errorf("late replica holds %q", fsm.Logs())
	}
}

// During a rolling upgrade a node of an older release (a NetworkTransport per group on
// its TypeRaft routes) and nodes with Groups run the same groups: the newer nodes
// speak the old way to it, it reaches them the old way, and they use Groups between
// themselves.
func TestGroupsTalkToAnOlderRelease(t *testing.T) {
	old := newTestNode(t, "old", true)
	nodes := []*testNode{old, newTestNode(t, "b", false), newTestNode(t, "c", false)}
	var groups []*testGroup
	for id := uint32(1); id <= 4; id++ {
		groups = append(groups, startGroup(t, id, nodes, nil))
	}
	for _, g := range groups {
		for i := 0; i < 3; i++ {
			g.apply(t, fmt.Sprintf("g%d-%d", g.id, i))
		}
	}
	for _, g := range groups {
		g.awaitApplied(t, 3)
	}
	// Then node b leads every group, so it replicates to the older node and to c.
	b := nodes[1]
	for _, g := range groups {
		deadline := time.Now().Add(30 * time.Second)
		for g.rafts[1].State() != raft.Leader {
			for _, r := range g.rafts {
				if r.State() == raft.Leader {
					_ = r.LeadershipTransferToServer(b.id, b.addr()).Error()
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d: b did not become leader", g.id)
			}
			time.Sleep(20 * time.Millisecond)
		}
		g.apply(t, "after")
		g.awaitApplied(t, 4)
	}
	if !b.groups.isLegacy(old.addr()) {
		t.Errorf("b does not take %s for an older release", old.id)
	}
	for _, n := range nodes[1:] {
		for _, o := range nodes[1:] {
			if o != n && n.groups.isLegacy(o.addr()) {
				t.Errorf("node %s takes %s for an older release", n.id, o.id)
			}
		}
	}
}

// An RPC for a group the peer does not run fails with the peer's error, and leaves
// the connection to serve the others.
func TestGroupsUnknownGroup(t *testing.T) {
	a, b := newTestNode(t, "a", false), newTestNode(t, "b", false)
	ta, err := a.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	var resp raft.AppendEntriesResponse
	err = ta.AppendEntries(b.id, b.addr(), &raft.AppendEntriesRequest{Term: 1}, &resp)
	if err == nil || err.Error() != "transport: unknown group 1" {
		t.Fatalf("AppendEntries to a group b does not run: %v", err)
	}
	tb, err := b.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case rpc := <-tb.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 9, Success: true}, nil)
		case <-done:
		}
	}()
	if err := ta.AppendEntries(b.id, b.addr(), &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, &resp); err != nil || resp.Term != 9 {
		t.Fatalf("AppendEntries once b runs the group: %+v, %v", resp, err)
	}
}

// BenchmarkIdleGroups: the CPU, goroutines and heap that idle Raft groups cost per node
// (3 nodes in this process, production timing: heartbeat 1 s, lease 500 ms), with a
// NetworkTransport per group against Groups, and hashicorp/raft's default 50 ms
// CommitTimeout (the leader sends every follower an AppendEntries that often, with or
// without anything to replicate) against a longer one.
func BenchmarkIdleGroups(b *testing.B) {
	for _, groups := range []int{64, 256} {
		for _, v := range []struct {
			name   string
			legacy bool
			commit time.Duration
		}{
			{"per-group/commit=50ms", true, 50 * time.Millisecond},
			{"groups/commit=50ms", false, 50 * time.Millisecond},
			{"groups/commit=500ms", false, 500 * time.Millisecond},
		} {
			b.Run(fmt.Sprintf("groups=%d/%s", groups, v.name), func(b *testing.B) {
				runtime.GC()
				var m0 runtime.MemStats
				runtime.ReadMemStats(&m0)
				g0 := runtime.NumGoroutine()
				nodes := []*testNode{newTestNode(b, "a", v.legacy), newTestNode(b, "b", v.legacy), newTestNode(b, "c", v.legacy)}
				var gs []*testGroup
				for id := 1; id <= groups; id++ {
					gs = append(gs, startGroup(b, uint32(id), nodes, func(c *raft.Config) {
						c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
						c.CommitTimeout = v.commit
					}))
				}
				for _, g := range gs {
					g.apply(b, "x")
				}
				time.Sleep(2 * time.Second) // let the last elections settle
				b.ResetTimer()
				for range b.N {
					const idle = 5 * time.Second
					u0 := cpuTime()
					time.Sleep(idle) // measuring idle CPU needs wall time to pass
					b.ReportMetric(100*(cpuTime()-u0).Seconds()/idle.Seconds()/3, "cpu%/node")
				}
				b.StopTimer()
				runtime.GC()
				var m1 runtime.MemStats
				runtime.ReadMemStats(&m1)
				b.ReportMetric(float64(runtime.NumGoroutine()-g0)/3/float64(groups), "goroutines/group")
				b.ReportMetric(float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/3/float64(groups)/1024, "heapKiB/group")
				leaders := 0
				for _, g := range gs {
					for _, r := range g.rafts {
						if r.State() == raft.Leader {
							leaders++
						}
					}
				}
				if leaders != groups {
					b.Errorf("%d leaders for %d groups", leaders, groups)
				}
			})
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Idle groups between nodes with Groups send their heartbeats as one beat frame per
// pair of nodes: raft's heartbeats are answered from the beats' answers, no leader
// steps down for want of them, and no follower starts an election.
func TestGroupsCoalesceHeartbeats(t *testing.T) {
	nodes := []*testNode{newTestNode(t, "a", false), newTestNode(t, "b", false), newTestNode(t, "c", false)}
	prod := func(c *raft.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		c.CommitTimeout = 5 * time.Second // only heartbeats while idle
	}
	var groups []*testGroup
	for id := uint32(1); id <= 16; id++ {
		groups = append(groups, startGroup(t, id, nodes, prod))
	}
	for _, g := range groups {
		g.apply(t, "x")
	}
	terms := func() []uint64 {
		var out []uint64
		for _, g := range groups {
			var term uint64
			for _, r := range g.rafts {
				if r.State() == raft.Leader {
					term = r.CurrentTerm()
				}
			}
			out = append(out, term)
		}
		return out
	}
	before := terms()
	var s0 []GroupsStats
	for _, n := range nodes {
		s0 = append(s0, n.groups.Stats())
	}
	time.Sleep(3 * time.Second) // an idle interval: what happens in it is the subject
	after := terms()
	for i := range groups {
		if before[i] == 0 || after[i] != before[i] {
			t.Errorf("group %d: leader's term %d before the idle interval, %d after", groups[i].id, before[i], after[i])
		}
	}
	var cached, hbRPCs, served uint64
	for i, n := range nodes {
		s := n.groups.Stats()
		cached += s.CachedHeartbeats - s0[i].CachedHeartbeats
		hbRPCs += s.HeartbeatRPCs - s0[i].HeartbeatRPCs
		served += s.BeatsServed - s0[i].BeatsServed
	}
	// 16 leaders with 2 followers each heartbeat 5 to 10 times a second: about 500
	// to 1,000 heartbeats in 3 s, and about 900 beaten by the 100 ms beat frames.
	if cached < 300 || hbRPCs > cached/10 || served < 500 {
		t.Errorf("in 3 s: %d heartbeats answered from beats, %d sent as RPCs, %d beats served", cached, hbRPCs, served)
	}
}

// When a node dies, the groups it led hear no more beats and elect new leaders on the
// others, and a leadership transfer between live nodes works as before.
func TestGroupsFailoverWithCoalescedHeartbeats(t *testing.T) {
	nodes := []*testNode{newTestNode(t, "a", false), newTestNode(t, "b", false), newTestNode(t, "c", false)}
	var groups []*testGroup
	for id := uint32(1); id <= 8; id++ {
		groups = append(groups, startGroup(t, id, nodes, nil))
	}
	for _, g := range groups {
		g.apply(t, "x")
	}
	// Every group led by a: transfer those led elsewhere.
	a := nodes[0]
	for _, g := range groups {
		deadline := time.Now().Add(30 * time.Second)
		for g.rafts[0].State() != raft.Leader {
			for _, r := range g.rafts {
				if r.State() == raft.Leader {
					_ = r.LeadershipTransferToServer(a.id, a.addr()).Error()
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d: a did not become leader", g.id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(time.Second) // beats flowing from a for a while
	// a dies: its rafts stop, its port closes.
	for _, g := range groups {
		g.rafts[0].Shutdown().Error()
	}
	a.groups.Close()
	a.mux.Close()
	start := time.Now()
	for _, g := range groups {
		g.rafts, g.fsms = g.rafts[1:], g.fsms[1:]
		g.apply(t, "after")
		g.awaitApplied(t, 2)
	}
	t.Logf("every group led again and applying %v after its leader's node stopped", time.Since(start))
}

// A peer that answers the hello and then nothing (a paused process, a partition that
// swallows packets) fails the call after Timeout, and its connection is dropped, so the
// next call dials again instead of waiting on a dead connection for good.
func TestGroupsDropASilentConnection(t *testing.T) {
	a := newMux(t)
	gc := DefaultGroupsConfig()
	gc.Timeout, gc.Logger, gc.Pipeline = 300*time.Millisecond, hclog.NewNullLogger(), 0
	g, err := NewGroups(a, raft.ServerAddress(a.Addr().String()), gc)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	silent := newMux(t)
	l, err := silent.Route(TypeGroups, 0)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			if _, _, err := readFrame(br); err == nil {
				c.Write(frame(kindHello, 0, 0, groupsVersion, nil)) // and then nothing
			}
			accepted <- struct{}{}
		}
	}()
	tr, err := g.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	addr := raft.ServerAddress(silent.Addr().String())
	for i := 0; i < 2; i++ {
		var resp raft.RequestVoteResponse
		if err := tr.RequestVote("s", addr, &raft.RequestVoteRequest{Term: 1}, &resp); err == nil {
			t.Fatal("a silent peer answered")
		}
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatalf("call %d: no connection dialled", i+1)
		}
	}
}

// A node that stops closes its transport before its port (the mux, and the node's other
// listeners on it, go last): a peer whose transport is closed must be reported gone
// while its port still takes connections, however long that lasts. Before, the probe
// only connected, and took such a node for alive.
func TestGroupsPeerGoneWhileItsPortStaysOpen(t *testing.T) {
	a, b := newTestNode(t, "a", false), newTestNode(t, "b", false)
	ta, err := a.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	gone := make(chan raft.ServerAddress, 4)
	ta.SetPeerDown(func(addr raft.ServerAddress) { gone <- addr })
	tb, err := b.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	done := make(chan struct{})
	defer close(done)
	answer := func(tr raft.Transport) {
		for {
			select {
			case rpc := <-tr.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
			case <-done:
				return
			}
		}
	}
	go answer(tb)
	// b dials a (so that a's side of the connection names b), and a answers.
	tb2, err := b.groups.Transport(2)
	if err != nil {
		t.Fatal(err)
	}
	defer tb2.Close()
	ta2, err := a.groups.Transport(2)
	if err != nil {
		t.Fatal(err)
	}
	defer ta2.Close()
	go answer(ta2)
	var resp raft.AppendEntriesResponse
	if err := tb2.AppendEntries(a.id, a.addr(), &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	// A live peer that hangs up is probed and found alive: nobody hears of it.
	if err := ta.AppendEntries(b.id, b.addr(), &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	// b's transport closes; its mux (its port) stays open until the test ends.
	b.groups.Close()
	select {
	case addr := <-gone:
		if addr != b.addr() {
			t.Fatalf("gone: %s, want b (%s)", addr, b.addr())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's transport closed, its port open: not reported gone within 10 s")
	}
}

// Two live nodes do not probe each other without end: the probe's hello names no
// address, so hanging up after it starts no probe on the other side.
func TestGroupsProbeOfALivePeerEnds(t *testing.T) {
	a, b := newTestNode(t, "a", false), newTestNode(t, "b", false)
	for range 5 {
		if err := a.groups.hello(b.addr()); err != nil {
			t.Fatal(err)
		}
		if err := b.groups.hello(a.addr()); err != nil {
			t.Fatal(err)
		}
	}
	// A probe is a tracked goroutine of its Groups; none may be running or start.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if n := a.groups.stats.probes.Load() + b.groups.stats.probes.Load(); n != 0 {
			t.Fatalf("%d probes started by hellos alone", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With pipelining on, a leader keeps several AppendEntries in flight to each follower
// over the connection all groups share, the follower's node hands them to its raft in
// the order sent, and every replica applies the same commands in the same order.
func TestGroupsPipelineReplicatesInOrder(t *testing.T) {
	nodes := []*testNode{newPipelineNode(t, "a", false, 8), newPipelineNode(t, "b", false, 8), newPipelineNode(t, "c", false, 8)}
	// One entry per AppendEntries, so that a burst of commands makes many requests.
	g := startGroup(t, 1, nodes, func(c *raft.Config) { c.MaxAppendEntries = 1 })
	g.apply(t, "first")
	const n = 2000
	var futures []raft.ApplyFuture
	for _, r := range g.rafts {
		if r.State() == raft.Leader {
			for i := range n {
				futures = append(futures, r.Apply([]byte(fmt.Sprintf("c%d", i)), 10*time.Second))
			}
			break
		}
	}
	applied := 1
	for i, f := range futures {
		if err := f.Error(); err != nil {
			g.apply(t, fmt.Sprintf("c%d", i)) // leadership moved: again, wherever it is
		}
		applied++
	}
	if len(futures) == 0 {
		for i := range n {
			g.apply(t, fmt.Sprintf("c%d", i))
			applied++
		}
	}
	g.awaitApplied(t, applied)
	want := g.fsms[0].Logs()
	for i, f := range g.fsms[1:] {
		got := f.Logs()
		if len(got) != len(want) {
			t.Fatalf("replica %d applied %d commands, replica 0 %d", i+1, len(got), len(want))
		}
		for j := range got {
			if string(got[j]) != string(want[j]) {
				t.Fatalf("replica %d applied %q as command %d, replica 0 %q", i+1, got[j], j, want[j])
			}
		}
	}
	var pipelined uint64
	for _, nd := range nodes {
		pipelined += nd.groups.stats.pipelined.Load()
	}
	if pipelined == 0 {
		t.Fatal("no AppendEntries went through a pipeline")
	}
	t.Logf("%d AppendEntries pipelined", pipelined)
}

// A peer whose hello names version 1 (an earlier release) hands a group's requests to
// its raft in any order, so it gets no pipeline; one of this release does.
func TestGroupsPipelineOnlyToOrderedPeers(t *testing.T) {
	a := newPipelineNode(t, "a", false, 8)
	old := newMux(t)
	l, err := old.Route(TypeGroups, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if _, _, err := readFrame(bufio.NewReader(c)); err == nil {
				c.Write(frame(kindHello, 0, 0, 1, nil)) // an earlier release's hello
			}
		}
	}()
	tr, err := a.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.AppendEntriesPipeline("old", raft.ServerAddress(old.Addr().String())); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("pipeline to a version-1 peer: %v, want ErrPipelineReplicationNotSupported", err)
	}
	b := newPipelineNode(t, "b", false, 8)
	p, err := tr.AppendEntriesPipeline(b.id, b.addr())
	if err != nil {
		t.Fatalf("pipeline to a peer of this release: %v", err)
	}
	p.Close()
}

// NewGroups takes its defaults from DefaultGroupsConfig only: a value that cannot work is
// an error naming the setting, not replaced by a default, and nothing is left routed.
func TestNewGroupsRejectsInvalidConfig(t *testing.T) {
	m := newMux(t)
	for _, tc := range []struct {
		name string
		edit func(*GroupsConfig)
		want string
	}{
		{"zero timeout", func(c *GroupsConfig) { c.Timeout = 0 }, "GroupsConfig.Timeout 0s"},
		{"zero legacy retry", func(c *GroupsConfig) { c.LegacyRetry = 0 }, "GroupsConfig.LegacyRetry 0s"},
		{"pipeline too deep", func(c *GroupsConfig) { c.Pipeline = 257 }, "GroupsConfig.Pipeline 257"},
		{"negative pipeline", func(c *GroupsConfig) { c.Pipeline = -1 }, "GroupsConfig.Pipeline -1"},
	} {
		c := DefaultGroupsConfig()
		tc.edit(&c)
		g, err := NewGroups(m, raft.ServerAddress(m.Addr().String()), c)
		if err == nil {
			g.Close()
			t.Errorf("%s: NewGroups accepted %+v", tc.name, c)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to name %q", tc.name, err, tc.want)
		}
	}
	c := DefaultGroupsConfig()
	c.Logger = hclog.NewNullLogger()
	g, err := NewGroups(m, raft.ServerAddress(m.Addr().String()), c)
	if err != nil {
		t.Fatalf("DefaultGroupsConfig: %v", err)
	}
	g.Close()
}
