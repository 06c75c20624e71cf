package cluster

import (
	"errors"
	"time"
)

// A paused leader (SIGSTOP, a long GC pause, a frozen VM) keeps its sockets open: a call
// forwarded to it waits for the caller's whole deadline, and a send it may still apply
// when it wakes cannot be retried elsewhere (its outcome is unknown). A crashed leader
// refuses connections instead, so calls fail over at once. To treat a pause like a crash,
// a node that hosts a follower replica of the group asks that replica first:
//
//   - a follower that has heard from its leader within the leader lease knows the current
//     leader better than a hint from an earlier call (heardLeader);
//   - a follower that has not heard from its leader for longer than the lease expects an
//     election within the heartbeat timeout: calls wait for it (leaderSilent) rather than
//     go to a leader that may not answer, for at most silentPatience, after which they
//     are forwarded anyway (a follower cut off alone from a leader this node can reach).
//
// A node without a replica of the group has only hints and the replicas in turn.

// errLeaderSilent marks a call attempt not made because the leader went silent.
var errLeaderSilent = errors.New("cluster: the partition's leader has been silent past its lease; waiting for an election")

// contactWindow is how long a follower may go without hearing from its leader before
// the leader counts as silent: the leader lease, after which a leader that hears from no
// quorum steps down by itself.
func (l locator) contactWindow() time.Duration { return l.n.cfg.Raft.LeaderLeaseTimeout }

// silentPatience bounds how long a call waits for an election because the leader is
// silent: twice the election timeout after the heartbeat timeout.
func (l locator) silentPatience() time.Duration {
	t := l.n.cfg.Raft
	return t.HeartbeatTimeout + 2*t.ElectionTimeout
}

// Both read raft's LastContact, stamped by the real clock, hence time.Since.

// heardLeader is the leader of g that the local follower replica has heard from within
// the contact window, "" when there is no such replica or it has not.
func (l locator) heardLeader(g group) string {
	id := g.localView()
	if id == "" || id == l.n.cfg.NodeID {
		return ""
	}
	last, leads, _ := g.lastContact()
	if leads || last.IsZero() || time.Since(last) > l.contactWindow() {
		return ""
	}
	return id
}

// leaderSilent reports whether a call to target for g, begun at start, should wait for
// an election instead: the local follower replica has not heard from its leader (target,
// or none known) within the contact window, and the call has waited less than
// silentPatience.
func (l locator) leaderSilent(g group, target string, start time.Time) bool {
	if !g.isHosted() || target == l.n.cfg.NodeID || time.Since(start) >= l.silentPatience() {
		return false
	}
	if id := g.localView(); id != "" && id != target {
		return false
	}
	last, leads, _ := g.lastContact()
	return !leads && !last.IsZero() && time.Since(last) > l.contactWindow()
}
