// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 3 (docs/raft-patches.md in the Quorumbus repository): the leader
// sends new entries to its followers while it writes them to its own log.

package raft

import "sync"

// pendingLogs holds the entries the leader is writing to its log store, so that the
// replication goroutines can send them before the write is durable. The leader counts
// itself in the commit quorum only once StoreLogs returned (dispatchLogs).
type pendingLogs struct {
	mu   sync.RWMutex
	logs []*Log // consecutive indexes; owner: mu
}

func (p *pendingLogs) set(logs []*Log) {
	p.mu.Lock()
	p.logs = logs
	p.mu.Unlock()
}

// get copies entry index into out; false when it is not pending.
func (p *pendingLogs) get(index uint64, out *Log) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.logs) == 0 || index < p.logs[0].Index || index > p.logs[len(p.logs)-1].Index {
		return false
	}
	*out = *p.logs[index-p.logs[0].Index]
	return true
}

// getLogForReplication reads entry index for a follower: a pending one of this leader's,
// or one from the log store.
func (r *Raft) getLogForReplication(index uint64, out *Log) error {
	if r.pending.get(index, out) {
		return nil
	}
	return r.logs.GetLog(index, out)
}
