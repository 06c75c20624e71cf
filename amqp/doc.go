// Package amqp is Quorumbus's AMQP 1.0 server in the Azure Service Bus
// dialect (see docs/protocol.md): listener,
// SASL (ANONYMOUS, PLAIN, MSSBCBS), connection, session and link state with
// flow control, the $cbs and $management nodes, and the mapping of Service
// Bus operations onto a Backend that the broker (cluster) implements.
//
// Owns: everything on the wire. The bare message stays opaque bytes
// (Message.Raw); on delivery only header, delivery- and message-annotations
// (and application-properties after a modification) are rewritten.
//
// Must not import: fsm, partition, cluster or any hashicorp package; only
// the standard library, amqp/internal/{encoding,frames} and internal/sas (the SAS
// token rules the admin API shares). Errors reach the
// wire through one table (errors.go).
//
// Goroutine model (P2/P4/P5): per connection, an owner goroutine (conn.run /
// conn.loop) owns all connection, session and link state; a reader
// goroutine parses frames and hands them over a channel; a writer goroutine
// drains a bounded channel to the socket. Backend calls never run on the
// owner: each runs in a WaitGroup-tracked goroutine (conn.goFunc) and posts
// its result back as a closure the owner executes. Back-pressure: link
// credit bounds deliveries in flight to the Backend per link, the session
// window bounds frames, max-frame-size and max-message-size bound buffers,
// and MaxConnBuffered bounds the incomplete deliveries of one connection;
// MaxUnsettledPerLink/PerConn bound the peek-lock deliveries awaiting the
// client (unsettled.go) and MaxConnOutgoing the bytes waiting to be written to
// it (outbytes.go); at these bounds links wait rather than fail.
// Server.Close cancels everything and waits. Link resume (resume.go): the
// unsettled deliveries of a receiver that ends without closing wait in a
// table on the Server (its own mutex, taken by owner and goFunc goroutines)
// until a receiver with the same container-id and link name takes them over; a
// session receiver's suspended link keeps its session lock meanwhile. Every AuthCheckInterval the
// owner drops expired CBS claims and detaches the links they covered, and
// every ClaimRecheckInterval it re-checks its tokens against the rules in a
// goFunc goroutine (cbs.go).
//
// Monitoring: Server.Stats (stats.go) reads atomics that each connection's owner
// goroutine updates as links attach, detach and change credit; every AMQP error sent to a
// client passes through conn.refused, which counts it by condition and logs it with its
// TrackingId. cmd/quorumbus exports Stats to Prometheus; this package imports no metrics
// library.
//
// Imports: the standard library, its own internal/encoding and internal/frames (the
// codec and the performatives, on no AMQP library) and internal/sas. Never fsm,
// partition, cluster or hashicorp/* (test/deps_test.go): it knows nothing of Raft and
// defines the Backend interface it needs; cmd wires the cluster to it.
package amqp
