package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/placement"
)

// The operator surface (admin.Cluster, qbctl cluster/node/partition) and the graceful
// stop.

// Ops is the operator surface of a node (admin.Cluster: qbctl cluster, node and
// partition, the admin API's /$cluster routes): the cluster's status as this node sees
// it and asks the others, draining, removing and replacing nodes, moving leadership,
// and the digests tests compare replicas with. It is reached through Node.Ops and lives
// as long as its node.
type Ops struct {
	// n is the node's shared state the operations read and act on: identity, the
	// metadata replica and its leader, gossip, the replicas hosted here, the peers.
	n *Node
}

var _ admin.Cluster = (*Ops)(nil)

// Ops is the node's operator surface.
func (n *Node) Ops() *Ops { return n.ops }

// groupsEverywhere asks every live node which groups it hosts and who leads them.
func (o *Ops) groupsEverywhere(ctx context.Context) map[string][]GroupInfo {
	out := map[string][]GroupInfo{o.n.cfg.NodeID: o.n.localGroupStatus(nil)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range o.n.gossip.Members() {
		if m.ID == o.n.cfg.NodeID {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if gs, err := o.n.peer(m.Cluster).GroupStatus(cctx, nil); err == nil {
				mu.Lock()
				out[m.ID] = gs
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// ClusterStatus implements admin.Cluster.
func (o *Ops) ClusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	st := admin.ClusterStatus{NodeID: o.n.cfg.NodeID, MetadataLeader: o.n.meta.Leader()}
	roles := map[string]string{}
	for _, s := range o.n.meta.Servers() {
		roles[string(s.ID)] = "nonvoter"
		if s.Suffrage == raft.Voter {
			roles[string(s.ID)] = "voter"
		}
	}
	if st.MetadataLeader != "" {
		roles[st.MetadataLeader] = "leader"
	}
	members := map[string]*admin.Member{}
	var nodes []meta.Node
	replicas := map[string]int{}
	o.n.meta.Read(func(s *meta.State) {
		nodes = s.Nodes()
		for _, pl := range s.Placements() {
			for _, p := range pl.Partitions {
				for _, r := range p.Replicas {
					replicas[r]++
				}
			}
		}
	})
	draining := map[string]bool{}
	for _, nd := range nodes {
		members[nd.ID] = &admin.Member{ID: nd.ID, ClusterAddr: nd.Addr, Zone: nd.Zone, State: "dead"}
		draining[nd.ID] = nd.Draining
	}
	for _, m := range o.n.gossip.Members() {
		mb := members[m.ID]
		registered := mb != nil
		if mb == nil {
			mb = &admin.Member{ID: m.ID}
			members[m.ID] = mb
		}
		mb.ClusterAddr, mb.AMQPAddr, mb.AdminAddr, mb.Zone = m.Cluster, m.AMQP, m.Admin, m.Zone
		mb.State = m.State
		// A node that had cluster state (Formed) but has neither a record nor a place in
		// the metadata group was removed (RemoveNode deletes both) and still runs until
		// its operator stops it: it is not part of the cluster, whatever gossip says. A
		// joining node is registered before it joins the metadata group, and only then
		// says Formed.
		if _, inGroup := roles[m.ID]; !registered && !inGroup && m.Formed && m.ID != o.n.cfg.NodeID {
			mb.State = "removed"
		}
	}
	// A draining node that is up is "draining"; one that gossip no longer sees alive
	// says so first ("dead, draining"): an operator must not read it as serving.
	for id, mb := range members {
		switch {
		case !draining[id]:
		case mb.State == "alive":
			mb.State = "draining"
		default:
			mb.State += ", draining"
		}
	}
	for id, gs := range o.groupsEverywhere(ctx) {
		if mb := members[id]; mb != nil {
			for _, g := range gs {
				if g.IsLeader && g.Group != metagroup.ID {
					mb.Leading++
				}
			}
		}
	}
	if admin.WantDigests(ctx) {
		for id, d := range o.metaDigestsEverywhere(ctx) {
			if mb := members[id]; mb != nil {
				mb.MetadataDigest, mb.MetadataApplied = d.Digest, d.Applied
			}
		}
	}
	for id, mb := range members {
		mb.MetadataRole = roles[id]
		mb.Replicas = replicas[id]
		st.Members = append(st.Members, *mb)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st, nil
}

// Partitions implements admin.Cluster.
func (o *Ops) Partitions(ctx context.Context) ([]admin.PartitionStatus, error) {
	var pls []meta.Placement
	o.n.meta.Read(func(s *meta.State) { pls = s.Placements() })
	type key struct {
		node  string
		group uint32
	}
	infos := map[key]GroupInfo{}
	leaders := map[uint32]GroupInfo{}
	answered := o.groupsEverywhere(ctx) // node -> its groups; a node that did not answer is absent
	for id, gs := range answered {
		for _, g := range gs {
			infos[key{id, g.Group}] = g
			if g.IsLeader {
				leaders[g.Group] = g
			}
		}
	}
	var digests map[string]map[uint32]string
	if admin.WantDigests(ctx) {
		digests = o.digestsEverywhere(ctx)
	}
	alive := o.n.gossip.Alive()
	want := placement.Want(o.n.cfg.Replicas, registeredNodes(o.n.meta))
	var out []admin.PartitionStatus
	for _, pl := range pls {
		for i, p := range pl.Partitions {
			ps := admin.PartitionStatus{Entity: pl.Entity, Index: i, GroupID: p.GroupID, WantReplicas: want}
			lead, hasLeader := leaders[p.GroupID]
			voters := map[string]bool{}
			if hasLeader {
				ps.Leader = lead.Leader
				for _, s := range lead.Servers {
					voters[s.ID] = s.Voter
				}
			}
			ids := append([]string(nil), p.Replicas...)
			for id := range voters { // servers the placement dropped, still in the group
				if !containsNode(ids, id) {
					ids = append(ids, id)
				}
			}
			for _, id := range ids {
				rs := admin.ReplicaStatus{Node: id, Voter: voters[id], Digest: digests[id][p.GroupID]}
				if _, ok := answered[id]; !ok {
					rs.Unreachable = true
				}
				if g, ok := infos[key{id, p.GroupID}]; ok {
					rs.LastIndex = g.LastIndex
					if hasLeader && lead.LastIndex > g.LastIndex {
						rs.Lag = lead.LastIndex - g.LastIndex
					}
				}
				ps.Replicas = append(ps.Replicas, rs)
			}
			live := 0
			for _, id := range ids {
				if alive[id] && (voters[id] || !hasLeader && containsNode(p.Replicas, id)) {
					live++
				}
			}
			ps.UnderReplicated = live < want
			out = append(out, ps)
		}
	}
	return out, nil
}

// localNode is node id's record in this node's metadata replica.
func (o *Ops) localNode(id string) (nd meta.Node, ok bool) {
	o.n.meta.Read(func(s *meta.State) { nd, ok = s.Node(id) })
	return nd, ok
}

// knownNode is node id's record for an operator's command about it: ErrNotFound only
// once this node's metadata has caught up with the leader's.
func (o *Ops) knownNode(ctx context.Context, id string) (meta.Node, error) {
	if nd, ok := o.localNode(id); ok {
		return nd, nil
	}
	// A node registers itself through the metadata leader as it starts: a record
	// committed there may not have reached this replica yet (an operator drains a node
	// the moment the cluster formed). Catch up with the leader before saying "not found".
	if err := o.catchUpMeta(ctx); err != nil {
		o.n.log.Debug("metadata catch-up before a node lookup", "node", id, "err", err)
	} else if nd, ok := o.localNode(id); ok {
		return nd, nil
	}
	return meta.Node{}, fmt.Errorf("node %q: %w", id, meta.ErrNotFound)
}

// metaCatchUp bounds catchUpMeta.
const metaCatchUp = 5 * time.Second

// catchUpMeta is Store.SyncMeta (this node's metadata caught up with what the leader
// had applied when asked) bounded by metaCatchUp.
func (o *Ops) catchUpMeta(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, metaCatchUp)
	defer cancel()
	return o.n.store.SyncMeta(ctx)
}

// DrainNode implements admin.Cluster: the node is marked draining (new replicas are
// placed on it only when the other live nodes are too few for --replicas, and leader
// balancing leaves it alone), and it hands over leadership of everything it leads.
func (o *Ops) DrainNode(ctx context.Context, id string) error {
	nd, err := o.knownNode(ctx, id)
	if err != nil {
		return err
	}
	if !nd.Draining {
		nd.Draining = true
		if err := o.n.store.Apply(ctx, &meta.PutNode{Node: nd}); err != nil {
			return err
		}
		o.n.log.Info("node marked draining: new replicas go elsewhere while enough nodes live, leader balancing leaves it alone", "node", id)
	}
	if id == o.n.cfg.NodeID {
		return o.handOverLogged(ctx, "drain")
	}
	addr := o.n.addrOf(id)
	if addr == "" {
		return fmt.Errorf("%w: node %q is not reachable", admin.ErrUnavailable, id)
	}
	remote, err := o.n.peer(addr).HandOver(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	return remote
}

func timeLeft(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 30 * time.Second
}

// handOver transfers leadership of every group this node leads (the metadata group
// included) to other voters, and waits until it leads none that another voter could
// take, or ctx ends. A leadership goes only to a voter gossip sees alive and not
// stopping (successor): when every node of a cluster stops at once (kubectl scale to 0,
// docker compose down), handing a group to a node that is itself stopping made two
// nodes pass the metadata leadership back and forth until the shutdown timeout (issue
// 33). A group whose other voters are all stopping or gone stays led here and stops
// with this node.
func (o *Ops) handOver(ctx context.Context) error {
	for {
		o.n.mu.RLock()
		var leading []*replica
		for _, r := range o.n.parts {
			if leader, _ := r.p.Leader(); leader == o.n.cfg.NodeID {
				leading = append(leading, r)
			}
		}
		o.n.mu.RUnlock()
		pending := 0
		for _, r := range leading {
			servers, err := r.p.Servers()
			if err != nil {
				continue // no longer the leader, or closed
			}
			to := o.successor(servers)
			if to == "" {
				continue // nobody to hand it to
			}
			pending++
			if err := r.p.TransferLeadershipTo(to, o.n.addrOf(to)); err != nil {
				o.n.log.Debug("hand over partition leadership", "entity", r.entity, "partition", r.index, "to", to, "err", err)
			}
		}
		if o.n.meta.IsLeader() {
			if to := o.successor(o.n.meta.Servers()); to != "" {
				pending++
				if err := o.n.meta.TransferLeadershipTo(to, o.n.addrOf(to)); err != nil {
					o.n.log.Debug("hand over metadata leadership", "to", to, "err", err)
				}
			}
		}
		if pending == 0 {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: still leading groups: %v", admin.ErrUnavailable, ctx.Err())
		case <-t.C:
		}
	}
}

// successor is the voter of servers, other than this node, that a leadership goes to:
// the first one gossip sees alive and not stopping; "" when there is none.
func (o *Ops) successor(servers []raft.Server) string {
	for _, s := range servers {
		id := string(s.ID)
		if s.Suffrage != raft.Voter || id == o.n.cfg.NodeID {
			continue
		}
		if m, ok := o.n.gossip.Member(id); ok && !m.Stopping {
			return id
		}
	}
	return ""
}

// HandOver is DrainNode's step on the drained node.
func (s *rpcService) HandOver(req *TransferReq, resp *WireErr) error {
	ctx, cancel := s.n.rpc.callContext(req.Timeout)
	defer cancel()
	if w := toWire(s.n.ops.handOverLogged(ctx, "drain")); w != nil {
		*resp = *w
	}
	return nil
}

// Shutdown is the graceful stop (SIGTERM): this node hands over leadership of every
// group it leads, so clients see at most retriable errors while it restarts, and leaves
// the gossip; the caller then calls Close. A lone node has nobody to hand over to.
func (n *Node) Shutdown(ctx context.Context) error {
	// The others hand no leadership to a node that is stopping: said before this node
	// hands its own over, so that nodes stopping together do not pass leaderships back
	// and forth.
	n.gossip.SetStopping(time.Second)
	err := n.ops.handOverLogged(ctx, "graceful stop")
	n.gossip.Leave(2 * time.Second)
	return err
}

// TransferLeader implements admin.Cluster.
func (o *Ops) TransferLeader(ctx context.Context, groupID uint32, to string) error {
	found := false
	o.n.meta.Read(func(s *meta.State) {
		for _, pl := range s.Placements() {
			for _, p := range pl.Partitions {
				if p.GroupID == groupID {
					found = true
					if to != "" && !containsNode(p.Replicas, to) {
						found = false
					}
				}
			}
		}
	})
	if !found {
		if to != "" {
			return fmt.Errorf("group %d with a replica on %q: %w", groupID, to, meta.ErrNotFound)
		}
		return fmt.Errorf("group %d: %w", groupID, meta.ErrNotFound)
	}
	// A leadership given to a node that cannot keep it would not stay: say why instead.
	if to != "" {
		nd, _ := o.localNode(to)
		switch m, alive := o.n.gossip.Member(to); {
		case !alive:
			return fmt.Errorf("%w: node %q is not alive", admin.ErrUnavailable, to)
		case m.Stopping:
			return fmt.Errorf("%w: node %q is stopping", admin.ErrUnavailable, to)
		case nd.Draining:
			return fmt.Errorf("node %q is draining (undrain it first): %w", to, meta.ErrInvalid)
		}
	}
	for id, gs := range o.groupsEverywhere(ctx) {
		for _, g := range gs {
			if g.Group != groupID || !g.IsLeader {
				continue
			}
			if id == to {
				return nil
			}
			if to != "" && !slices.ContainsFunc(g.Servers, func(s ServerInfo) bool { return s.ID == to && s.Voter }) {
				return fmt.Errorf("%w: node %q is not a voter of group %d yet (it is catching up)", admin.ErrUnavailable, to, groupID)
			}
			return o.transferOn(ctx, id, groupID, to)
		}
	}
	return fmt.Errorf("%w: group %d has no leader now", admin.ErrUnavailable, groupID)
}

// transferOn has node leader, which leads group groupID, hand its leadership to to ("":
// any other voter).
func (o *Ops) transferOn(ctx context.Context, leader string, groupID uint32, to string) error {
	if leader == o.n.cfg.NodeID {
		return o.n.transferLocal(groupID, to)
	}
	remote, err := o.n.peer(o.n.addrOf(leader)).Transfer(ctx, groupID, to)
	if err != nil {
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	return remote
}

// RemoveNode implements admin.Cluster: the node's replicas are placed on other nodes
// (each group's leader then adds the new replica, promotes it once caught up and only
// then removes the old one), RemoveNode waits until no group counts the node any more
// (awaitMovedOff), and the node leaves the metadata group and its record is deleted. It
// runs on the metadata leader. It refuses a node holding the last replica of a group
// that no other node can take (replaceNode).
func (o *Ops) RemoveNode(ctx context.Context, id string) error {
	if _, err := o.knownNode(ctx, id); err != nil {
		return err
	}
	if !o.n.meta.IsLeader() {
		leader := o.n.meta.Leader()
		if leader == "" {
			return fmt.Errorf("%w: no metadata leader", admin.ErrUnavailable)
		}
		remote, err := o.n.peer(o.n.addrOf(leader)).RemoveNode(ctx, id)
		if err != nil {
			return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
		}
		return remote
	}
	if id == o.n.cfg.NodeID {
		return fmt.Errorf("%w: node %q leads the metadata group; drain it first so another node leads", meta.ErrInvalid, id)
	}
	o.n.steward.markRemoved(id)
	if err := o.replaceNode(ctx, id); err != nil {
		o.n.steward.unmarkRemoved(id)
		return err
	}
	// Still marked removed when this fails: placement leaves the node alone, and the
	// operator runs the command again.
	if err := o.awaitMovedOff(ctx, id); err != nil {
		return err
	}
	o.waitApplied(ctx, id, o.n.meta.AppliedIndex())
	if err := o.n.meta.RemoveServer(id, timeLeft(ctx)); err != nil {
		o.n.steward.unmarkRemoved(id)
		return fmt.Errorf("%w: remove %q from the metadata group: %v", admin.ErrUnavailable, id, err)
	}
	if err := o.n.meta.Propose(ctx, &meta.DeleteNode{ID: id}); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	return nil
}

// removeMoveWait bounds how long RemoveNode waits for the groups of the node it removes
// to have their replicas elsewhere: below the admin API's default write timeout
// (--http-write-timeout, 1m), so that the answer reaches the operator. A call forwarded
// from another node waits at most as long as its own deadline (30 s when it has none).
const removeMoveWait = 40 * time.Second

// awaitMovedOff waits until no partition group, as its leader reports its membership,
// still counts node id (its replicas were re-placed: each group's leader adds the new
// replica, promotes it once caught up, and only then removes id), so that stopping the
// node afterwards loses nothing and costs no group its quorum. A node gossip does not
// see alive is not waited for: its groups drop it as they can (a group whose only
// replica it held has lost its data already). It fails with admin.ErrUnavailable, naming
// the groups, when ctx or removeMoveWait ends first.
func (o *Ops) awaitMovedOff(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, removeMoveWait)
	defer cancel()
	for {
		if m, ok := o.n.gossip.Member(id); !ok || m.State != "alive" {
			return nil
		}
		var held []uint32
		for _, gs := range o.groupsEverywhere(ctx) {
			for _, g := range gs {
				if g.IsLeader && g.Group != metagroup.ID &&
					slices.ContainsFunc(g.Servers, func(s ServerInfo) bool { return s.ID == id }) {
					held = append(held, g.Group)
				}
			}
		}
		if len(held) == 0 {
			return nil
		}
		slices.Sort(held)
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: node %q still holds replicas of %d partition group(s) %v while they are copied to other nodes; "+
				"run the remove again (it goes on where it stopped) and stop the node only once it succeeded", admin.ErrUnavailable, id, len(held), held)
		case <-t.C: // polling the groups' membership: nothing signals it
		}
	}
}

// removedCatchUp bounds how long RemoveNode waits for the removed node to apply its
// re-placement before taking it out of the metadata group.
const removedCatchUp = 10 * time.Second

// waitApplied waits, up to removedCatchUp, until node id's metadata replica has applied
// index (here: the re-placement of its replicas). hashicorp/raft stops replicating to a
// server as soon as the configuration that removes it is appended, so a removed node
// that had not received its re-placement yet would never learn that its replicas
// moved, and would keep them, and their data, for as long as it runs. A node that does
// not answer (stopped, cut off) is not waited for: it learns nothing either way.
func (o *Ops) waitApplied(ctx context.Context, id string, index uint64) {
	ctx, cancel := context.WithTimeout(ctx, removedCatchUp)
	defer cancel()
	for {
		st, err := o.n.peerStatus(ctx, id, metagroup.ID)
		if err != nil || st.Applied >= index {
			return
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C: // polling the node's applied index: it signals nothing
		}
	}
}

// RemoveNode is RemoveNode forwarded to the metadata leader (To names the node).
func (s *rpcService) RemoveNode(req *TransferReq, resp *WireErr) error {
	ctx, cancel := s.n.rpc.callContext(req.Timeout)
	defer cancel()
	if w := toWire(s.n.ops.RemoveNode(ctx, req.To)); w != nil {
		*resp = *w
	}
	return nil
}

// replaceNode re-places every replica on node id onto another eligible node, one
// SetPlacement per entity (on the metadata leader). A partition for which no other node
// is eligible keeps its remaining replicas.
func (o *Ops) replaceNode(ctx context.Context, id string) error {
	var pls []meta.Placement
	o.n.meta.Read(func(s *meta.State) { pls = s.Placements() })
	for _, pl := range pls {
		changed := false
		reps := make([][]string, len(pl.Partitions))
		for i, p := range pl.Partitions {
			reps[i] = append([]string(nil), p.Replicas...)
			if !containsNode(p.Replicas, id) {
				continue
			}
			changed = true
			var keep []string
			for _, r := range p.Replicas {
				if r != id {
					keep = append(keep, r)
				}
			}
			if sub := o.substitute(keep, id); sub != "" {
				keep = append(keep, sub)
			}
			if len(keep) == 0 {
				return fmt.Errorf("%w: partition %d of %s has no other replica to keep its data", meta.ErrInvalid, i, pl.Entity)
			}
			reps[i] = keep
		}
		if changed {
			if _, err := o.n.meta.ProposeIndex(ctx, &meta.SetPlacement{Entity: pl.Entity, Replicas: reps}); err != nil {
				return err
			}
			o.n.log.Info("re-placed replicas", "entity", pl.Entity, "from", id, "replicas", reps)
		}
	}
	return nil
}

// substitute picks a live, not draining node outside have (and not gone): one in a zone
// none of have is in first, then the least loaded; "" when there is none.
func (o *Ops) substitute(have []string, gone string) string {
	var v placementView
	used := map[string]bool{}
	o.n.meta.Read(func(s *meta.State) {
		v = placementViewOf(s)
		for _, id := range have {
			if nd, ok := s.Node(id); ok && nd.Zone != "" {
				used[nd.Zone] = true
			}
		}
	})
	load, draining := v.load, v.draining
	best, bestLoad, bestNew := "", 0, false
	for _, m := range o.n.gossip.Members() {
		if m.ID == gone || draining[m.ID] || containsNode(have, m.ID) || m.State != "alive" {
			continue
		}
		isNew := m.Zone != "" && !used[m.Zone]
		if best == "" || (isNew && !bestNew) || (isNew == bestNew && (load[m.ID] < bestLoad || (load[m.ID] == bestLoad && m.ID < best))) {
			best, bestLoad, bestNew = m.ID, load[m.ID], isNew
		}
	}
	return best
}

// Digests reports the state digest (hex SHA-256) of every partition replica hosted here.
func (s *rpcService) Digests(_ struct{}, resp *map[uint32]string) error {
	*resp = s.n.ops.localDigests()
	return nil
}

func (o *Ops) localDigests() map[uint32]string {
	o.n.mu.RLock()
	rs := make([]*replica, 0, len(o.n.parts))
	for _, r := range o.n.parts {
		rs = append(rs, r)
	}
	o.n.mu.RUnlock()
	out := map[uint32]string{}
	for _, r := range rs {
		d := r.p.Digest()
		out[r.cfg.GroupID] = hex.EncodeToString(d[:])
	}
	return out
}

// digestsEverywhere asks every live node for the digests of the replicas it hosts.
func (o *Ops) digestsEverywhere(ctx context.Context) map[string]map[uint32]string {
	out := map[string]map[uint32]string{o.n.cfg.NodeID: o.localDigests()}
	for _, m := range o.n.gossip.Members() {
		if m.ID == o.n.cfg.NodeID {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if d, err := o.n.peer(m.Cluster).Digests(cctx); err == nil {
			out[m.ID] = d
		}
		cancel()
	}
	return out
}

// MetaDigest is a node's metadata state digest (hex SHA-256) and the last metadata log
// index its Raft applied.
type MetaDigest struct {
	Digest  string
	Applied uint64
}

// metaDigest is g's digest as MetaDigest.
func metaDigest(g *metagroup.Group) MetaDigest {
	sum, applied := g.Digest()
	return MetaDigest{Digest: hex.EncodeToString(sum[:]), Applied: applied}
}

// MetaDigest reports this node's metadata digest.
func (s *rpcService) MetaDigest(_ struct{}, resp *MetaDigest) error {
	*resp = metaDigest(s.n.meta)
	return nil
}

// metaDigestsEverywhere asks every live node for its metadata digest.
func (o *Ops) metaDigestsEverywhere(ctx context.Context) map[string]MetaDigest {
	out := map[string]MetaDigest{o.n.cfg.NodeID: metaDigest(o.n.meta)}
	for _, m := range o.n.gossip.Members() {
		if m.ID == o.n.cfg.NodeID {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if d, err := o.n.peer(m.Cluster).MetaDigest(cctx); err == nil {
			out[m.ID] = d
		}
		cancel()
	}
	return out
}
