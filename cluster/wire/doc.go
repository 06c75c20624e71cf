// Package wire is the node-to-node protocol: what one node asks another and how it
// travels. It owns
//
//   - the operations on a partition, one type each (Enqueue, Receive, Settle, ...,
//     TxnForget; ops.go): each runs itself on a *partition.Partition (Request.Run),
//     says whether it may be applied again after an attempt whose outcome is unknown
//     (Idempotent) and writes and reads its own fields. Op numbers them, append only.
//     Adding an operation is one type here, one partition method and one router method.
//   - the other calls a node serves its peers (msgs.go: Multi, Wait, MetaApply,
//     GroupStatus, Transfer, Digests, MetaDigest, CancelCall; backup.go: Backup, the
//     chunked steps of a partition's backup or restore) and their replies,
//     numbered by Method, append only; Result and Error (result.go) carry outcomes.
//   - the codec (codec.go): hand-written append and decode functions over the field
//     encoding of internal/binenc (varints, length-prefixed strings), shared with the
//     fsm's codec, no reflection. fsm values travel as fsm entries
//     (fsm.AppendEntry), whose encoding the fsm keeps stable across releases. Decoders
//     return ErrBadMessage on truncated, unknown or malformed input and never panic;
//     a collection's length is checked against the bytes left before anything is
//     allocated. Golden files for every message are in cluster/testdata/wire/v2
//     (go test ./cluster/wire -update).
//   - the connection (conn.go): version negotiation (Handshake, Accept), then frames
//     (a 4-byte length, kind, sequence number, method or status, body) multiplexing
//     any number of concurrent calls (Client, Serve); writes of concurrent calls share
//     one syscall (BatchWriter).
//
// Versions: version 1 is net/rpc with gob on route 0 of the cluster port's RPC stream
// type (partition/transport.TypeRPC), frozen in cluster/wirev1.go for nodes of older
// releases. From version 2 on, a caller dials route RouteID and offers the versions it
// speaks; the callee answers the highest both speak. A node of an older release has
// no such route: its transport closes the connection unread, and the caller dials
// route 0 and speaks version 1 to it. A release that changes an encoding adds a version
// (and keeps reading the older ones while it may meet nodes speaking them).
//
// Errors cross the wire as Error: the message, a bit per sentinel of the caller's table
// and the fields of the error types callers extract with errors.As. The cluster owns the
// table (an ErrorCodec); this package only carries the bits.
//
// Imports: fsm (value types and the entry codec), partition (Run), the standard
// library. Never the root cluster package (which imports this one), cluster/meta,
// cluster/admin, amqp, reflect, encoding/gob or net/rpc (test/deps_test.go).
//
// Goroutines: a Client runs one reading and one writing goroutine; Serve runs in its
// caller's goroutine, with one writing goroutine and one goroutine per call in
// progress. All join the WaitGroup their caller passes and end when the connection
// closes.
package wire
