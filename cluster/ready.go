package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
)

// Readiness (GET /readyz, quorumbus_node_ready) answers one question for a load
// balancer or Kubernetes: should clients be sent to this node? Removing a node from
// rotation helps only when the node itself is the problem; a group that has lost its
// majority elsewhere is just as unavailable through every other node, and taking the
// nodes that host it out of rotation would also cut off every entity they serve well.
// So readiness has two phases (docs/operations.md § What readiness means):
//
//   - Until the node has been ready once since it started, it is strict: every group it
//     hosts has a leader, every replica placed here is a voter of its group (votersHere),
//     and every replica here is within ReadyMaxLag entries of its leader, whose leader
//     answers within ReadyTimeout. A rolling restart waits for this
//     before it stops the next node, so it never stops a second replica of a group
//     whose first is still catching up.
//   - From then on, what other nodes fail at no longer makes it unready: a hosted group
//     without a leader (lost its majority, or electing) and a leader that does not
//     answer in time are left to that group's own alerts (qbctl cluster partitions,
//     quorumbus_partition_leader_contact_age_seconds). The node stays unready while it
//     has no metadata leader (it can route nothing new), while a replica here lags its
//     answering leader by more than ReadyMaxLag, and while it closes.
//
// Peers are asked together, each bounded by ReadyTimeout, so that one slow or paused
// peer cannot push the answer past a probe's timeout.

// CaughtUp reports whether this node serves current state (GET /readyz), by the rules
// above. It asks each other node that leads a replica here once (GroupStatus), all at
// once, so it costs one RPC per such node and none on a single node.
func (n *Node) CaughtUp(ctx context.Context) error {
	err := n.caughtUp(ctx, !n.wasReady.Load())
	if err == nil {
		n.wasReady.Store(true)
	}
	return err
}

// caughtUp is CaughtUp's check; strict is the first phase's.
func (n *Node) caughtUp(ctx context.Context, strict bool) error {
	select {
	case <-n.closing:
		return ErrClosed
	default:
	}
	if n.meta.Leader() == "" {
		return errors.New("metadata group has no leader")
	}
	if strict {
		if err := n.Ready(); err != nil {
			return err
		}
		if err := n.votersHere(); err != nil {
			return err
		}
	}
	type local struct {
		name    string
		applied uint64
	}
	mine := map[uint32]local{}
	byLeader := map[string][]uint32{}
	if !n.meta.IsLeader() {
		l := n.meta.Leader()
		byLeader[l] = append(byLeader[l], metagroup.ID)
		mine[metagroup.ID] = local{"the metadata group", n.meta.AppliedIndex()}
	}
	n.mu.RLock()
	for id, r := range n.parts {
		l, _ := r.p.Leader()
		if l == n.cfg.NodeID || l == "" { // a local leader is Ready's concern, a missing one too
			continue
		}
		byLeader[l] = append(byLeader[l], id)
		mine[id] = local{fmt.Sprintf("partition %d of %s", r.index, r.entity), r.p.AppliedIndex()}
	}
	n.mu.RUnlock()
	leaders := make([]string, 0, len(byLeader))
	for l := range byLeader {
		leaders = append(leaders, l)
	}
	sort.Strings(leaders)

	ctx, cancel := context.WithTimeout(ctx, n.cfg.ReadyTimeout)
	defer cancel()
	errs := make([]error, len(leaders)) // by index into leaders; each written by one goroutine before wg.Done
	var wg sync.WaitGroup
	for i, l := range leaders {
		addr := n.addrOf(l)
		if addr == "" {
			if strict {
				errs[i] = fmt.Errorf("node %s, which leads a replica here, has no known address", l)
			}
			continue
		}
		wg.Go(func() {
			gs, err := n.peer(addr).GroupStatus(ctx, byLeader[l])
			if err != nil {
				if strict {
					errs[i] = fmt.Errorf("cannot ask node %s how far its logs are: %v", l, err)
				}
				return
			}
			for _, g := range gs {
				m, ok := mine[g.Group]
				if ok && g.IsLeader && g.LastIndex > m.applied+n.cfg.ReadyMaxLag {
					errs[i] = fmt.Errorf("%s is catching up: %d entries behind its leader %s (at most %d allowed)",
						m.name, g.LastIndex-m.applied, l, n.cfg.ReadyMaxLag)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// votersHere reports a replica placed on this node that its group does not count as a
// voter (yet): a node back from a restart holds its share of a group only once the
// group's leader has promoted its replica, and a rolling restart that stopped the next
// node before would leave that group's quorum to the others alone. A caught-up replica
// can still be a non-voter for a while: one re-added while its node was down, whose
// leader promotes it at its next reconcile pass.
func (n *Node) votersHere() error {
	placed := map[uint32]bool{}
	n.meta.Read(func(s *meta.State) {
		for _, pl := range s.PlacementsView() {
			for _, p := range pl.Partitions {
				if containsNode(p.Replicas, n.cfg.NodeID) {
					placed[p.GroupID] = true
				}
			}
		}
	})
	n.mu.RLock()
	rs := make([]*replica, 0, len(placed))
	for id, r := range n.parts {
		if placed[id] {
			rs = append(rs, r)
		}
	}
	n.mu.RUnlock()
	sort.Slice(rs, func(i, j int) bool { return rs[i].cfg.GroupID < rs[j].cfg.GroupID })
	for _, r := range rs {
		servers, err := r.p.Servers()
		if err != nil {
			return fmt.Errorf("partition %d of %s: reading its configuration: %w", r.index, r.entity, err)
		}
		voter := false
		for _, s := range servers {
			voter = voter || (string(s.ID) == n.cfg.NodeID && s.Suffrage == raft.Voter)
		}
		if !voter {
			return fmt.Errorf("partition %d of %s: the replica here is not a voter yet (its leader promotes it once it has caught up)", r.index, r.entity)
		}
	}
	return nil
}
