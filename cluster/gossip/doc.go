// Package gossip says which nodes are alive and what each advertises (node ID, cluster,
// AMQP and admin addresses, zone, whether it has cluster state, the incarnation of its
// data directory, whether it is stopping), with hashicorp/memberlist. It suggests; the metadata group decides:
// package cluster changes placement and Raft membership only through metadata
// commands, never straight from a gossip event.
//
// Gossip packets travel over UDP on the cluster port's host and number, memberlist's
// streams over a stream layer of the cluster port (Config.Streams), so a node needs one
// port number for everything. With Config.Key every packet and stream is sealed.
//
// Goroutines: memberlist's own; two of the transport (the UDP reader and the stream
// acceptor), tracked by its WaitGroup and stopped by Close; KeepJoined runs on its
// caller's goroutine until its context ends. Config.Changed is called on memberlist's
// event goroutine and must not block.
//
// Lock order: Gossip.mu is a leaf, never held while calling out.
//
// Imports: hashicorp/memberlist and the standard library; never a Raft group
// (hashicorp/raft), fsm, partition or cluster/meta (test/deps_test.go).
package gossip
