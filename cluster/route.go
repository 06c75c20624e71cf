package cluster

import (
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/partition"
)

// Routing: where does partition group G run, and who leads it. locator is the one owner
// of that question, with group, its answer for one group. A group is built from the
// metadata's placement (the replicas) and the node's hosted replicas (locator.locate);
// it tells whether a replica is hosted here and whether that replica leads. locator
// adds which leader a local follower hears from, whether that leader went silent
// (silent.go) and the hints of earlier calls (leaderOf, noteLeader, hint, forget). The
// router, the call path, the RPC server and transactions ask it; nothing else reads a
// group's local replica or looks a group up in n.parts to route.

// group is one partition of a resolved entity: its Raft group and where it runs.
type group struct {
	id       uint32
	index    int
	replicas []string
	local    *replica // nil when no replica is hosted here; read only through the methods below
}

// locator answers where the partition groups of its node's cluster run and who leads
// them.
type locator struct{ n *Node }

func (n *Node) routes() locator { return locator{n} }

// hosted is the replica of group id hosted here, nil when none.
func (l locator) hosted(id uint32) *replica {
	l.n.mu.RLock()
	defer l.n.mu.RUnlock()
	return l.n.parts[id]
}

// ledHere lists, in ID order, the groups whose replica hosted here leads.
func (l locator) ledHere() []uint32 {
	l.n.mu.RLock()
	var ids []uint32
	for id, r := range l.n.parts {
		if r.p.IsLeader() {
			ids = append(ids, id)
		}
	}
	l.n.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// locate records whether a replica of g is hosted here.
func (l locator) locate(g *group) { g.local = l.hosted(g.id) }

// isHosted reports whether a replica of g is hosted here.
func (g group) isHosted() bool { return g.local != nil }

// leadsHere reports whether g's leader is the replica hosted here.
func (g group) leadsHere() bool { return g.local != nil && g.local.p.IsLeader() }

// hostedReplica is the replica hosted here, nil when none.
func (g group) hostedReplica() *replica { return g.local }

// localPartition is the partition of the replica hosted here, nil when none.
func (g group) localPartition() *partition.Partition {
	if g.local == nil {
		return nil
	}
	return g.local.p
}

// localView is the leader the replica hosted here knows of ("" when none or no replica).
func (g group) localView() string {
	if g.local == nil {
		return ""
	}
	id, _ := g.local.p.Leader()
	return id
}

// lastContact is when the follower replica hosted here last heard from its leader;
// leader reports that it leads, ok that there is such a replica.
func (g group) lastContact() (at time.Time, leader, ok bool) {
	if g.local == nil {
		return time.Time{}, false, false
	}
	m := g.local.p.Metrics()
	return m.LastContact, m.IsLeader, true
}

// leaderOf guesses which node leads g: the local replica when it leads, the leader a
// local follower hears from, then the last node that answered, then the local replica's
// view, then the replicas in turn (tried counts failed guesses).
func (l locator) leaderOf(g group, tried int) string {
	if g.leadsHere() {
		return l.n.cfg.NodeID
	}
	// A follower that hears from its leader knows better than a hint, which may name a
	// leader that has since been paused or cut off (silent.go).
	if id := l.heardLeader(g); id != "" {
		return id
	}
	if v, ok := l.n.hints.Load(g.id); ok {
		return v.(string)
	}
	if tried == 0 {
		if id := g.localView(); id != "" {
			return id
		}
	}
	if len(g.replicas) == 0 {
		return ""
	}
	return g.replicas[tried%len(g.replicas)]
}

// noteLeader records that id served group g as its leader. Most calls find the leader
// they were told, and a sync.Map store allocates, so it stores only a change.
func (l locator) noteLeader(g uint32, id string) {
	if v, ok := l.n.hints.Load(g); ok && v.(string) == id {
		return
	}
	l.n.hints.Store(g, id)
}

// hint records that node id leads group g, as a NotLeaderError or a transfer said.
func (l locator) hint(g uint32, id string) { l.n.hints.Store(g, id) }

// forget drops what is known of g's leader: the guess failed.
func (l locator) forget(g uint32) { l.n.hints.Delete(g) }

// groupExists reports whether group id exists or may exist: the local metadata places
// it, or has not allocated it yet (this replica lags behind the change that created
// it). False means it was deleted.
func (l locator) groupExists(id uint32) bool {
	found := false
	l.n.meta.Read(func(s *meta.State) {
		if id >= s.NextGroupID() {
			found = true
			return
		}
		for _, pl := range s.PlacementsView() {
			for _, p := range pl.Partitions {
				found = found || p.GroupID == id
			}
		}
	})
	return found
}

// groupByID finds a partition group by id in the metadata, wherever it runs.
func (l locator) groupByID(id uint32) (group, bool) {
	var g group
	found := false
	l.n.meta.Read(func(s *meta.State) {
		for _, pl := range s.PlacementsView() {
			for i, p := range pl.Partitions {
				if p.GroupID == id {
					g, found = group{id: id, index: i, replicas: p.Replicas}, true
				}
			}
		}
	})
	if found {
		l.locate(&g)
	}
	return g, found
}
