package explorer

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// NodeSessions is Sessions read through a cluster node's router: its session list and
// the session state, without taking the session's lock (a consumer holding the session
// keeps it).
func NodeSessions(r *cluster.Router) Sessions { return nodeSessions{r} }

type nodeSessions struct{ r *cluster.Router }

func (s nodeSessions) ListSessions(ctx context.Context, t Target) ([]string, error) {
	ids, err := s.r.ListSessions(ctx, cluster.Address{Entity: t.Entity, Subscription: t.Subscription})
	return ids, notFound(err)
}

func (s nodeSessions) SessionState(ctx context.Context, t Target, id string) ([]byte, error) {
	st, err := s.r.SessionState(ctx, cluster.Address{Entity: t.Entity, Subscription: t.Subscription}, id)
	return st, notFound(err)
}

func notFound(err error) error {
	if errors.Is(err, fsm.ErrNotFound) || errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}
