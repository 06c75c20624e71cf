package cluster

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Replica rebalancing. Nodes that join a running cluster (3 -> 5) get no replicas of
// the groups that exist: placement puts only new groups on them. The metadata leader
// moves replicas onto them (rebalance, each steward round): while some live node that
// is not draining holds a share of the replicas more than 20 % (at least one) off even
// (placement.Balanced), it replaces a replica on the most loaded node by the least
// loaded one (placement.Rebalance) through the add-then-remove steps of any placement
// change (reconcileMembers: the new replica joins as a non-voter, is promoted once
// caught up, and only then is the old one removed, its leader handing leadership over
// first when it leads). Leadership follows through balanceLeaders, which moves it onto
// the new voters. Nothing moves in a group that is under-replicated or has a replica
// down, no move lowers the number of zones a group spans, and nothing moves while a node
// is draining (its replicas leave when it is removed).
//
// Moves are bounded: rebalance and spreadZones (zones.go) share the run loop's record
// of the moves under way (moving) and start new ones only while fewer than
// Config.RebalanceMoves groups are moving (0: no automatic moves). A move is under way
// until the new node votes in the group and the old one is gone from it, or
// moveTimeout passes. The record is the metadata leader's: a new leader starts with
// none, so for a moment after a leadership change up to twice the bound may move.

// moveTimeout is how long a move counts as under way when it does not finish (the new
// node went down, say); past it, another group may move.
const moveTimeout = 2 * time.Minute

// replicaMove is a replica spreadZones or rebalance moves: the group's replica on drop
// is replaced by one on add.
type replicaMove struct {
	drop, add string
	why       string // "zone spread" or "rebalance", for the log
	since     time.Time
}

// finishMoves forgets the moves that finished (the new node votes in the group and the
// dropped one is gone from it, as the new node sees the group) or ran out of time.
func (st *steward) finishMoves(ctx context.Context, moving map[uint32]replicaMove) {
	n := st.n
	for g, m := range moving {
		if time.Since(m.since) > moveTimeout {
			n.log.Warn(m.why+": a move did not finish in time", "group", g, "from", m.drop, "to", m.add)
			delete(moving, g)
			continue
		}
		if moveDone(ctx, n, g, m) {
			n.log.Info(m.why+": moved a replica", "group", g, "from", m.drop, "to", m.add)
			delete(moving, g)
		}
	}
}

// moveDone reports whether group g, as node m.add sees it, counts m.add as a voter and
// m.drop no more.
func moveDone(ctx context.Context, n *Node, g uint32, m replicaMove) bool {
	st, err := n.peerStatus(ctx, m.add, g)
	if err != nil {
		return false
	}
	added := false
	for _, s := range st.Servers {
		if s.ID == m.drop {
			return false
		}
		added = added || (s.ID == m.add && s.Voter)
	}
	return added
}

// rebalance (on the metadata leader, each steward round, after spreadZones) starts
// moves toward an even spread of replicas for as many groups as moving leaves room for
// under Config.RebalanceMoves, one SetPlacement per entity. The moved replica takes the
// dropped one's place in the group's replicas, so a group whose preferred leader moves
// prefers the new node.
func (st *steward) rebalance(ctx context.Context, moving map[uint32]replicaMove) {
	n := st.n
	limit := n.cfg.RebalanceMoves
	if len(moving) >= limit {
		return
	}
	view := st.candidates()
	if placement.Balanced(view) || slices.ContainsFunc(view, func(c *placement.Node) bool { return c.Draining }) {
		return // placement.Rebalance would choose nothing: read and index no placement
	}
	pls, zones, want := st.placements()
	type loc struct{ entity, part int }
	where := map[uint32]loc{}
	var groups []placement.Group
	for e, pl := range pls {
		for i, p := range pl.Partitions {
			if _, busy := moving[p.GroupID]; busy || p.GroupID == 0 {
				continue
			}
			where[p.GroupID] = loc{e, i}
			groups = append(groups, placement.Group{ID: p.GroupID, Replicas: p.Replicas})
		}
	}
	changed := map[int][][]string{} // entity (index in pls) -> its new replicas
	started := map[int][]uint32{}
	for len(moving) < limit {
		g, drop, add, ok := placement.Rebalance(groups, zones, view, want)
		if !ok {
			break
		}
		id := groups[g].ID
		at := where[id]
		reps := changed[at.entity]
		if reps == nil {
			for _, q := range pls[at.entity].Partitions {
				reps = append(reps, slices.Clone(q.Replicas))
			}
			changed[at.entity] = reps
		}
		reps[at.part][slices.Index(reps[at.part], drop)] = add
		moving[id] = replicaMove{drop: drop, add: add, why: "rebalance", since: time.Now()}
		started[at.entity] = append(started[at.entity], id)
		groups = slices.Delete(groups, g, g+1)
	}
	entities := make([]int, 0, len(changed))
	for e := range changed {
		entities = append(entities, e)
	}
	sort.Ints(entities)
	for _, e := range entities {
		ent := pls[e].Entity
		if _, err := n.meta.ProposeIndex(ctx, &meta.SetPlacement{Entity: ent, Replicas: changed[e]}); err != nil {
			n.log.Warn("rebalance", "entity", ent, "err", err)
			for _, g := range started[e] {
				delete(moving, g)
			}
			continue
		}
		n.log.Info("rebalance: moving replicas toward an even share per node", "entity", ent, "replicas", changed[e])
	}
}

