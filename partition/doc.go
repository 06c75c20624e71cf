// Package partition runs one replica of one entity partition: a hashicorp/raft group
// (raft v1.7.3) whose state machine is an fsm.FSM, with a log and stable store (the
// node's Engine, engine.go, with Config.LogStore "shared": one pebble database per node
// whose concurrent appends of all groups share one fsync; or one raft-boltdb raft.db per
// group, or raft-wal's wal/; logstore.go; behind raft.NewLogCache) and a
// FileSnapshotStore (retain 2), under <data>/partitions/<entity>/<n>/. The Engine runs
// one goroutine of its own (runCompactor), stopped by Engine.Close. It offers the typed API the
// cluster layer calls (Enqueue, Receive, Settle, RenewLock, Peek, Schedule, Cancel,
// sessions, Stats, UpdateEntity, Purge; Backup and RestoreBackup, backup.go, for a
// cluster backup) and does the leader-only work the pure fsm cannot:
// reading the clock, choosing lock-token salt, and proposing ticks.
//
// Monitoring (metrics.go): Metrics reads raft's indexes and the replica's atomic
// counters (commands, entries, snapshots); Config.Observer receives each entry's batch
// size and commit latency. No metrics library is imported here.
//
// Imports: fsm, internal/durable, hashicorp/raft and go-hclog, the log stores (pebble
// for the Engine, raft-boltdb/v2 with bbolt for its open options, raft-wal), and
// partition/transport in tests. Never amqp or cluster (test/deps_test.go): dependencies
// point one way, fsm <- partition <- cluster.
//
// # Write path and group commit
//
// Each API call becomes one fsm command handed to the proposer. The proposer takes
// every command waiting (up to Config.MaxBatchCmds / MaxBatchBytes, optionally lingering
// Config.Linger) into ONE fsm.Entry, stamps it with the leader's time, encodes it and
// calls raft.Apply without waiting. Up to Config.MaxInflight entries are in raft at once;
// while they are, new commands accumulate, so batches grow with load and one fsync
// carries many messages. raft runs with BatchApplyCh and MaxAppendEntries=16, so
// several entries also share one disk write and one AppendEntries RPC (a follower that
// is behind gets up to ReplicationMaxEntries per RPC, raft patch 5). The completer
// waits on each raft ApplyFuture in log order and answers each caller with its own
// fsm.Result only after the entry is committed on a quorum and applied here.
//
// A payload larger than Config.ChunkBytes is proposed first as fsm.BodyChunk commands
// (chunks.go), never two in one entry, so that other callers' commands go between them
// rather than wait behind one entry of the whole body; one small fsm.EnqueueUploaded then
// stores the message.
//
// # Time
//
// Entry.Now = max(leader wall clock, the proposer's previous stamp, fsm.Now()), so
// timestamps never go back in the log, even across leaders with skewed clocks (the fsm
// also keeps max(previous, Now)). Lock-token salt comes from crypto/rand on the leader.
//
// # Goroutines
//
// Per Partition, besides raft's own (main loop, FSM apply loop, snapshot loop, one
// replication and heartbeat goroutine per follower, and the NetworkTransport's listener
// and per-connection handlers):
//   - proposer: drains the proposal queue into entries and submits them to raft; it
//     runs only while proposals are queued (the first one starts it, an empty queue
//     ends it), and never two at once;
//   - completer: waits on submitted entries in order and answers their callers; it runs
//     only while entries are in flight (the proposer starts it);
//   - no goroutine of its own for leadership and deadlines (leadership.go): raft reports
//     its state changes through an observer on the channel of the node's LeadershipHub
//     (Config.Leadership; without one, a hub of the replica's own), read by one
//     goroutine for every replica of the node, which runs while one of them is open;
//     on gaining leadership a short-lived tracked goroutine runs a Barrier, then a
//     timer (Config.Clock) is armed at fsm.NextDeadline(); when it fires a short-lived
//     goroutine proposes fsm.Tick and re-arms after its answer, and every apply that
//     moves the deadline re-arms it; on losing leadership the timer is disarmed and
//     receive waiters are woken.
//
// All are tracked by one WaitGroup (started with its Go; TestNoRawGoStatements in
// test/ allows no raw go statement), so an idle group runs no goroutine of the
// partition's. Beside the replicas: the Engine's compactor (Engine.Close waits for it),
// the garbage collections Bodies asks for to reclaim disk (Bodies.Close waits for
// them) and the LeadershipHub's goroutine (the last replica to close ends it; its
// owner's Close waits for it). The package keeps no state outside these values.
//
// Close stops the proposer (none starts after it began; what is still queued is
// answered ErrClosed), lets the completer answer every entry already in raft (each one
// commits or fails when leadership is lost), then shuts raft, the transport and the
// store down. Callers blocked in Receive or
// AcceptSession long-polls wait on a broadcast that every apply which may make messages
// or sessions available (and every leadership change) fires. Each try first asks the
// leader's fsm, under the machine's lock, whether anything is available
// (fsm.Receivable, fsm.SessionAvailable) and proposes only if so: an empty poll costs no
// Raft entry. Available and SessionAvailable expose that question to remote waiters.
//
// # Lock order
//
// leaderState.mu (leadership.go) before the Clock's own locks (AfterFunc) and before
// startMu (a test clock may fire a timer inside AfterFunc, whose callback starts a
// tracked goroutine); nothing that waits for raft or the fsm runs under it. The
// machine's lock (machine.go), parkMu, startMu, the signal's lock and LeadershipHub.mu
// are leaves: the hub calls a replica only after releasing its lock.
//
// # Failover and locks (S-LOCK-10)
//
// Locks are replicated fsm state: token, LockedUntil and DeliveryCount are in every
// replica. A new leader neither drops nor extends them. After its Barrier it arms its
// timer from fsm.NextDeadline(), so a lock taken on the old leader expires at its
// LockedUntil through a Tick proposed by the new leader (the message becomes available
// again with its DeliveryCount incremented on the next delivery, S-LOCK-4/5), and until
// then the holder can settle or renew it with its token on the new leader. TTL expiry
// and scheduled activation continue the same way. Deadlines that passed during the
// election are applied by the new leader's first Tick, which may be late by up to the
// election time; they are never applied early.
//
// # Lock tokens
//
// Bytes 0..3 of every fsm.LockToken are the group id (fsm.Config.GroupID): GroupOfToken
// lets any node route a settlement or renewal that arrives with only the token.
package partition
