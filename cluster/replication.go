package cluster

import (
	"context"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// Replication factor. Placement gives a new group min(--replicas, live nodes) replicas
// (placement.go); when fewer nodes were alive than --replicas, the metadata leader raises
// the group's placement as soon as more are (raiseReplicas), and the group's leader adds
// each new replica the way it replaces a dead one (reconcileMembers: a non-voter first,
// promoted once caught up). A group is under-replicated while fewer of its voters are
// alive than it should have: --replicas, capped by the registered nodes (a node that is
// down still counts until `qbctl node remove`). Its leader exports that
// (quorumbus_partition_under_replicated) and logs each change.

// wantReplicas is how many replicas each group should have: --replicas, capped by the
// registered nodes.
func wantReplicas(replicas, registered int) int {
	return max(min(replicas, registered), 1)
}

// liveVoters counts the voters among servers that alive holds.
func liveVoters(servers []raft.Server, alive map[string]bool) int {
	k := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter && alive[string(s.ID)] {
			k++
		}
	}
	return k
}

// aliveSet is the set of nodes gossip sees alive, this node included.
func (n *Node) aliveSet() map[string]bool {
	alive := map[string]bool{n.cfg.NodeID: true}
	if n.gossip != nil {
		for _, m := range n.gossip.members() {
			alive[m.ID] = true
		}
	}
	return alive
}

// registeredNodes counts the nodes the metadata records.
func (n *Node) registeredNodes() int {
	k := 0
	n.meta.read(func(s *meta.State) { k = len(s.Nodes()) })
	return k
}

// noteReplication logs, for each group led here (lead), when it becomes under-replicated
// and when it has all its replicas again. Called by reconcile, with recMu held.
func (n *Node) noteReplication(lead []*replica) {
	alive := n.aliveSet()
	want := wantReplicas(n.cfg.Replicas, n.registeredNodes())
	led := map[uint32]bool{}
	for _, r := range lead {
		id := r.cfg.GroupID
		led[id] = true
		servers, err := r.p.Servers()
		if err != nil {
			continue
		}
		live := liveVoters(servers, alive)
		under := live < want
		switch {
		case under && !n.underRep[id]:
			n.log.Info("partition under-replicated", "entity", r.entity, "partition", r.index, "group", id,
				"live_voters", live, "replicas", want)
		case !under && n.underRep[id]:
			n.log.Info("partition fully replicated again", "entity", r.entity, "partition", r.index, "group", id,
				"live_voters", live, "replicas", want)
		}
		if under {
			n.underRep[id] = true
		} else {
			delete(n.underRep, id)
		}
	}
	for id := range n.underRep {
		if !led[id] {
			delete(n.underRep, id) // led elsewhere now: its new leader tells
		}
	}
}

// raiseReplicas (on the metadata leader) adds replicas to the placement of every group
// that has fewer than --replicas while other nodes are alive: nodes that are not
// draining first, a draining one only when nothing else can host it (addReplicas). A
// group with no replica left is not raised: its data is gone. One SetPlacement per
// entity whose placement changes.
func (n *Node) raiseReplicas(ctx context.Context) {
	want := max(n.cfg.Replicas, 1)
	cands := n.candidates()
	var pls []meta.Placement
	zones := map[string]string{}
	n.meta.read(func(s *meta.State) {
		pls = s.Placements()
		for _, nd := range s.Nodes() {
			zones[nd.ID] = nd.Zone
		}
	})
	for _, pl := range pls {
		changed := false
		reps := make([][]string, len(pl.Partitions))
		for i, p := range pl.Partitions {
			reps[i] = slices.Clone(p.Replicas)
			if len(p.Replicas) == 0 || len(p.Replicas) >= want {
				continue
			}
			if add := addReplicas(p.Replicas, zones, cands, want); len(add) > 0 {
				reps[i] = append(reps[i], add...)
				changed = true
			}
		}
		if !changed {
			continue
		}
		if _, err := n.meta.proposeIndex(ctx, &meta.SetPlacement{Entity: pl.Entity, Replicas: reps}); err != nil {
			n.log.Warn("raise replication", "entity", pl.Entity, "err", err)
			return
		}
		n.log.Info("raising replication: placed more replicas", "entity", pl.Entity, "replicas", reps)
	}
}
