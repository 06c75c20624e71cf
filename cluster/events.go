package cluster

import (
	"context"
	"log/slog"
	"time"
)

// The events an operator reads in the node log at info (docs/operations.md § What is
// logged): a member joined, died or left (cluster/gossip), the metadata leader changed
// (here), a drain began and ended (ops.go, DrainNode). hashicorp/raft's and memberlist's
// own lines go to debug (internal/hashilog).

// logMetaLeader logs a change of the metadata group's leader as node self sees it
// (metagroup.Group.WatchLeader calls it).
func logMetaLeader(log *slog.Logger, self string) func(leader string, term uint64) {
	return func(leader string, term uint64) {
		if leader == "" {
			log.Info("metadata group has no leader", "term", term)
			return
		}
		log.Info("metadata leader changed", "leader", leader, "term", term, "this_node", leader == self)
	}
}

// handOverLogged is handOver for a drain or a graceful stop (why), logged at info when
// it begins and ends, at warn when it ends without handing everything over.
func (o *Ops) handOverLogged(ctx context.Context, why string) error {
	start := time.Now()
	o.n.log.Info(why+" began: handing over the leadership of every group this node leads", "node", o.n.cfg.NodeID)
	err := o.handOver(ctx)
	if err != nil {
		o.n.log.Warn(why+" ended before every leadership was handed over", "node", o.n.cfg.NodeID,
			"took", time.Since(start).Round(time.Millisecond), "err", err)
		return err
	}
	o.n.log.Info(why+" ended: every leadership another voter can take is handed over", "node", o.n.cfg.NodeID, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
