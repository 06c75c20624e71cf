package cluster

import (
	"time"

	"github.com/quorumbus/quorumbus/partition"
)

// Routing: where does partition group G run, and who leads it. group is the one owner
// of that question. It is built from the metadata's placement (the replicas) and the
// node's hosted replicas (locate), and it answers whether a replica is hosted here,
// whether that replica leads, which leader it hears from and whether that leader went
// silent (silent.go); leaderOf combines those answers with the hints of earlier calls.
// The router, the call path and transactions ask it; nothing else reads a group's
// local replica or looks a group up in n.parts to route.

// group is one partition of a resolved entity: its Raft group and where it runs.
type group struct {
	id       uint32
	index    int
	replicas []string
	local    *replica // nil when no replica is hosted here; read only through the methods below
}

// hosted is the replica of group id hosted here, nil when none.
func (n *Node) hosted(id uint32) *replica {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.parts[id]
}

// locate records whether a replica of g is hosted here.
func (n *Node) locate(g *group) { g.local = n.hosted(g.id) }

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
func (n *Node) leaderOf(g group, tried int) string {
	if g.leadsHere() {
		return n.cfg.NodeID
	}
	// A follower that hears from its leader knows better than a hint, which may name a
	// leader that has since been paused or cut off (silent.go).
	if id := n.heardLeader(g); id != "" {
		return id
	}
	if v, ok := n.hints.Load(g.id); ok {
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
func (n *Node) noteLeader(g uint32, id string) {
	if v, ok := n.hints.Load(g); ok && v.(string) == id {
		return
	}
	n.hints.Store(g, id)
}
