package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/partition/transport"
)

// groupsNode is a node whose partitions use transport.Groups, as cluster nodes do.
type groupsNode struct {
	id     raft.ServerID
	dir    string
	mux    *transport.Mux
	groups *transport.Groups
	p      *Partition
}

// With a heartbeat timeout far longer than the test (30 s), a group still elects at
// once twice: when it is created (its first peer campaigns) and when its leader's
// process is gone (the first surviving voter campaigns as soon as the leader's port
// refuses connections). Without either, no leader would appear for 30 to 60 s.
func TestGroupsElectWithoutWaitingForTimeouts(t *testing.T) {
	var nodes []*groupsNode
	for i := range 3 {
		m, err := transport.Listen("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := transport.NewGroups(m, raft.ServerAddress(m.Addr().String()), transport.GroupsConfig{Timeout: 5 * time.Second, Logger: testLogger()})
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
	}
	var peers []raft.Server
	for _, nd := range nodes {
		peers = append(peers, raft.Server{Suffrage: raft.Voter, ID: nd.id, Address: raft.ServerAddress(nd.mux.Addr().String())})
	}
	fc := testQueue(1, time.Minute)
	// The first peer last, so the others are there when it campaigns.
	for _, i := range []int{1, 2, 0} {
		nd := nodes[i]
		tr, err := nd.groups.Transport(1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.DataDir, cfg.Entity, cfg.NodeID = nd.dir, "q", nd.id
		cfg.Transport, cfg.FSM, cfg.Peers, cfg.Logger = tr, fc, peers, testLogger()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 30*time.Second, 30*time.Second
		if nd.p, err = Open(cfg); err != nil {
			t.Fatal(err)
		}
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
	next := leader(nodes[1:])
	if next != nodes[1] {
		t.Errorf("led by %s after the leader's node went, want the first survivor by ID, %s", next.id, nodes[1].id)
	}
}
