package cluster

import (
	"sort"

	"github.com/quorumbus/quorumbus/cluster/gossip"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Placement: which nodes hold the replicas of each partition group. The choice itself is
// package placement's, pure; the metadata leader gathers its View (candidates) from
// gossip (alive) and the metadata (draining, load): place here, raiseReplicas
// (replication.go).

// place chooses the replicas of each partition of a new entity (on the metadata leader),
// over the nodes gossip sees alive (this node always counts): placement.Place.
func (n *Node) place(partitions int32) [][]string {
	return placement.Place(n.candidates(), int(partitions), n.cfg.Replicas)
}

// candidates are the nodes gossip sees alive (this node included), with what the
// metadata says of them.
func (n *Node) candidates() placement.View {
	byID := map[string]*placement.Node{n.cfg.NodeID: {ID: n.cfg.NodeID, Zone: n.cfg.Zone}}
	if n.gossip != nil {
		for _, m := range n.gossip.Members() {
			if m.ID != n.cfg.NodeID && n.wasRemoved(m) {
				continue // removed, not stopped yet
			}
			byID[m.ID] = &placement.Node{ID: m.ID, Zone: m.Zone}
		}
	}
	n.meta.Read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if c, ok := byID[nd.ID]; ok {
				c.Draining = nd.Draining
			}
		}
		for _, pl := range s.Placements() {
			for _, p := range pl.Partitions {
				for i, r := range p.Replicas {
					if c, ok := byID[r]; ok {
						c.Load++
						if i == 0 {
							c.Leads++
						}
					}
				}
			}
		}
	})
	v := make(placement.View, 0, len(byID))
	for _, c := range byID {
		v = append(v, c)
	}
	sort.Slice(v, func(a, b int) bool { return v[a].ID < v[b].ID })
	return v
}

// markRemoved records that RemoveNode is removing node id (with the incarnation gossip
// sees it with), so that placement puts no replica on it while it still runs.
func (n *Node) markRemoved(id string) {
	inc := ""
	for _, m := range n.gossip.Members() {
		if m.ID == id {
			inc = m.Inc
		}
	}
	n.removedMu.Lock()
	n.removed[id] = inc
	n.removedMu.Unlock()
}

// wasRemoved reports whether m is a node RemoveNode removed, in the same incarnation
// (a node that returns on an empty data directory is a new node).
func (n *Node) wasRemoved(m gossip.Member) bool {
	n.removedMu.Lock()
	defer n.removedMu.Unlock()
	inc, ok := n.removed[m.ID]
	return ok && inc == m.Inc
}
