package cluster

import (
	"sort"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// Placement: which nodes hold the replicas of each partition group. The choice itself
// (placeGroups, addReplicas) is pure, over candidates that the metadata leader gathers
// from gossip (alive) and the metadata (draining, load); place and raiseReplicas
// (replication.go) gather them.

// candidate is a live node a replica may be placed on.
type candidate struct {
	id, zone string
	draining bool // marked draining: used only when not enough other nodes are alive
	load     int  // partition replicas placed on it
	leads    int  // partition groups whose preferred leader (first replica) it is
}

// placeGroups chooses the replicas of each of partitions new groups: min(replicas, live
// nodes) distinct nodes per group. Nodes that are not draining come first, then
// distinct zones where the zones allow, then the least loaded; a draining node is
// chosen only when the others are too few (a rolling restart drains every node in
// turn: an entity created meanwhile still gets its replication factor). The first
// replica of each group (its preferred leader) is a node that is not draining when
// the group has one, the one leading the fewest groups, so that leaders spread evenly.
// cands' load and leads are updated for the groups chosen.
func placeGroups(cands []*candidate, replicas, partitions int) [][]string {
	partitions = max(partitions, 1)
	k := min(max(replicas, 1), len(cands))
	out := make([][]string, partitions)
	for i := range out {
		pick := pickReplicas(nil, cands, k)
		// Preferred leader: not draining, leading the fewest groups.
		sort.SliceStable(pick, func(a, b int) bool {
			if pick[a].draining != pick[b].draining {
				return !pick[a].draining
			}
			return pick[a].leads < pick[b].leads
		})
		ids := make([]string, len(pick))
		for j, c := range pick {
			ids[j] = c.id
			c.load++
		}
		if len(pick) > 0 {
			pick[0].leads++
		}
		out[i] = ids
	}
	return out
}

// addReplicas chooses the nodes to add to a group whose replicas are have (zones: the
// zone of each of them, "" when unknown) so that it has replicas, the same way
// placeGroups does; nil when it has them already or no other node is alive. cands'
// load is updated for the nodes chosen.
func addReplicas(have []string, zones map[string]string, cands []*candidate, replicas int) []string {
	var free []*candidate
	for _, c := range cands {
		if !containsCand(have, c.id) {
			free = append(free, c)
		}
	}
	k := min(replicas-len(have), len(free))
	if k <= 0 {
		return nil
	}
	used := map[string]bool{}
	for _, id := range have {
		used[zones[id]] = true
	}
	pick := pickReplicas(used, free, k)
	ids := make([]string, len(pick))
	for j, c := range pick {
		ids[j] = c.id
		c.load++
	}
	return ids
}

// pickReplicas picks k of cands (k <= len(cands)): nodes not draining before draining
// ones, and within each, distinct zones first, then the least loaded (then by ID).
// used names zones that already hold a replica. It sorts cands.
func pickReplicas(used map[string]bool, cands []*candidate, k int) []*candidate {
	sort.SliceStable(cands, func(a, b int) bool {
		if cands[a].load != cands[b].load {
			return cands[a].load < cands[b].load
		}
		return cands[a].id < cands[b].id
	})
	zones := map[string]bool{}
	for z := range used {
		zones[z] = true
	}
	var pick []*candidate
	for _, draining := range []bool{false, true} {
		for _, c := range cands { // distinct zones first
			if len(pick) < k && c.draining == draining && !zones[c.zone] {
				pick, zones[c.zone] = append(pick, c), true
			}
		}
		for _, c := range cands {
			if len(pick) < k && c.draining == draining && !containsCand(pick, c) {
				pick = append(pick, c)
			}
		}
	}
	return pick
}

// place chooses the replicas of each partition of a new entity (on the metadata leader),
// over the nodes gossip sees alive (this node always counts): placeGroups.
func (n *Node) place(partitions int32) [][]string {
	return placeGroups(n.candidates(), n.cfg.Replicas, int(partitions))
}

// candidates are the nodes gossip sees alive (this node included), with what the
// metadata says of them.
func (n *Node) candidates() []*candidate {
	byID := map[string]*candidate{n.cfg.NodeID: {id: n.cfg.NodeID, zone: n.cfg.Zone}}
	if n.gossip != nil {
		for _, m := range n.gossip.members() {
			if m.ID != n.cfg.NodeID && n.wasRemoved(m) {
				continue // removed, not stopped yet
			}
			byID[m.ID] = &candidate{id: m.ID, zone: m.Zone}
		}
	}
	n.meta.read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if c, ok := byID[nd.ID]; ok {
				c.draining = nd.Draining
			}
		}
		for _, pl := range s.Placements() {
			for _, p := range pl.Partitions {
				for i, r := range p.Replicas {
					if c, ok := byID[r]; ok {
						c.load++
						if i == 0 {
							c.leads++
						}
					}
				}
			}
		}
	})
	cands := make([]*candidate, 0, len(byID))
	for _, c := range byID {
		cands = append(cands, c)
	}
	sort.Slice(cands, func(a, b int) bool { return cands[a].id < cands[b].id })
	return cands
}

func containsCand[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// markRemoved records that RemoveNode is removing node id (with the incarnation gossip
// sees it with), so that placement puts no replica on it while it still runs.
func (n *Node) markRemoved(id string) {
	inc := ""
	for _, m := range n.gossip.members() {
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
func (n *Node) wasRemoved(m member) bool {
	n.removedMu.Lock()
	defer n.removedMu.Unlock()
	inc, ok := n.removed[m.ID]
	return ok && inc == m.Inc
}
