package cluster

import (
	"context"
	"fmt"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
)

var _ admin.MetaSyncer = (*Store)(nil)

// SyncMeta (admin.MetaSyncer) waits until this node's metadata replica has applied
// everything the metadata leader had applied when asked, so a lookup after it sees
// every change acknowledged before the call, whichever node made it (read-your-writes
// across nodes: a key created through n1 is known on n2 at once). It costs one RPC to
// the metadata leader; on the leader itself, nothing. Callers (the admin API, the
// bridge's SAS checks) use it only for a lookup that missed, before they refuse: a SAS
// token naming a key this node does not know yet.
func (sr *Store) SyncMeta(ctx context.Context) error {
	if sr.meta.IsLeader() {
		return nil
	}
	leader := sr.meta.Leader()
	if leader == "" {
		return fmt.Errorf("%w: the metadata group has no leader", ErrUnavailable)
	}
	st, err := sr.n.peerStatus(ctx, leader, metagroup.ID)
	if err != nil {
		return err
	}
	if err := sr.meta.WaitIndex(ctx, st.Applied); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}
