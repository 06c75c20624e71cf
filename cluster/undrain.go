package cluster

import (
	"context"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// UndrainNode implements admin.Cluster: the node's draining mark is cleared, so
// placement counts it again and the metadata leader's leader balancing moves each
// group it prefers back to it, as after its restart. A node not draining is left as
// it is.
func (o *Ops) UndrainNode(ctx context.Context, id string) error {
	nd, err := o.knownNode(ctx, id)
	if err != nil {
		return err
	}
	if !nd.Draining {
		return nil
	}
	nd.Draining = false
	return o.n.store.Apply(ctx, &meta.PutNode{Node: nd})
}
