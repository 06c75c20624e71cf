package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/wire"
)

// Store is the admin API's view of a node (admin.Store and admin.Purger): metadata
// changes through the metadata leader with read-your-writes, reads of the local
// metadata replica, an entity's runtime counts and purges over its partitions. It is
// reached through Node.Store and lives as long as its node.
type Store struct {
	self string           // this node's ID
	meta *metagroup.Group // the metadata group: writes through its leader, local reads
	log  *slog.Logger
	// reconcile is the node's reconcile pass, which a change waits for so that the
	// replicas it places here are open when Apply returns.
	reconcile func(ctx context.Context) bool
	// rt runs the partition operations of counts, config syncs and purges.
	rt *Router
	// serveWait bounds how long Apply waits for the partitions of a committed change
	// (Config.ServeWait).
	serveWait time.Duration
	// n is the node, for the peers and their addresses (Node.peer, Node.addrOf,
	// Node.peerStatus) and a leadership transfer here (Node.transferLocal).
	n *Node
}

// newStore is the store of n, whose metadata group is open and whose router is made.
func newStore(n *Node) *Store {
	return &Store{self: n.cfg.NodeID, meta: n.meta, log: n.log, reconcile: n.rec.reconcile, rt: n.router, serveWait: n.cfg.ServeWait, n: n}
}

var _ admin.Store = (*Store)(nil)

// Store is the node's admin API store.
func (n *Node) Store() *Store { return n.store }

// Apply proposes a metadata change (admin.Store) through the metadata leader: here, or
// forwarded to it over the cluster RPC (metagroup.Group.Commit). Creating a queue or
// topic places its partitions on the cluster's nodes (placement.go). The call returns
// once the change is committed and applied on this node's replica (a read here right
// after sees it), and then, for Config.ServeWait at most, until the partitions serve it:
// for a new entity until every partition group has a leader, so a client may use an
// entity as soon as its creation is acknowledged, through any node; for a change of an
// existing entity until each partition has applied it.
//
// A committed change is acknowledged even when its partitions are not serving it within
// ServeWait (on a loaded cluster, or while a partition elects): reporting it as a
// retriable failure made the SDKs retry a create that had happened into 409 "already
// exists". Sends wait for a partition that has no leader yet (the router
// follows it until the send's deadline), and a partition's leader applies a changed
// configuration once it has one (the reconciler, within reconcileInterval).
func (sr *Store) Apply(ctx context.Context, cmd meta.Command) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	idx, err := sr.meta.Commit(ctx, cmd)
	if errors.Is(err, ErrNotMetadataLeader) || errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	if err != nil {
		return err
	}
	if err := sr.meta.WaitIndex(ctx, idx); err != nil {
		return fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	// Committed: from here on the change is acknowledged, whatever the partitions do.
	wctx, wcancel := context.WithTimeout(ctx, sr.serveWait)
	defer wcancel()
	if entity, err := sr.awaitServing(wctx, cmd, idx); err != nil && ctx.Err() == nil {
		sr.log.Warn("admin change committed and acknowledged before its partitions serve it: they will once they have a leader",
			"change", cmd.Op().String(), "entity", entity, "waited", sr.serveWait, "err", err)
	}
	return nil
}

// awaitServing waits until the partitions a committed change (at metadata index idx)
// creates or alters serve it, and returns the entity they belong to.
func (sr *Store) awaitServing(ctx context.Context, cmd meta.Command, idx uint64) (string, error) {
	sr.reconcile(ctx)
	entity, creates := meta.PartitionsChanged(cmd)
	if entity != "" && creates {
		if err := sr.waitEntity(ctx, entity); err != nil {
			return entity, fmt.Errorf("its partitions are not serving yet: %w", err)
		}
	}
	if entity != "" && !creates {
		// The entity's partitions apply the change before the caller hears of it, as on
		// a single node: the next operation through any node sees it (S-ENT-3).
		e, err := sr.rt.resolve(entity)
		if err != nil {
			return entity, nil // deleted meanwhile
		}
		for _, g := range e.parts {
			if _, err := sr.rt.on(g).do(ctx, &wire.SyncConfig{MetaIndex: idx}); err != nil {
				return entity, fmt.Errorf("partition %d has not applied it yet: %w", g.index, err)
			}
		}
	}
	return entity, nil
}

