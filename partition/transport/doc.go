// Package transport multiplexes every Raft group of a node, and any other cluster stream,
// over one TCP listener (docs/design-notes.md §1).
//
// A dialler opens a plain TCP connection and writes a 5-byte header before the stream
// begins: one type byte (TypeRaft, TypeRPC, ...) and the big-endian uint32 id of the
// route (for TypeRaft, the partition's group id). The acceptor reads the header with a
// deadline and hands the connection to the Layer registered for that (type, id); each
// Layer has its own accept channel and implements raft.StreamLayer, so a
// raft.NetworkTransport per group sits on it unchanged. Every node uses the same address
// for all its groups.
//
// With Config.TLS the connection is first wrapped in mutual TLS (both directions), and
// the header travels inside it: a process without a cluster certificate cannot name a
// route, so it cannot reach Raft, forwarding or gossip streams.
//
// What it owns: the listener, the header, routing, and the connections it hands out
// (a Layer closes every connection it dialled or accepted when it is closed, so a group
// that shuts down really disappears from the network).
//
// Groups (groups.go) is the Raft transport of every partition group of a node: one
// connection to each peer node carries every group's RPCs, each frame naming its group;
// heartbeats of the groups one node leads and the other follows travel as one frame
// (beats.go); a pipeline (pipeline.go) keeps up to GroupsConfig.Pipeline AppendEntries
// of a group in flight over that connection, and the receiving side hands a group's
// AppendEntries to its raft in the order they arrived. When a peer's connection fails,
// a probe tells a gone peer (refused, or no transport behind its port) from a slow one,
// and the groups it led elect at once (GroupTransport.SetPeerDown). Its settings start
// from DefaultGroupsConfig, the one place their defaults live; NewGroups only checks
// them (GroupsConfig.Validate), as Listen does a Config (DefaultConfig; nil: the
// defaults).
//
// Imports: the standard library, hashicorp/raft (the StreamLayer and Transport
// interfaces and the RPC types Groups carries), go-msgpack (NetworkTransport's codec,
// which Groups' frames use too) and go-hclog. It must not import fsm, partition,
// cluster or amqp (test/deps_test.go).
//
// Goroutines: Mux runs one accept loop, plus one short-lived goroutine per incoming
// connection while its header is read (bounded by Config.HandshakeTimeout), all on
// Mux.wg; Mux.Close stops the loop, closes every Layer and waits for them. Groups runs
// two accept loops (connections, snapshots), per connection a reader, a writer and a
// heartbeat loop, per pipeline its answer reader, one goroutine per incoming snapshot,
// per incoming RPC that is not a heartbeat, and per probe of a failed peer, all on
// Groups.wg through Groups.goTracked (or its Go), which Groups.Close waits for after
// closing every group and connection. No raw go statement (test/walls_test.go) and no
// package-level state: the frames' encoders are each Groups' own.
//
// Locks: Groups.mu guards the maps of groups, peers and connections; GroupTransport.mu
// and conn.mu guard their own fields. Each is held for short sections, never while
// waiting for a peer or a group's raft.
package transport
