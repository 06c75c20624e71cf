package partition

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition/transport"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// groupsNode is a node whose partitions use transport.Groups, as cluster nodes do.
type groupsNode struct {
	id     raft.ServerID
	dir    string
	mux    *transport.Mux
	groups *transport.Groups
	p      *Partition
}

// openGroup opens group 1 (fc) on nd with the voters peers, through nd's Groups
// transport; tune adjusts the config first.
func openGroup(t *testing.T, nd *groupsNode, peers []raft.Server, fc fsm.Config, tune func(*Config)) {
	t.Helper()
	tr, err := nd.groups.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Entity, cfg.NodeID = nd.dir, "q", nd.id
	cfg.Transport, cfg.FSM, cfg.Peers, cfg.Logger = tr, fc, peers, testLogger()
	tune(cfg)
	if nd.p, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
}

// startGroupsNodes starts n nodes, each with its mux and transport.Groups on a port of
// 127.0.0.1, closed (with any partition opened on them) when the test ends, and returns
// them with the voter set of all of them.
func startGroupsNodes(t *testing.T, n int) ([]*groupsNode, []raft.Server) {
	t.Helper()
	var nodes []*groupsNode
	var peers []raft.Server
	for i := range n {
		m, err := transport.Listen("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		gc := transport.DefaultGroupsConfig()
		gc.Timeout, gc.Logger, gc.Pipeline = 5*time.Second, testLogger(), 0 // one at a time, as these tests always ran
		g, err := transport.NewGroups(m, raft.ServerAddress(m.Addr().String()), gc)
		if err != nil {
			t.Fatal(err)
		}
		nd := &groupsNode{id: raft.ServerID(fmt.Sprintf("n%d", i+1)), dir: t.TempDir(), mux: m, groups: g}
		t.Cleanup(func() {
			if nd.p != nil {
				nd.p.Close()
			}
			g.Close()
			m.Close()
		})
		nodes = append(nodes, nd)
		peers = append(peers, raft.Server{Suffrage: raft.Voter, ID: nd.id, Address: raft.ServerAddress(m.Addr().String())})
	}
	return nodes, peers
}

// With a heartbeat timeout far longer than the test (30 s), a group still elects at
// once twice: when it is created (its first peer campaigns) and when its leader's
// process is gone (the surviving voters campaign in turn as soon as the leader's port
// refuses connections). Without either, no leader would appear for 30 to 60 s. The
// leader goes right after its election, when its first entries may have reached one
// follower, or none.
func TestGroupsElectWithoutWaitingForTimeouts(t *testing.T) {
	nodes, peers := startGroupsNodes(t, 3)
	fc := testQueue(1, time.Minute)
	// The first peer last, so the others are there when it campaigns.
	for _, i := range []int{1, 2, 0} {
		openGroup(t, nodes[i], peers, fc, func(cfg *Config) {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 30*time.Second, 30*time.Second
		})
	}
	leader := func(among []*groupsNode) *groupsNode {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for _, nd := range among {
				if nd.p.raft.State() == raft.Leader {
					return nd
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("no leader within 10 s")
		return nil
	}
	first := leader(nodes)
	if first != nodes[0] {
		t.Fatalf("the new group is led by %s, want its first peer %s", first.id, nodes[0].id)
	}
	// Its process goes: partition, transport and port closed at once.
	first.p.Close()
	first.p = nil
	first.groups.Close()
	first.mux.Close()
	// The first survivor by ID campaigns at once; if its log is behind the other's (the
	// leader's last entry reached one of them only) it loses, and the other campaigns
	// half a second later. Either way, long before a heartbeat timeout.
	leader(nodes[1:])
}

// A node that comes back on an empty data directory bootstraps again the groups it was
// a first voter of. Its first campaign must not win the term its earlier self led: the
// peers that voted for it then would vote again (hashicorp/raft repeats a vote to the
// same candidate), and a leader with only the bootstrap entry would overwrite the group's
// messages on some replicas and not others (chaos seed 725708 found it: sends enqueued
// twice, replicas at one index with two digests). The peers must elect one of
// themselves, and every message sent before the wipe must still be there, on every
// replica.
func TestGroupsWipedFirstPeerDoesNotLeadWithAnEmptyLog(t *testing.T) {
	nodes, peers := startGroupsNodes(t, 3)
	fc := testQueue(1, time.Minute)
	open := func(nd *groupsNode) {
		t.Helper()
		openGroup(t, nd, peers, fc, func(cfg *Config) {
			// Long enough that the peers still follow the wiped node's earlier self
			// when it comes back, even on a busy machine.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 4*time.Second, 4*time.Second, 2*time.Second
		})
	}
	for _, i := range []int{1, 2, 0} {
		open(nodes[i])
	}
	leader := func(among []*groupsNode) *groupsNode {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, nd := range among {
				if nd.p != nil && nd.p.raft.State() == raft.Leader {
					return nd
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("no leader within 30 s")
		return nil
	}
	var first *groupsNode
	for i := 0; i < 3; {
		first = leader(nodes)
		_, err := first.p.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg(fmt.Sprintf("m%d", i), []byte("x"))})
		switch {
		case err == nil:
			i++
		case !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown):
			t.Fatal(err)
		}
	}
	// Wait until every replica holds the three messages, so the wipe loses nothing
	// committed.
	target := first.p.AppliedIndex()
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, nd := range nodes {
			if got := nd.p.AppliedIndex(); got < target {
				return fmt.Errorf("%s applied %d, want %d", nd.id, got, target)
			}
		}
		return nil
	})
	// The leader's process restarts on an empty data directory at once; its port stays
	// open, so the peers see no dead node, only a leader that went quiet.
	first.p.Close()
	first.p = nil
	if err := os.RemoveAll(first.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(first.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	open(first)

	var lp *groupsNode
	testutil.WaitFor(t, 30*time.Second, func() error {
		lp = leader(nodes)
		if _, err := lp.p.Enqueue(ctxT(t, 5*time.Second), []*fsm.Message{msg("after", []byte("y"))}); err != nil {
			return err
		}
		return nil
	})
	var st fsm.Stats
	testutil.WaitFor(t, 10*time.Second, func() error {
		var err error
		st, err = lp.p.Stats(ctxT(t, 5*time.Second))
		return err
	})
	if got := st.Targets[0].Active; got != 4 {
		t.Errorf("the leader after the wipe (%s) holds %d messages, want the 3 sent before and 1 after", lp.id, got)
	}
	if err := lp.p.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	target = lp.p.AppliedIndex()
	testutil.WaitFor(t, 15*time.Second, func() error {
		want := lp.p.Digest()
		for _, nd := range nodes {
			if nd.p.AppliedIndex() < target {
				return fmt.Errorf("%s applied %d, want %d", nd.id, nd.p.AppliedIndex(), target)
			}
			if d := nd.p.Digest(); d != want {
				return fmt.Errorf("%s's state differs from the leader's (%s) at index %d", nd.id, lp.id, target)
			}
		}
		return nil
	})
}

// transport.Groups, which cannot import this package, pipelines as many AppendEntries
// by default as a group on a transport of its own.
func TestDefaultPipelineMatchesGroups(t *testing.T) {
	if got := transport.DefaultGroupsConfig().Pipeline; got != DefaultPipeline {
		t.Errorf("transport.DefaultGroupsConfig().Pipeline %d, partition.DefaultPipeline %d", got, DefaultPipeline)
	}
	if got, want := transport.DefaultGroupsConfig().Timeout, DefaultConfig().NetTimeout; got != want {
		t.Errorf("transport.DefaultGroupsConfig().Timeout %v, partition.DefaultConfig().NetTimeout %v", got, want)
	}
}
