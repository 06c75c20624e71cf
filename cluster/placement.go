package cluster

import (
	"sort"

	"github.com/quorumbus/quorumbus/cluster/gossip"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Placement: which nodes hold the replicas of each partition group. The choice itself is
// package placement's, pure; the steward gathers its View (candidates) from gossip
// (alive) and the metadata (draining, load): place here, raiseReplicas
// (replication.go).

// place chooses the replicas of each partition of a new entity (on the metadata leader),
// over the nodes gossip sees alive (this node always counts): placement.Place.
func (st *steward) place(partitions int32) [][]string {
	return placement.Place(st.candidates(), int(partitions), st.n.cfg.Replicas)
}

// candidates are the nodes gossip sees alive (this node included), with what the
// metadata says of them.
func (st *steward) candidates() placement.View {
	n := st.n
	byID := map[string]*placement.Node{n.cfg.NodeID: {ID: n.cfg.NodeID, Zone: n.cfg.Zone}}
	if n.gossip != nil {
		for _, m := range n.gossip.Members() {
			if m.ID != n.cfg.NodeID && st.wasRemoved(m) {
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
		for _, pl := range s.PlacementsView() {
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
func (st *steward) markRemoved(id string) {
	inc := ""
	if m, ok := st.n.gossip.Member(id); ok {
		inc = m.Inc
	}
	st.removedMu.Lock()
	st.removed[id] = inc
	st.removedMu.Unlock()
}

// unmarkRemoved forgets markRemoved's record when the removal failed before the node
// left the metadata group: its operator was told it stays, so the metadata pass may
// add it back if a failed RemoveServer took effect after all (committed once a quorum
// returned), and placement may use it again.
func (st *steward) unmarkRemoved(id string) {
	st.removedMu.Lock()
	delete(st.removed, id)
	st.removedMu.Unlock()
}

// wasRemoved reports whether m is a node RemoveNode removed, in the same incarnation
// (a node that returns on an empty data directory is a new node).
func (st *steward) wasRemoved(m gossip.Member) bool {
	st.removedMu.Lock()
	defer st.removedMu.Unlock()
	inc, ok := st.removed[m.ID]
	return ok && inc == m.Inc
}
