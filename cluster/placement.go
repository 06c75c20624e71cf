package cluster

import (
	"sort"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// place chooses the replicas of each partition of a new entity (on the metadata leader):
// min(Replicas, eligible nodes) distinct nodes per partition, in distinct zones where
// the zones allow, the least loaded first; the first replica of each partition (the
// group's preferred leader) rotates so that leaders spread evenly. Eligible nodes are
// the registered, not draining nodes that gossip sees alive (this node always counts).
func (n *Node) place(partitions int32) [][]string {
	if partitions < 1 {
		partitions = 1
	}
	type cand struct {
		id, zone    string
		load, leads int
	}
	byID := map[string]*cand{n.cfg.NodeID: {id: n.cfg.NodeID, zone: n.cfg.Zone}}
	if n.gossip != nil {
		for _, m := range n.gossip.members() {
			byID[m.ID] = &cand{id: m.ID, zone: m.Zone}
		}
	}
	var cands []*cand
	n.meta.read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			if nd.Draining {
				delete(byID, nd.ID)
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
	for _, c := range byID {
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		cands = []*cand{{id: n.cfg.NodeID, zone: n.cfg.Zone}}
	}
	k := min(max(n.cfg.Replicas, 1), len(cands))
	out := make([][]string, partitions)
	for i := range out {
		sort.SliceStable(cands, func(a, b int) bool {
			if cands[a].load != cands[b].load {
				return cands[a].load < cands[b].load
			}
			return cands[a].id < cands[b].id
		})
		var pick []*cand
		zones := map[string]bool{}
		for _, c := range cands { // distinct zones first
			if len(pick) < k && !zones[c.zone] {
				pick, zones[c.zone] = append(pick, c), true
			}
		}
		for _, c := range cands {
			if len(pick) >= k {
				break
			}
			if !containsCand(pick, c) {
				pick = append(pick, c)
			}
		}
		// The one leading the fewest groups goes first (preferred leader).
		sort.SliceStable(pick, func(a, b int) bool { return pick[a].leads < pick[b].leads })
		ids := make([]string, len(pick))
		for j, c := range pick {
			ids[j] = c.id
			c.load++
		}
		pick[0].leads++
		out[i] = ids
	}
	return out
}

func containsCand[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
