package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/gossip"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// Membership changes. Gossip says who is alive; the metadata leader records nodes
// (meta.PutNode) and grows its own group; each partition group's leader moves its group
// toward the placement one safe step at a time: add a missing replica as a non-voter,
// promote it once it has caught up, and only then remove a voter the placement dropped.
// A majority is never removed at once, and a node is never removed automatically.

// maxMetaVoters is the metadata group's size: more nodes join it as non-voters.
const maxMetaVoters = 5

// catchUpSlack is how far behind the leader's last index a non-voter may be when it is
// promoted.
const catchUpSlack = 64

// register records node m in the metadata (on the metadata leader g), keeping its
// draining mark; nothing when the record is unchanged.
func register(ctx context.Context, g *metagroup.Group, m gossip.Meta) error {
	var old meta.Node
	var ok bool
	g.Read(func(s *meta.State) { old, ok = s.Node(m.ID) })
	want := meta.Node{ID: m.ID, Addr: m.Cluster, Zone: m.Zone, Incarnation: m.Inc, Draining: old.Draining}
	if ok && old == want {
		return nil
	}
	return g.Propose(ctx, &meta.PutNode{Node: want})
}

// steward does the metadata leader's duties, every second while this node leads the
// metadata group (run), and places the partitions of new entities (place, called by
// the metadata group's leader as it proposes their creation): it registers live nodes,
// grows the metadata group (non-voters first, promoted once caught up) up to
// maxMetaVoters voters (spread over zones: swapMetaVoter), re-places the replicas of
// nodes dead past their grace period, raises under-replicated groups (replication.go),
// moves replicas into zones their groups lack (zones.go) and onto nodes holding fewer
// than an even share (rebalance.go), deletes entities idle for
// their AutoDeleteOnIdle (idle.go) and balances partition leadership.
type steward struct {
	n *Node
	// removed holds the nodes RemoveNode removed on this node (as metadata leader), by
	// ID, with the incarnation each had: until it stops, such a node is still alive in
	// gossip, and placement must not put replicas back on it; owner: removedMu.
	removedMu sync.Mutex
	removed   map[string]string
	// moves is how many groups spreadZones and rebalance are moving a replica of, as of
	// the last round (0 off the metadata leader), for quorumbus_rebalance_moves_in_progress;
	// written by run only.
	moves atomic.Int64
}

func newSteward(n *Node) *steward { return &steward{n: n, removed: map[string]string{}} }

// run does the leader's duties every reconcileInterval until ctx (the node's lifetime)
// ends.
func (st *steward) run(ctx context.Context) {
	n := st.n
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	deadSince := map[string]time.Time{} // registered nodes gossip does not see, since when
	moving := map[uint32]replicaMove{}  // groups spreadZones and rebalance move (rebalance.go)
	round := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.meta.IsLeader() {
			clear(moving) // the new leader keeps its own record
			st.moves.Store(0)
			continue
		}
		pass, cancel := context.WithTimeout(ctx, 10*time.Second)
		st.reconcileMeta(pass)
		st.replaceDead(pass, deadSince)
		st.raiseReplicas(pass)
		st.finishMoves(pass, moving)
		st.spreadZones(pass, moving)
		st.rebalance(pass, moving)
		st.moves.Store(int64(len(moving)))
		st.deleteIdle(pass)
		if round++; round%5 == 0 {
			st.balanceLeaders(pass)
		}
		cancel()
	}
}

