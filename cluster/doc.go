// Package cluster owns a node's place in the cluster: the metadata Raft group (the
// namespace, its entities, rules, keys and partition placement, as cluster/meta.State),
// the partition replicas the placement puts on this node (opened, reconfigured and
// deleted to match the metadata), routing of every data-plane operation to the partition
// that owns it (router.go: SessionId or PartitionKey or round-robin for sends, lock tokens
// carrying the group ID for settlements, partition index in the top bits of sequence
// numbers), and the store behind the admin API (store.go).
//
// Today a node is a one-voter cluster: the metadata group and every partition have this
// node as their only replica, on the same code path a multi-node cluster will use
// (membership, placement across nodes and forwarding to remote leaders are later work).
//
// Imports: partition, fsm, cluster/meta, cluster/admin (for its Store types), hashicorp
// raft. Never amqp: cmd/internal/bridge adapts the router to amqp.Backend.
//
// Goroutines: the reconcile loop (one per node, started by Start, stopped by Close),
// woken by the metadata group's apply; one writer per forwarding-RPC connection
// (rpccodec.go), ended when the connection closes; plus whatever raft and each partition
// run (see partition's doc). Lock order: Node.mu is never held across a call into a partition or
// the metadata group.
package cluster
