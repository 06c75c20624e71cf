package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// Groups placed while only one zone had nodes move a replica into each zone whose nodes
// join later, one add-then-remove at a time: every group ends with three voters in
// three zones, none is seen with fewer than three voters while it moves (its leader's
// configuration, sampled every poll), and no message is lost.
func TestZoneSpreadRepairedWhenZonesJoin(t *testing.T) {
	first := startNodes(t, 3, 3, 3, nil, []string{"a", "a", "a"})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	queues := map[string]int32{"zq-parted": 3, "zq-one": 1}
	const perQueue = 10
	for q, parts := range queues {
		if err := first[0].Store().Apply(ctx, &meta.CreateQueue{Name: q, Properties: queueProps(parts)}); err != nil {
			t.Fatal(err)
		}
		for i := range perQueue {
			m := &fsm.Message{}
			m.MessageID = fmt.Sprintf("%s-%d", q, i)
			if err := first[1].Router().Send(ctx, q, []*fsm.Message{m}); err != nil {
				t.Fatalf("send to %s: %v", q, err)
			}
		}
	}
	more := startNodesFrom(t, 4, 2, 1, 3, []string{first[0].adv}, []string{"b", "c"}, nil)
	nodes := append(first, more...)
	zone := map[string]string{"n1": "a", "n2": "a", "n3": "a", "n4": "b", "n5": "c"}

	// spread reports nil once every group is placed in three zones and its leader's
	// configuration is exactly those three voters; it fails the test at once when a
	// leader counts fewer than three voters.
	spread := func() error {
		var pls []meta.Placement
		nodes[0].meta.Read(func(s *meta.State) { pls = s.PlacementsView() })
		leaders := map[uint32][]ServerInfo{}
		for _, nd := range nodes {
			for _, g := range nd.localGroupStatus(nil) {
				if g.IsLeader {
					voters := 0
					for _, s := range g.Servers {
						if s.Voter {
							voters++
						}
					}
					if voters < 3 {
						t.Fatalf("group %d led by %s has %d voters: %+v", g.Group, nd.cfg.NodeID, voters, g.Servers)
					}
					leaders[g.Group] = g.Servers
				}
			}
		}
		for _, pl := range pls {
			for i, p := range pl.Partitions {
				zs := map[string]bool{}
				for _, r := range p.Replicas {
					zs[zone[r]] = true
				}
				if len(p.Replicas) != 3 || len(zs) != 3 {
					return fmt.Errorf("partition %d of %s placed on %v", i, pl.Entity, p.Replicas)
				}
				servers, ok := leaders[p.GroupID]
				if !ok {
					return fmt.Errorf("partition %d of %s has no leader", i, pl.Entity)
				}
				for _, s := range servers {
					if !s.Voter || !containsNode(p.Replicas, s.ID) {
						return fmt.Errorf("partition %d of %s: servers %+v, placement %v", i, pl.Entity, servers, p.Replicas)
					}
				}
				if len(servers) != 3 {
					return fmt.Errorf("partition %d of %s: servers %+v, placement %v", i, pl.Entity, servers, p.Replicas)
				}
			}
		}
		return nil
	}
	waitFor(t, 90*time.Second, spread)
	for q := range queues {
		for _, nd := range nodes {
			rc, err := nd.Store().Runtime(ctx, adminEntity(q))
			if err != nil || rc.Active != perQueue {
				t.Fatalf("runtime of %s through %s: %+v, %v; want %d active", q, nd.cfg.NodeID, rc, err, perQueue)
			}
		}
	}
	waitFor(t, 20*time.Second, func() error { return converged(nodes) })
}

// A cluster formed in one zone whose later nodes come from two others ends with its
// five metadata voters spread so that no zone holds three (a majority): growing the
// group promotes the new zones first, and a swap (promote a caught-up non-voter, then
// demote a voter of the fullest zone) moves a voter out of the zone that kept too many.
func TestMetadataVotersSpreadOverZones(t *testing.T) {
	first := startNodes(t, 3, 3, 3, nil, []string{"a", "a", "a"})
	more := startNodesFrom(t, 4, 3, 1, 3, []string{first[0].adv}, []string{"b", "c", "b"}, nil)
	nodes := append(first, more...)
	zone := map[string]string{"n1": "a", "n2": "a", "n3": "a", "n4": "b", "n5": "c", "n6": "b"}
	waitFor(t, 60*time.Second, func() error {
		var leader *Node
		for _, nd := range nodes {
			if nd.meta.IsLeader() {
				leader = nd
			}
		}
		if leader == nil {
			return fmt.Errorf("no metadata leader")
		}
		servers := leader.meta.Servers()
		perZone := map[string]int{}
		for _, s := range servers {
			if s.Suffrage == raft.Voter {
				perZone[zone[string(s.ID)]]++
			}
		}
		if voters(servers) != 5 || len(servers) != 6 || perZone["a"] > 2 || perZone["b"] > 2 {
			return fmt.Errorf("metadata group %v: want 5 voters of 6 servers, at most 2 per zone (voters per zone %v)", servers, perZone)
		}
		return nil
	})
}