// reconcileMeta registers the live nodes and grows the metadata group by one step.
func (st *steward) reconcileMeta(ctx context.Context) {
	n := st.n
	// A node RemoveNode removed still gossips until its operator stops it: it is neither
	// registered again nor added back to the group (returning on an empty data directory,
	// with a new incarnation, it is a new node).
	var members []gossip.Member
	for _, m := range n.gossip.Members() {
		if m.ID == n.cfg.NodeID || !st.wasRemoved(m) {
			members = append(members, m)
		}
	}
	alive := map[string]gossip.Member{}
	for _, m := range members {
		alive[m.ID] = m
		if err := register(ctx, n.meta, m.Meta); err != nil {
			n.log.Warn("register node", "node", m.ID, "err", err)
		}
	}
	servers := n.meta.Servers()
	in := map[string]raft.Server{}
	voters := 0
	for _, s := range servers {
		in[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	// Add live nodes the group lacks, as non-voters.
	for _, m := range members {
		if _, ok := in[m.ID]; ok {
			continue
		}
		if err := n.meta.AddNonvoter(m.ID, m.Cluster, 5*time.Second); err != nil {
			n.log.Warn("add metadata non-voter", "node", m.ID, "err", err)
			return
		}
		n.log.Info("metadata group: added non-voter", "node", m.ID)
		return // one change per round
	}
	// Promote a caught-up live non-voter while the group has fewer voters than it should:
	// the largest odd number not above maxMetaVoters and the number of live nodes.
	target := min(maxMetaVoters, len(members))
	if target%2 == 0 {
		target--
	}
	last, _ := n.meta.Indexes()
	var cands []string
	for _, s := range servers {
		if s.Suffrage == raft.Nonvoter {
			if _, ok := alive[string(s.ID)]; ok {
				cands = append(cands, string(s.ID))
			}
		}
	}
	zoneOf := map[string]string{}
	n.meta.Read(func(s *meta.State) {
		for _, nd := range s.Nodes() {
			zoneOf[nd.ID] = nd.Zone
		}
	})
	var voterIDs []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voterIDs = append(voterIDs, string(s.ID))
		}
	}
	caughtUp := func(id string) bool {
		gs, err := n.peerStatus(ctx, id, metagroup.ID)
		return err == nil && gs.Applied+catchUpSlack >= last
	}
	if voters >= target {
		st.swapMetaVoter(voterIDs, cands, zoneOf, alive, caughtUp)
		return
	}
	cands = placement.SpreadVoters(cands, voterIDs, zoneOf)
	for _, id := range cands {
		if !caughtUp(id) {
			continue
		}
		if err := n.meta.AddVoter(id, alive[id].Cluster, 5*time.Second); err != nil {
			n.log.Warn("promote metadata voter", "node", id, "err", err)
		} else {
			n.log.Info("metadata group: promoted voter", "node", id)
		}
		return
	}
}

// swapMetaVoter spreads the metadata voters over zones once the group has as many as it
// should: when every voter is alive and a zone holds two voters more than a caught-up
// live non-voter's zone, it promotes that non-voter and then demotes a voter of the
// fuller zone (placement.SwapVoters), so that losing one zone leaves a quorum wherever
// the nodes allow. The group has one voter more between the two steps, never one fewer.
// One swap per round.
func (st *steward) swapMetaVoter(voters, cands []string, zoneOf map[string]string, alive map[string]gossip.Member, caughtUp func(string) bool) {
	n := st.n
	for _, v := range voters {
		if _, ok := alive[v]; !ok {
			return // a voter is down: no membership change that is not needed
		}
	}
	if _, _, ok := placement.SwapVoters(voters, cands, n.cfg.NodeID, zoneOf); !ok {
		return // nothing to gain: ask no node how far it is
	}
	var ready []string
	for _, c := range cands {
		if caughtUp(c) {
			ready = append(ready, c)
		}
	}
	promote, demote, ok := placement.SwapVoters(voters, ready, n.cfg.NodeID, zoneOf)
	if !ok {
		return
	}
	if err := n.meta.AddVoter(promote, alive[promote].Cluster, 5*time.Second); err != nil {
		n.log.Warn("promote metadata voter", "node", promote, "err", err)
		return
	}
	if err := n.meta.DemoteVoter(demote, 5*time.Second); err != nil {
		n.log.Warn("demote metadata voter", "node", demote, "err", err)
		return
	}
	n.log.Info("metadata group: moved a voter to spread the zones", "promoted", promote, "zone", zoneOf[promote],
		"demoted", demote, "from_zone", zoneOf[demote])
}

// peerStatus asks node id about one group it hosts.
func (n *Node) peerStatus(ctx context.Context, id string, groupID uint32) (GroupInfo, error) {
	var out []GroupInfo
	if id == n.cfg.NodeID {
		out = n.localGroupStatus([]uint32{groupID})
	} else {
		addr := n.addrOf(id)
		if addr == "" {
			return GroupInfo{}, fmt.Errorf("%w: node %q has no known address", ErrUnavailable, id)
		}
		var err error
		if out, err = n.peer(addr).GroupStatus(ctx, []uint32{groupID}); err != nil {
			return GroupInfo{}, err
		}
	}
	if len(out) == 0 {
		return GroupInfo{}, fmt.Errorf("%w: node %q does not host group %d", ErrUnavailable, id, groupID)
	}
	return out[0], nil
}