// RebalanceStatus implements admin.Rebalancer: the moves under way (groups whose
// membership, as their leaders report it, differs from their placement), and the
// replicas and leaderships of each node against an even share.
func (o *Ops) RebalanceStatus(ctx context.Context) (admin.RebalanceStatus, error) {
	n := o.n
	st := admin.RebalanceStatus{NodeID: n.cfg.NodeID, MaxMoves: n.cfg.RebalanceMoves, Moves: []admin.RebalanceMove{}}
	var pls []meta.Placement
	var nodes []meta.Node
	n.meta.Read(func(s *meta.State) {
		pls = s.Placements()
		nodes = s.Nodes()
	})
	everywhere := o.groupsEverywhere(ctx)
	leaders := map[uint32]GroupInfo{}
	leading := map[string]int{}
	for id, gs := range everywhere {
		for _, g := range gs {
			if g.IsLeader && g.Group != metagroup.ID {
				leaders[g.Group] = g
				leading[id]++
			}
		}
	}
	replicas := map[string]int{}
	for _, pl := range pls {
		for i, p := range pl.Partitions {
			for _, r := range p.Replicas {
				replicas[r]++
			}
			lead, ok := leaders[p.GroupID]
			if !ok {
				continue
			}
			mv := admin.RebalanceMove{Entity: pl.Entity, Index: i, GroupID: p.GroupID}
			for _, s := range lead.Servers {
				switch {
				case !containsNode(p.Replicas, s.ID):
					mv.Leaving = append(mv.Leaving, s.ID)
				case !s.Voter:
					mv.CatchingUp = append(mv.CatchingUp, s.ID)
				}
			}
			for _, r := range p.Replicas {
				if !slices.ContainsFunc(lead.Servers, func(s ServerInfo) bool { return s.ID == r }) {
					mv.Joining = append(mv.Joining, r)
				}
			}
			if len(mv.Leaving)+len(mv.CatchingUp)+len(mv.Joining) > 0 {
				st.Moves = append(st.Moves, mv)
			}
		}
	}
	alive := n.gossip.Alive()
	var view placement.View
	totalR, totalL := 0, 0
	for _, nd := range nodes {
		rn := admin.RebalanceNode{ID: nd.ID, Zone: nd.Zone, Replicas: replicas[nd.ID], Leading: leading[nd.ID]}
		switch _, answered := everywhere[nd.ID]; {
		case nd.Draining:
			rn.State = "draining"
		case !alive[nd.ID] || !answered:
			rn.State = "down"
		default:
			rn.State = "up"
			view = append(view, &placement.Node{ID: nd.ID, Load: rn.Replicas, Leads: rn.Leading})
			totalR += rn.Replicas
			totalL += rn.Leading
		}
		st.Nodes = append(st.Nodes, rn)
	}
	if k := len(view); k > 0 {
		st.EvenReplicas = float64(totalR) / float64(k)
		st.EvenLeading = float64(totalL) / float64(k)
	}
	st.Balanced = true
	for i := range st.Nodes {
		rn := &st.Nodes[i]
		if rn.State != "up" {
			continue
		}
		rn.ReplicasEven = within(rn.Replicas, st.EvenReplicas)
		rn.LeadingEven = within(rn.Leading, st.EvenLeading)
		st.Balanced = st.Balanced && (len(view) < 2 || rn.ReplicasEven && rn.LeadingEven)
	}
	st.Done = st.Balanced && len(st.Moves) == 0
	return st, nil
}

// within reports whether k is within placement.Slack of even.
func within(k int, even float64) bool {
	d := float64(k) - even
	return d <= placement.Slack(even) && -d <= placement.Slack(even)
}

var _ admin.Rebalancer = (*Ops)(nil)
