// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 4 (docs/raft-patches.md in the Quorumbus repository): quiescent
// groups. A leader whose log is committed and known committed on every follower, with
// nothing in flight, and nothing new for Config.QuiesceAfter, tells its followers so
// with an AppendEntries marked Quiesce, and once each has answered goes quiet: no
// heartbeats, no commit-timeout appends, no lease checks. A follower that got the mark
// with its log matching the leader's stops its election timer. Anything the leader is
// asked to do (apply, verify, change the configuration, transfer leadership, restore)
// wakes it; its next AppendEntries with entries or a new commit index wakes the
// followers. A follower woken by nothing new stays quiet while its leader is awake:
// it does not watch the leader then, which only the node-level watcher (Wake) covers. Failure detection moves out of
// the group: whoever watches the nodes calls Wake on a follower whose leader's node is
// gone or unreachable, and the follower's election timer runs again from then.

package raft

import (
	"sync"
	"sync/atomic"
	"time"
)

// quiescence is a server's quiet state: a leader's or a follower's.
type quiescence struct {
	mu         sync.Mutex
	quiet      bool          // owner: mu
	wake       chan struct{} // closed when the quiet period ends; owner: mu
	lastActive time.Time     // leader: the last time it was asked to do something; owner: mu
}

// Quiet reports whether this server is quiescent (a quiet leader or follower).
func (r *Raft) Quiet() bool {
	r.quiesce.mu.Lock()
	defer r.quiesce.mu.Unlock()
	return r.quiesce.quiet
}

// Wake ends a quiet period: a leader resumes its heartbeats, commit-timeout appends and
// lease checks (its next AppendEntries wakes the followers); a follower resumes its
// election timer, counting from its last contact with the leader, so that it campaigns
// soon unless the leader speaks. It does nothing to a server that is not quiet.
func (r *Raft) Wake() {
	r.quiesce.mu.Lock()
	defer r.quiesce.mu.Unlock()
	r.quiesce.lastActive = time.Now()
	if r.quiesce.quiet {
		r.quiesce.quiet = false
		close(r.quiesce.wake)
	}
}

// quietState returns whether this server is quiet and, if so, the channel its waking
// closes.
func (r *Raft) quietState() (bool, <-chan struct{}) {
	r.quiesce.mu.Lock()
	defer r.quiesce.mu.Unlock()
	return r.quiesce.quiet, r.quiesce.wake
}

// goQuiet makes this server quiet and returns the channel its waking closes.
func (r *Raft) goQuiet() <-chan struct{} {
	r.quiesce.mu.Lock()
	defer r.quiesce.mu.Unlock()
	if !r.quiesce.quiet {
		r.quiesce.quiet = true
		r.quiesce.wake = make(chan struct{})
	}
	return r.quiesce.wake
}

// idleFor reports how long the leader has not been asked to do anything.
func (r *Raft) idleFor() time.Duration {
	r.quiesce.mu.Lock()
	defer r.quiesce.mu.Unlock()
	return time.Since(r.quiesce.lastActive)
}

// followerQuiesce runs on a follower's main thread after it accepted AppendEntries a,
// whose processing moved its commit index from commitBefore: the leader's quiesce mark
// makes it quiet when its log ends where the leader's does; an AppendEntries that
// brings entries or a later commit index wakes it. Heartbeats and the leader's
// commit-timeout appends that bring nothing new leave it as it is: some may still be on
// their way when the follower took the mark, before the leader went quiet.
func (r *Raft) followerQuiesce(a *AppendEntriesRequest, commitBefore uint64) (quiet bool) {
	switch {
	case a.Quiesce:
		if len(a.Entries) == 0 && r.getLastIndex() == a.PrevLogEntry && r.getCommitIndex() == a.PrevLogEntry {
			r.goQuiet()
			return true
		}
	case len(a.Entries) > 0 || r.getCommitIndex() != commitBefore:
		r.Wake()
	}
	return false
}

// canQuiesce reports whether the leader may go quiet: nothing in flight, everything
// committed, every follower sent everything, no configuration change or leadership
// transfer under way, and nothing asked of it for QuiesceAfter. Main thread only.
func (r *Raft) canQuiesce(after time.Duration) bool {
	if after <= 0 || r.getLeadershipTransferInProgress() || r.leaderState.inflight.Len() > 0 {
		return false
	}
	last := r.getLastIndex()
	if r.getCommitIndex() != last || r.configurations.latestIndex != r.configurations.committedIndex {
		return false
	}
	if r.idleFor() < after {
		return false
	}
	for _, s := range r.leaderState.replState {
		if atomic.LoadUint64(&s.nextIndex) != last+1 {
			return false
		}
	}
	return true
}

// sendQuiesce sends every follower the quiesce mark: an AppendEntries without entries
// whose previous entry is the leader's last, with the commit index. It reports whether
// every follower accepted it with a log that ends there and answered that it went
// quiet (a follower of another release does not, and keeps the group awake). Not on
// the main thread.
func (r *Raft) sendQuiesce(peers []Server, term, last, lastTerm, commit uint64) bool {
	type answer struct{ ok bool }
	answers := make(chan answer, len(peers))
	for _, peer := range peers {
		peer := peer
		go func() {
			req := &AppendEntriesRequest{
				RPCHeader:         r.getRPCHeader(),
				Term:              term,
				Leader:            r.trans.EncodePeer(r.localID, r.localAddr),
				PrevLogEntry:      last,
				PrevLogTerm:       lastTerm,
				LeaderCommitIndex: commit,
				Quiesce:           true,
			}
			var resp AppendEntriesResponse
			err := r.trans.AppendEntries(peer.ID, peer.Address, req, &resp)
			answers <- answer{err == nil && resp.Success && resp.Quiet && resp.Term == term && resp.LastLog == last}
		}()
	}
	ok := true
	for range peers {
		if !(<-answers).ok {
			ok = false
		}
	}
	return ok
}
