package cluster

import (
	"context"
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Failure domains. Placement puts a new group's replicas in distinct zones where live
// nodes allow (placement.Place, placement.Add). A group placed while some zone had no
// live node (its nodes joined later, or were down) is repaired toward that spread by
// spreadZones, on the metadata leader: it replaces one replica in a zone holding two of
// them by a node of a zone holding none (placement.Spread), through the same
// add-then-remove steps as any placement change (reconcileMembers: the new replica
// joins as a non-voter, is promoted once caught up, and only then is the dropped one
// removed), so the group never has fewer voters than before. At most
// Config.RebalanceMoves groups move at a time, these moves and rebalance's together
// (rebalance.go).

// spreadZones (on the metadata leader, each steward round) starts moves for as many
// groups as the moves under way (moving, the run loop's record, rebalance.go) leave
// room for under Config.RebalanceMoves: only groups with all their replicas placed and
// alive, one SetPlacement per entity.
func (st *steward) spreadZones(ctx context.Context, moving map[uint32]replicaMove) {
	n := st.n
	limit := n.cfg.RebalanceMoves
	if len(moving) >= limit {
		return
	}
	cands := st.candidates()
	liveZones := map[string]bool{}
	for _, c := range cands {
		if c.Zone != "" {
			liveZones[c.Zone] = true
		}
	}
	if len(liveZones) < 2 {
		return // nothing to spread over: a cluster without zones reads no placement here
	}
	pls, zones, want := st.placements()
	for _, pl := range pls {
		var reps [][]string // copied only for an entity that changes
		var started []uint32
		for i, p := range pl.Partitions {
			if len(moving)+len(started) >= limit {
				break
			}
			if _, busy := moving[p.GroupID]; busy || p.GroupID == 0 || len(p.Replicas) < want {
				continue // under-replicated groups are raiseReplicas'
			}
			drop, add, ok := placement.Spread(p.Replicas, zones, cands)
			if !ok {
				continue
			}
			if reps == nil {
				reps = make([][]string, len(pl.Partitions))
				for j, q := range pl.Partitions {
					reps[j] = slices.Clone(q.Replicas)
				}
			}
			k := slices.Index(reps[i], drop)
			reps[i] = append(slices.Delete(reps[i], k, k+1), add)
			moving[p.GroupID] = replicaMove{drop: drop, add: add, why: "zone spread", since: time.Now()}
			started = append(started, p.GroupID)
		}
		if reps == nil {
			continue
		}
		if _, err := n.meta.ProposeIndex(ctx, &meta.SetPlacement{Entity: pl.Entity, Replicas: reps}); err != nil {
			n.log.Warn("zone spread", "entity", pl.Entity, "err", err)
			for _, g := range started {
				delete(moving, g)
			}
			return
		}
		n.log.Info("zone spread: moving replicas into zones their groups lack", "entity", pl.Entity, "replicas", reps)
		if len(moving) >= limit {
			return
		}
	}
}

// placements reads, for the moves of spreadZones and rebalance, every entity's
// placement (a view: not to be changed), each registered node's zone and how many
// replicas a group should have.
func (st *steward) placements() (pls []meta.Placement, zones map[string]string, want int) {
	n := st.n
	zones, want = map[string]string{}, 1
	n.meta.Read(func(s *meta.State) {
		pls = s.PlacementsView()
		for _, nd := range s.Nodes() {
			zones[nd.ID] = nd.Zone
		}
		want = placement.Want(n.cfg.Replicas, len(s.Nodes()))
	})
	return pls, zones, want
}
