// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 5 (docs/raft-patches.md in the Quorumbus repository): catch-up
// AppendEntries bounded by bytes as well as entries.

package raft

// replicationBatch returns how many entries one AppendEntries may carry and the byte
// bound on their data (0: none). With Config.ReplicationMaxEntries above
// MaxAppendEntries, a follower that is behind gets up to ReplicationMaxEntries small
// entries per round trip instead of MaxAppendEntries.
func (r *Raft) replicationBatch() (entries, bytes int) {
	c := r.config()
	if c.ReplicationMaxEntries > c.MaxAppendEntries {
		return c.ReplicationMaxEntries, c.ReplicationMaxBytes
	}
	return c.MaxAppendEntries, 0
}
