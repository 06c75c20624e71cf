package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Replication factor. Placement gives a new group min(--replicas, live nodes) replicas
// (cluster/placement); when fewer nodes were alive than --replicas, the metadata leader raises
// the group's placement as soon as more are (raiseReplicas), and the group's leader adds
// each new replica the way it replaces a dead one (reconcileMembers: a non-voter first,
// promoted once caught up). A group is under-replicated while fewer of its voters are
// alive than it should have: --replicas, capped by the registered nodes (a node that is
// down still counts until `qbctl node remove`). Its leader exports that
// (quorumbus_partition_under_replicated) and logs each change.

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

// registeredNodes counts the nodes the metadata records.
func registeredNodes(g *metagroup.Group) int {
	k := 0
	g.Read(func(s *meta.State) { k = len(s.Nodes()) })
	return k
}

// underReplicated holds the groups led here last seen under-replicated, so that the
// change is logged once each way; owner: reconciler.mu.
type underReplicated map[uint32]bool

// note logs, for each group led here (lead), when it becomes under-replicated (fewer
// live voters than want, alive holding the live nodes) and when it has all its replicas
// again. Called by reconcile, with reconciler.mu held.
func (u underReplicated) note(log *slog.Logger, lead []*replica, alive map[string]bool, want int) {
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
		case under && !u[id]:
			log.Info("partition under-replicated", "entity", r.entity, "partition", r.index, "group", id,
				"live_voters", live, "replicas", want)
		case !under && u[id]:
			log.Info("partition fully replicated again", "entity", r.entity, "partition", r.index, "group", id,
				"live_voters", live, "replicas", want)
		}
		if under {
			u[id] = true
		} else {
			delete(u, id)
		}
	}
	for id := range u {
		if !led[id] {
			delete(u, id) // led elsewhere now: its new leader tells
		}
	}
}

// raiseReplicas (on the metadata leader) adds replicas to the placement of every group
// that has fewer than --replicas while other nodes are alive: nodes that are not
// draining first, a draining one only when nothing else can host it (placement.Add). A
// group with no replica left is not raised: its data is gone. One SetPlacement per
// entity whose placement changes.
func (st *steward) raiseReplicas(ctx context.Context) {
	n := st.n
	want := max(n.cfg.Replicas, 1)
	cands := st.candidates()
	var pls []meta.Placement
	zones := map[string]string{}
	n.meta.Read(func(s *meta.State) {
		pls = s.PlacementsView() // only each partition's Replicas kept
		for _, nd := range s.Nodes() {
			zones[nd.ID] = nd.Zone
		}
	})
	for _, pl := range pls {
		var reps [][]string // copied only for an entity that changes
		for i, p := range pl.Partitions {
			if len(p.Replicas) == 0 || len(p.Replicas) >= want {
				continue
			}
			add := placement.Add(p.Replicas, zones, cands, want)
			if len(add) == 0 {
				continue
			}
			if reps == nil {
				reps = make([][]string, len(pl.Partitions))
				for j, q := range pl.Partitions {
					reps[j] = slices.Clone(q.Replicas)
				}
			}
			reps[i] = append(reps[i], add...)
		}
		if reps == nil {
			continue
		}
		if _, err := n.meta.ProposeIndex(ctx, &meta.SetPlacement{Entity: pl.Entity, Replicas: reps}); err != nil {
			n.log.Warn("raise replication", "entity", pl.Entity, "err", err)
			return
		}
		n.log.Info("raising replication: placed more replicas", "entity", pl.Entity, "replicas", reps)
	}
}

// maxReplicaWait bounds how long Start waits for the groups that lack a replica to take
// this node (waitReplicasHere).
const maxReplicaWait = 30 * time.Second

// waitReplicasHere, at the end of Start, waits until every group placed on fewer nodes
// than it should have has taken this node (the metadata leader raises such groups within
// a second of seeing it alive) and this node votes in every group placed on it, for at
// most maxReplicaWait. A node that returns during a rolling restart so reports ready
// (/readyz answers only once Start has returned) after the entities created while it was
// down have their replicas again: the next node of the rollout may stop. Start has
// caught the node's metadata up with the leader's before (catchUpMeta).
func (rc *reconciler) waitReplicasHere(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, maxReplicaWait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		pending := rc.replicasPendingHere()
		if pending == "" {
			return
		}
		select {
		case <-ctx.Done():
			rc.n.log.Warn("serving although a group still waits for a replica here", "group", pending)
			return
		case <-t.C:
		}
	}
}

// replicasPendingHere names a group that lacks a replica this node could be, or that is
// placed here but does not count this node as a voter yet; "" when there is none.
func (rc *reconciler) replicasPendingHere() string {
	me := rc.n.cfg.NodeID
	var lacking string
	mine := map[uint32]string{}
	rc.n.meta.Read(func(s *meta.State) {
		want := placement.Want(rc.n.cfg.Replicas, len(s.Nodes()))
		for _, pl := range s.PlacementsView() {
			for i, p := range pl.Partitions {
				name := fmt.Sprintf("partition %d of %s", i, pl.Entity)
				switch {
				case containsNode(p.Replicas, me):
					mine[p.GroupID] = name
				case len(p.Replicas) > 0 && len(p.Replicas) < want && lacking == "":
					lacking = name + " (placed on fewer nodes than --replicas)"
				}
			}
		}
	})
	if lacking != "" {
		return lacking
	}
	ids := make([]uint32, 0, len(mine))
	for id := range mine {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		rc.n.mu.RLock()
		r := rc.n.parts[id]
		rc.n.mu.RUnlock()
		if r == nil {
			return mine[id] + " (not open here yet)"
		}
		servers, err := r.p.Servers()
		if err != nil {
			return mine[id] + " (" + err.Error() + ")"
		}
		voter := false
		for _, s := range servers {
			voter = voter || (string(s.ID) == me && s.Suffrage == raft.Voter)
		}
		if !voter {
			return mine[id] + " (not a voter here yet)"
		}
	}
	return ""
}
