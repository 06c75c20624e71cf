package cluster

import (
	"context"
	"fmt"
)

// SyncMeta waits until this node's metadata replica has applied everything the
// metadata leader had applied when asked, so a lookup after it sees every change
// acknowledged before the call, whichever node made it (read-your-writes across nodes:
// a key created through n1 is known on n2 at once). It costs one RPC to the metadata
// leader; on the leader itself, nothing. Callers use it only for a lookup that missed,
// before they refuse: a SAS token naming a key this node does not know yet.
func (n *Node) SyncMeta(ctx context.Context) error {
	if n.meta.isLeader() {
		return nil
	}
	leader := n.meta.leader()
	if leader == "" {
		return fmt.Errorf("%w: the metadata group has no leader", ErrUnavailable)
	}
	st, err := n.peerStatus(ctx, leader, metaGroupID)
	if err != nil {
		return err
	}
	return n.meta.waitIndex(ctx, st.Applied)
}