// localGroupStatus describes the groups hosted here (all when ids is empty); group
// metagroup.ID is the metadata group.
func (n *Node) localGroupStatus(ids []uint32) []GroupInfo {
	var out []GroupInfo
	want := func(id uint32) bool {
		if len(ids) == 0 {
			return true
		}
		for _, x := range ids {
			if x == id {
				return true
			}
		}
		return false
	}
	if want(metagroup.ID) && len(ids) > 0 {
		last, applied := n.meta.Indexes()
		st := GroupInfo{Group: metagroup.ID, Leader: n.meta.Leader(), IsLeader: n.meta.IsLeader(),
			LastIndex: last, Applied: applied}
		out = append(out, st)
	}
	n.mu.RLock()
	var rs []*replica
	for id, r := range n.parts {
		if want(id) {
			rs = append(rs, r)
		}
	}
	n.mu.RUnlock()
	for _, r := range rs {
		leader, _ := r.p.Leader()
		st := GroupInfo{Group: r.cfg.GroupID, Leader: leader, IsLeader: r.p.IsLeader(),
			LastIndex: r.p.LastIndex(), Applied: r.p.AppliedIndex()}
		if servers, err := r.p.Servers(); err == nil {
			for _, s := range servers {
				st.Servers = append(st.Servers, ServerInfo{ID: string(s.ID), Voter: s.Suffrage == raft.Voter})
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// reconcileMembers moves the membership of a group this node leads one step toward
// its placement. It reports whether the group matches the placement.
func (rc *reconciler) reconcileMembers(ctx context.Context, r *replica, part meta.Partition) bool {
	if part.GroupID == 0 {
		return true
	}
	servers, err := r.p.Servers()
	if err != nil {
		return false
	}
	in := map[string]raft.Server{}
	for _, s := range servers {
		in[string(s.ID)] = s
	}
	// 1. A placed replica the group lacks joins as a non-voter.
	for _, id := range part.Replicas {
		if _, ok := in[id]; ok {
			continue
		}
		addr := rc.n.addrOf(id)
		if addr == "" {
			return false
		}
		if err := r.p.AddNonvoter(ctx, id, addr); err != nil {
			rc.n.log.Warn("add partition non-voter", "entity", r.entity, "partition", r.index, "node", id, "err", err)
		} else {
			rc.n.log.Info("partition: added non-voter", "entity", r.entity, "partition", r.index, "node", id)
		}
		return false
	}
	// 2. A caught-up placed non-voter is promoted.
	last := r.p.LastIndex()
	for _, id := range part.Replicas {
		if s := in[id]; s.Suffrage == raft.Voter {
			continue
		}
		st, err := rc.n.peerStatus(ctx, id, part.GroupID)
		if err != nil || st.Applied+catchUpSlack < last {
			return false
		}
		if err := r.p.AddVoter(ctx, id, rc.n.addrOf(id)); err != nil {
			rc.n.log.Warn("promote partition voter", "entity", r.entity, "partition", r.index, "node", id, "err", err)
		} else {
			rc.n.log.Info("partition: promoted voter", "entity", r.entity, "partition", r.index, "node", id)
		}
		return false
	}
	// 3. Every placed replica votes: remove one server the placement dropped. The
	// leader hands leadership over before removing itself.
	for _, s := range servers {
		if containsNode(part.Replicas, string(s.ID)) {
			continue
		}
		if string(s.ID) == rc.n.cfg.NodeID {
			if err := r.p.TransferLeadership(); err != nil {
				rc.n.log.Warn("hand over leadership before leaving", "entity", r.entity, "partition", r.index, "err", err)
			}
			return false
		}
		if err := r.p.RemoveServer(ctx, string(s.ID)); err != nil {
			rc.n.log.Warn("remove partition replica", "entity", r.entity, "partition", r.index, "node", s.ID, "err", err)
		} else {
			rc.n.log.Info("partition: removed replica", "entity", r.entity, "partition", r.index, "node", s.ID)
		}
		return false
	}
	return true
}

// transferLocal hands leadership of a group led here to another voter (to: "" any).
func (n *Node) transferLocal(groupID uint32, to string) error {
	n.mu.RLock()
	r := n.parts[groupID]
	n.mu.RUnlock()
	if r == nil {
		return fmt.Errorf("%w: group %d is not hosted on %s", meta.ErrNotFound, groupID, n.cfg.NodeID)
	}
	return r.p.TransferLeadershipTo(to, n.addrOf(to))
}

// replaceDead re-places the replicas of nodes that gossip has not seen for longer than
// DeadNodeGrace (the nodes themselves stay registered: removing one is an operator's
// decision, qbctl node remove).
func (st *steward) replaceDead(ctx context.Context, deadSince map[string]time.Time) {
	n := st.n
	alive := map[string]bool{}
	for _, m := range n.gossip.Members() {
		alive[m.ID] = true
	}
	var nodes []meta.Node
	hosts := map[string]bool{}
	n.meta.Read(func(s *meta.State) {
		nodes = s.Nodes()
		for _, pl := range s.PlacementsView() {
			for _, p := range pl.Partitions {
				for _, r := range p.Replicas {
					hosts[r] = true
				}
			}
		}
	})
	now := time.Now()
	for _, nd := range nodes {
		if alive[nd.ID] {
			delete(deadSince, nd.ID)
			continue
		}
		since, ok := deadSince[nd.ID]
		if !ok {
			deadSince[nd.ID] = now
			continue
		}
		if now.Sub(since) < n.cfg.DeadNodeGrace || !hosts[nd.ID] {
			continue
		}
		n.log.Warn("node unreachable past its grace period: re-placing its replicas", "node", nd.ID, "since", since)
		if err := n.ops.replaceNode(ctx, nd.ID); err != nil {
			n.log.Warn("re-place replicas", "node", nd.ID, "err", err)
		}
	}
}

// balanceLeaders spreads partition leadership evenly over the nodes that can lead: a
// voter of some group, alive and answering, neither draining nor stopping. When one of
// them leads more than 20 % (at least one group) above an even share, or less than 20 %
// below it, it moves one group at a time from a node leading more to one of the group's
// voters leading at least two fewer, the largest difference first, and among equals to
// the group's preferred leader (its first replica, which placement rotates over the
// nodes): a node back from a restart leads its own groups again. At most two transfers
// per round. Within those bounds nothing moves, so a leadership moved by hand (qbctl
// partition transfer-leader) stays. Balancing toward each group's preferred leader
// instead never gave a node removed and added back a group to lead: it is appended to
// the replicas of the groups it rejoins, first in none.
func (st *steward) balanceLeaders(ctx context.Context) {
	n := st.n
	var v placementView
	n.meta.Read(func(s *meta.State) { v = placementViewOf(s) })
	everywhere := n.ops.groupsEverywhere(ctx)
	canLead := func(id string) bool {
		if _, answered := everywhere[id]; !answered || v.draining[id] {
			return false // only to a node that just answered: raft blocks the group's writes until a transfer's TimeoutNow call returns, which a paused node never answers
		}
		m, ok := n.gossip.Member(id)
		return ok && !m.Stopping // a stopping node would hand the group straight back
	}
	type led struct {
		group  uint32
		leader string
		voters []string
	}
	var groups []led
	leads := map[string]int{} // nodes that can lead -> groups they lead
	for id, gs := range everywhere {
		for _, g := range gs {
			if !g.IsLeader || g.Group == metagroup.ID {
				continue
			}
			l := led{group: g.Group, leader: id}
			for _, s := range g.Servers {
				if s.Voter && canLead(s.ID) {
					l.voters = append(l.voters, s.ID)
					if _, ok := leads[s.ID]; !ok {
						leads[s.ID] = 0 // counted below
					}
				}
			}
			groups = append(groups, l)
		}
	}
	if len(leads) < 2 {
		return
	}
	for _, g := range groups {
		if _, ok := leads[g.leader]; ok {
			leads[g.leader]++
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].group < groups[j].group })
	even := float64(len(groups)) / float64(len(leads))
	slack := max(1, 0.2*even)
	for moved := 0; moved < 2; moved++ {
		lo, hi := len(groups), 0
		for _, k := range leads {
			lo, hi = min(lo, k), max(hi, k)
		}
		if float64(hi) <= even+slack && float64(lo) >= even-slack {
			return
		}
		best, to, gap, pref := -1, "", 1, false
		for i, g := range groups {
			from, ok := leads[g.leader]
			if !ok {
				continue
			}
			for _, t := range g.voters {
				d := from - leads[t]
				if t == g.leader || d <= 1 {
					continue
				}
				if p := v.preferred[g.group] == t; d > gap || (d == gap && p && !pref) {
					best, to, gap, pref = i, t, d, p
				}
			}
		}
		if best < 0 {
			return // no group can move toward an even spread
		}
		g := &groups[best]
		if err := n.ops.transferOn(ctx, g.leader, g.group, to); err != nil {
			n.log.Debug("balance leaders", "group", g.group, "from", g.leader, "to", to, "err", err)
			return
		}
		n.log.Info("moved a partition leadership to even out the spread", "group", g.group, "from", g.leader, "to", to,
			"from_leads", leads[g.leader], "to_leads", leads[to], "even_share", fmt.Sprintf("%.1f", even))
		leads[g.leader]--
		leads[to]++
		g.leader = to
	}
}

// placementView is what the metadata says about the nodes and the replicas on them.
type placementView struct {
	draining  map[string]bool   // node ID -> marked draining
	load      map[string]int    // node ID -> partition replicas placed on it
	preferred map[uint32]string // group ID -> its preferred leader (first replica)
}

func placementViewOf(s *meta.State) placementView {
	v := placementView{draining: map[string]bool{}, load: map[string]int{}, preferred: map[uint32]string{}}
	for _, nd := range s.Nodes() {
		v.draining[nd.ID] = nd.Draining
	}
	for _, pl := range s.PlacementsView() {
		for _, p := range pl.Partitions {
			for i, r := range p.Replicas {
				v.load[r]++
				if i == 0 {
					v.preferred[p.GroupID] = r
				}
			}
		}
	}
	return v
}
