package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/wire"
)

var _ admin.Purger = (*Store)(nil)

// Purge removes every message of a queue (its dead-letter sub-queue included), of one
// subscription (e.Subscription set), or of every subscription of a topic, and returns
// how many (admin.Purger: POST .../$purge, qbctl queue purge). Scheduled and deferred
// messages go too; sessions keep their state.
func (sr *Store) Purge(ctx context.Context, e admin.Entity) (int64, error) {
	ent, err := sr.rt.resolve(e.Name)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, g := range ent.parts {
		p := sr.rt.on(g) // on the group's leader, wherever it runs
		st, err := p.Stats(ctx)
		if err != nil {
			return total, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
		}
		for _, t := range st.Targets {
			if e.Subscription != "" && !strings.EqualFold(t.Target.Sub, e.Subscription) {
				continue
			}
			r, err := p.do(ctx, &wire.Purge{Target: t.Target})
			if err != nil {
				return total, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
			}
			total += r.Count
		}
	}
	return total, nil
}
