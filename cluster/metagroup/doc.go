// Package metagroup runs this node's replica of the metadata Raft group: the
// namespace, its entities and their properties, rules, SAS keys, node records and
// placement (cluster/meta.State), replicated over hashicorp/raft on the metadata voters
// (at most five; package cluster grows the group). Reads are served from the local
// replica (Read, under its read lock); writes go through the leader: Commit proposes
// here when this node leads, or hands the command to the leader's node through
// Config.Forward, retrying while no leader is known.
//
// The leader decides everything that depends on time or chance and writes it into the
// entry: the timestamp (Config.Clock) and the placement of a new entity's partitions
// (Config.Place). Commands are validated before they enter the log, so that applying
// one depends on the state alone and a later release replays this log (P1, P3).
//
// Goroutines: raft's own (see hashicorp/raft), stopped by Close; WatchLeader runs on its
// caller's goroutine until its context ends. Config.Changed runs on raft's apply
// goroutine.
//
// Lock order: metaFSM.mu is taken inside Read, ProposeIndex (to stamp the entry) and the
// FSM's Apply/Snapshot/Restore, and is never held while calling out: Read's fn must not
// call back into the group.
//
// Imports: cluster/meta (and through it fsm's value types), hashicorp/raft and
// raft-boltdb; never partition or cluster/gossip (test/deps_test.go).
package metagroup