// applyRemote forwards cmd to the metadata leader (metagroup.Config.Forward).
func (sr *Store) applyRemote(ctx context.Context, leader string, cmd meta.Command) (uint64, error) {
	addr := sr.n.addrOf(leader)
	if addr == "" {
		return 0, fmt.Errorf("%w: metadata leader %q has no known address", ErrNotMetadataLeader, leader)
	}
	b, err := meta.EncodeEntry(&meta.Entry{Cmd: cmd})
	if err != nil {
		return 0, err
	}
	resp, err := sr.n.peer(addr).MetaApply(ctx, &wire.MetaApply{Entry: b, Timeout: timeLeft(ctx)})
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotMetadataLeader, err)
	}
	return resp.Index, resp.Err
}

// waitServing waits until every partition hosted here has a leader.
func (n *Node) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		err := n.Ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v: %w", err, ctx.Err())
		case <-t.C:
		}
	}
}

// waitEntity waits until every partition of an entity answers through its leader.
func (sr *Store) waitEntity(ctx context.Context, name string) error {
	e, err := sr.rt.resolve(name)
	if err != nil {
		return err
	}
	for _, g := range e.parts {
		if _, err := sr.rt.on(g).Stats(ctx); err != nil {
			return err
		}
		// Whichever replica won the first election, the group's preferred leader takes
		// over now, before clients use the entity, rather than through leader balancing
		// later under their load.
		sr.preferLeader(ctx, g)
		if _, err := sr.rt.on(g).Stats(ctx); err != nil {
			return err
		}
	}
	return nil
}

// preferLeader moves leadership of g to its preferred leader (its first replica) if
// another replica leads it, and waits a few seconds at most for the move. Best effort:
// leader balancing retries later.
func (sr *Store) preferLeader(ctx context.Context, g group) {
	if len(g.replicas) < 2 {
		return
	}
	want := g.replicas[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := sr.n.peerStatus(ctx, want, g.id)
	if err != nil || st.Leader == "" || st.Leader == want {
		return
	}
	if st.Leader == sr.self {
		err = sr.n.transferLocal(g.id, want)
	} else if addr := sr.n.addrOf(st.Leader); addr != "" {
		var remote error
		if remote, err = sr.n.peer(addr).Transfer(ctx, g.id, want); err == nil {
			err = remote
		}
	}
	if err != nil {
		sr.log.Debug("prefer leader", "group", g.id, "to", want, "err", err)
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if st, err := sr.n.peerStatus(ctx, want, g.id); err == nil && st.IsLeader {
			sr.rt.loc.hint(g.id, want)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Read runs fn on the local metadata replica (admin.Store).
func (sr *Store) Read(ctx context.Context, fn func(s *meta.State)) error {
	sr.meta.Read(fn)
	return nil
}

// Runtime sums an entity's message counts over its partitions (admin.Store). AccessedAt
// is the latest activity the partitions recorded (the fsm's LastSend and LastReceive, as
// auto-delete on idle reads them, idle.go): for a queue its sends and receiver activity,
// for a topic its sends and the receiver activity of every subscription, for a
// subscription its receiver activity. Reading these counts records nothing.
func (sr *Store) Runtime(ctx context.Context, e admin.Entity) (admin.RuntimeCounts, error) {
	ent, err := sr.rt.resolve(e.Name)
	if err != nil {
		return admin.RuntimeCounts{}, err
	}
	var rc admin.RuntimeCounts
	var deferred int64
	var accessed int64 // Unix ms: latest replicated send or receiver activity
	for _, g := range ent.parts {
		st, err := sr.rt.on(g).Stats(ctx)
		if err != nil {
			return rc, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
		}
		if e.Subscription == "" {
			accessed = max(accessed, st.LastSend)
		}
		for _, t := range st.Targets {
			if e.Subscription != "" && !strings.EqualFold(t.Target.Sub, e.Subscription) {
				continue
			}
			accessed = max(accessed, t.LastReceive)
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
	if accessed > 0 {
		rc.AccessedAt = time.UnixMilli(accessed)
	}
	return rc, nil
}

// ErrUnavailable: the operation cannot be served now (no leader, node unreachable); a
// retry may succeed.
var ErrUnavailable = errors.New("cluster: unavailable")
