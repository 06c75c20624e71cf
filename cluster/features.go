package cluster

import "fmt"

// Data levels: the kinds of replicated entry a release reads, newest last. An entry of
// a newer kind is proposed only when every replica of its group runs on a node that
// gossips (gossip.Meta.Level) a level that reads it: during a rolling upgrade a
// follower of the older release would refuse to decode it and skip it, and its copy of
// the partition would differ from the others' for good.
const (
	// levelDeleteMessages reads fsm.OpDeleteMessages (batch delete).
	levelDeleteMessages = 1

	// dataLevel is the newest level this release reads.
	dataLevel = levelDeleteMessages
)

// dataLevel is the level this node gossips.
func (n *Node) dataLevel() int {
	if n.cfg.olderRelease {
		return 0
	}
	return dataLevel
}

// requireLevel returns an error wrapping ErrUnavailable (the client's ServerBusy: it
// retries) when a replica of one of groups is on a node that last gossiped a level below
// level, naming what needs it. A node gossip has not seen since this one started
// (down since before) is not held against it: an upgraded node that restarts reads
// the entry, and a node of the older release is never started again once the new one
// has written such entries (docs/operations.md, Upgrading).
func (rt *Router) requireLevel(groups []group, level int, what string) error {
	if rt.n.gossip == nil {
		return nil
	}
	for _, g := range groups {
		for _, id := range g.replicas {
			if m, ok := rt.n.gossip.LastSeen(id); ok && m.Level < level {
				return fmt.Errorf("%w: %s needs every replica of the entity on a release that has it, and node %s runs an older one; retry once it is upgraded", ErrUnavailable, what, id)
			}
		}
	}
	return nil
}
