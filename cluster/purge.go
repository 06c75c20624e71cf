package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/admin"
)

var _ admin.Purger = (*Node)(nil)

// Purge removes every message of a queue (its dead-letter sub-queue included), of one
// subscription (e.Subscription set), or of every subscription of a topic, and returns
// how many (admin.Purger: POST .../$purge, qbctl queue purge). Scheduled and deferred
// messages go too; sessions keep their state.
func (n *Node) Purge(ctx context.Context, e admin.Entity) (int64, error) {
	ent, err := n.resolve(e.Name)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, g := range ent.parts {
		p := n.on(g) // on the group's leader, wherever it runs
		res := p.do(ctx, &CallReq{Op: opStats})
		if res.err != nil {
			return total, fmt.Errorf("%w: %v", admin.ErrUnavailable, res.err)
		}
		for _, t := range res.Stats.Targets {
			if e.Subscription != "" && !strings.EqualFold(t.Target.Sub, e.Subscription) {
				continue
			}
			c, err := p.Purge(ctx, t.Target)
			if err != nil {
				return total, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
			}
			total += int64(c)
		}
	}
	return total, nil
}
