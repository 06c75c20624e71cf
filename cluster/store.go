package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

var _ admin.Store = (*Node)(nil)

// Apply proposes a metadata change (admin.Store). Creating a queue or topic places
// every partition on this node: placement across nodes is the multi-node cluster's
// reconciler's job, and the code path is the same. The call returns once the change is
// committed and the partitions it creates are open here, so a client may use an entity
// as soon as its creation is acknowledged.
func (n *Node) Apply(ctx context.Context, cmd meta.Command) error {
	switch c := cmd.(type) {
	case *meta.CreateQueue:
		if c.Replicas == nil {
			c.Replicas = n.placeHere(c.Properties.PartitionCount)
		}
	case *meta.CreateTopic:
		if c.Replicas == nil {
			c.Replicas = n.placeHere(c.Properties.PartitionCount)
		}
	}
	err := n.meta.propose(ctx, cmd)
	if errors.Is(err, ErrNotMetadataLeader) {
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	if err != nil {
		return err
	}
	return n.waitApplied(ctx)
}

// waitApplied waits until the partitions hosted here match the metadata (opened, and
// leading with the current entity configuration), so that a client may use a change as
// soon as it is acknowledged: the first send after a create meets no election, and a
// receiver of a new subscription finds it.
func (n *Node) waitApplied(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !n.reconcile(ctx) || !n.localLeaders() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the change is committed but its partitions are not serving yet: %v", admin.ErrUnavailable, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// localLeaders reports whether every partition hosted here leads its group (one-voter
// groups: each must be this replica, with its post-election barrier done).
func (n *Node) localLeaders() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, r := range n.parts {
		if !r.p.IsLeader() {
			return false
		}
	}
	return true
}

func (n *Node) placeHere(partitions int32) [][]string {
	if partitions < 1 {
		partitions = 1
	}
	out := make([][]string, partitions)
	for i := range out {
		out[i] = []string{n.cfg.NodeID}
	}
	return out
}

// Read runs fn on the local metadata replica (admin.Store).
func (n *Node) Read(ctx context.Context, fn func(s *meta.State)) error {
	n.meta.read(fn)
	return nil
}

// Runtime sums an entity's message counts over its partitions (admin.Store).
func (n *Node) Runtime(ctx context.Context, e admin.Entity) (admin.RuntimeCounts, error) {
	ent, err := n.resolve(e.Name)
	if err != nil {
		return admin.RuntimeCounts{}, err
	}
	var rc admin.RuntimeCounts
	var deferred int64
	for _, r := range ent.parts {
		st, err := r.p.Stats(ctx)
		if err != nil {
			return rc, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
		}
		for _, t := range st.Targets {
			if e.Subscription != "" && !strings.EqualFold(t.Target.Sub, e.Subscription) {
				continue
			}
			if t.Target.DLQ {
				rc.DeadLetter += t.Active + t.Deferred + t.Scheduled
			} else {
				rc.Active += t.Active
				rc.Scheduled += t.Scheduled
				deferred += t.Deferred // counted in the total only
			}
			rc.SizeBytes += t.Bytes
		}
		if e.Subscription == "" && len(st.Targets) == 0 {
			rc.SizeBytes += st.Bytes
		}
	}
	rc.Total = rc.Active + rc.Scheduled + rc.DeadLetter + deferred
	return rc, nil
}

// entity is a resolved queue or topic with the replicas of its partitions that run here.
type entity struct {
	name  string // display name
	kind  meta.EntityKind
	parts []*replica // by partition index; nil entries are partitions not hosted here
}

// resolve finds a queue or topic by name (case-insensitive) and its local partitions.
func (n *Node) resolve(name string) (*entity, error) {
	var (
		pl   meta.Placement
		ok   bool
		kind meta.EntityKind
	)
	n.meta.read(func(s *meta.State) {
		kind = s.Kind(name)
		pl, ok = s.Placement(name)
	})
	if !ok || kind == meta.KindNone {
		return nil, fmt.Errorf("%w: entity %q", fsm.ErrNotFound, name)
	}
	e := &entity{name: pl.Entity, kind: kind, parts: make([]*replica, len(pl.Partitions))}
	n.mu.RLock()
	for i, p := range pl.Partitions {
		e.parts[i] = n.parts[p.GroupID]
	}
	n.mu.RUnlock()
	for i, r := range e.parts {
		if r == nil {
			// Placed on another node; forwarding to it is the multi-node cluster's work.
			return nil, fmt.Errorf("%w: partition %d of %q is not hosted on this node", ErrUnavailable, i, pl.Entity)
		}
	}
	return e, nil
}

// ErrUnavailable: the operation cannot be served here now (partition not hosted or no
// leader); a retry may succeed.
var ErrUnavailable = errors.New("cluster: unavailable")
