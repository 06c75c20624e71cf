// Package fsm is the replicated state machine of one entity partition: a queue
// partition, or a topic partition together with the same partition of each of its
// subscriptions. It owns messages and their states (available, locked, deferred,
// scheduled, dead-lettered), lock tokens, sessions and their state, duplicate-detection
// history, the deadline index (lock expiry, message expiry, scheduled activation,
// session lock expiry, history pruning), and the binary encodings of commands (Entry)
// and of snapshots.
//
// The fsm is pure (P1 in docs/principles.md): every replica that applies the same entries
// reaches the same state, byte for byte (Digest). It reads no clock, disk, network,
// environment or randomness; time enters only as Entry.Now, and the fsm clock is the
// largest Now applied so far. It never depends on map iteration order.
//
// Imports: the standard library but os, net, time, math/rand, crypto/rand, sync and
// syscall (purity_test.go checks the same of fsm/rule and internal/binenc), and those
// two: fsm/rule, and internal/binenc, the field encoding its codecs share with
// cluster/wire. Never partition, cluster, amqp or hashicorp/* (test/deps_test.go).
//
// Goroutines: none. An FSM is owned by one goroutine (the partition's raft apply loop);
// queries run on that goroutine or under the caller's lock.
//
// The rules it implements are numbered in docs/semantics.md and cited next to
// the code; docs/fsm.md describes the guarantees, the time model, the lock token layout,
// the memory cost per message and the snapshot format.
package fsm
