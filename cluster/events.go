package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// The events an operator reads in the node log at info (docs/operations.md § What is
// logged): a member joined, died or left (gossip.go, note), the metadata leader changed
// (here), a drain began and ended (ops.go, DrainNode). hashicorp/raft's and memberlist's
// own lines go to debug (internal/hashilog).

// logMetaLeader logs each change of the metadata group's leader as this node sees it,
// until the node closes. Raft's observer drops observations when the channel is full
// (blocking false), so a slow log never holds up the group; the next change is logged.
func (n *Node) logMetaLeader() {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.meta.raft.RegisterObserver(obs)
	defer n.meta.raft.DeregisterObserver(obs)
	for {
		select {
		case <-n.closing:
			return
		case o := <-ch:
			lo := o.Data.(raft.LeaderObservation)
			if lo.LeaderID == "" {
				n.log.Info("metadata group has no leader", "term", n.meta.raft.CurrentTerm())
				continue
			}
			n.log.Info("metadata leader changed", "leader", string(lo.LeaderID), "term", n.meta.raft.CurrentTerm(),
				"this_node", string(lo.LeaderID) == n.cfg.NodeID)
		}
	}
}

// handOverLogged is handOver for a drain or a graceful stop (why), logged at info when
// it begins and ends, at warn when it ends without handing everything over.
func (n *Node) handOverLogged(ctx context.Context, why string) error {
	start := time.Now()
	n.log.Info(why+" began: handing over the leadership of every group this node leads", "node", n.cfg.NodeID)
	err := n.handOver(ctx)
	if err != nil {
		n.log.Warn(why+" ended before every leadership was handed over", "node", n.cfg.NodeID,
			"took", time.Since(start).Round(time.Millisecond), "err", err)
		return err
	}
	n.log.Info(why+" ended: every leadership another voter can take is handed over", "node", n.cfg.NodeID, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
