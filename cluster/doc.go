// Package cluster owns a node's place in the cluster. Node is one type that wires the
// leaf packages the compiler keeps apart (test/deps_test.go), each with its doc.go:
//
//   - cluster/gossip: membership with hashicorp/memberlist (node ID, advertised cluster,
//     AMQP and admin addresses, zone, whether the node has cluster state), gossip over
//     UDP on the cluster port's number and memberlist's streams over the cluster port's
//     mux (Node.startGossip hands it the route).
//   - cluster/metagroup: the metadata Raft group (cluster/meta.State: namespace,
//     entities, rules, keys, node records, placement), formed by bootstrap-expect or
//     grown by its leader; Commit reaches the leader, here or over the cluster RPC.
//   - cluster/placement: where the partitions of a new entity go and which nodes raise
//     an under-replicated group (live nodes, draining ones only when the others are too
//     few, distinct zones first, least loaded, preferred leaders rotating); a pure
//     choice over a View, stdlib only.
//
// and its own rooms, each a type of its own (test/nodemethods_test.go keeps Node under
// 40 methods). Node is start-up, identity, lifetime (goFunc, Shutdown, Close) and the
// state the rooms share: the replicas hosted here (Node.parts), the locator (route.go)
// and the peers (rpc.go). Router (Node.Router) is the data plane, which
// cmd/internal/bridge adapts to amqp.Backend and the explorer reads sessions through;
// Store (Node.Store) is admin.Store and admin.Purger, Ops (Node.Ops) admin.Cluster,
// both wired into cluster/admin by cmd; the reconciler, the steward and the log engine
// are the node's own, unexported. Each owns its own state (the router its batchers and
// its per-entity round-robin counters,
// the reconciler its locks, forwarders and under-replication marks, the log engine the
// engine); Router, Store and logEngine copy the narrow fields they read, and the
// others (Router and Store for the peers) keep a pointer back to the node for the
// shared state.
//
//	                     Node
//	   ┌────────┬───────┬─┴──────┬───────────┬───────────┐
//	Router    Store    Ops    reconciler    steward    logEngine
//
// docs/architecture.md ("A tour of cluster/'s files") says what each file of the package
// does; this doc keeps to what the package owns, its invariants, goroutines and locks.
//
// Gossip suggests, the metadata group decides: placement and Raft membership change
// only through metadata commands proposed by the metadata leader, never straight from a
// gossip event, and a node is never removed automatically.
//
// Configuration (config.go): DefaultConfig is the one place the node's defaults live,
// the Raft ones (DefaultRaftConfig) and the log store (StorageConfig) included; a caller
// changes what it needs on a copy. Start fills in nothing: Config.Validate names every
// setting that cannot work, a zero left where a positive value is needed included. Only
// a nil Logger (slog.Default) and a nil Clock (the real clock) mean defaults. BenchConfig
// holds what benchmarks alone switch on.
//
// Metrics (metrics.go): Node.Registry is a Prometheus registry of the node's own. Its
// collector runs on the scraping goroutine and reads, one at a time, the metadata
// (metagroup.Group.Read), a copy of the parts map (Node.mu, released at once) and each
// replica's partition.Metrics and Stats; histograms are fed by the RPC layer and, as
// partition.Observer, by the partitions. CaughtUp (GET /readyz) asks leading nodes
// for their log index over the RPC.
//
// Imports: partition, partition/transport, fsm, fsm/rule, cluster/wire, cluster/meta,
// cluster/gossip, cluster/metagroup, cluster/placement, cluster/admin (for its Store and
// Cluster types), internal/durable, internal/hashilog, hashicorp/raft and go-hclog,
// prometheus/client_golang. Never amqp (test/deps_test.go): cmd/internal/bridge adapts
// the Router to amqp.Backend.
//
// Goroutines. Node.life is the node-lifetime context; Close cancels it (Node.closing
// is its Done channel) and waits on Node.wg. The node's own loops start through
// Node.goFunc, which runs them under Node.life on Node.wg: the reconcile loop (kicked by
// metadata applies and gossip events, and every second), the metadata loop (steward.run, leader
// duties, every second), the transaction recovery loop (Router's, every TxnRecoveryInterval), the
// join loop (gossip.KeepJoined, while --join is set) and the metadata-leader log
// (metagroup.WatchLeader). A call that asks several nodes at once (groupsEverywhere,
// CaughtUp, readiness) fans out on a WaitGroup of its own and waits for it before
// returning. Not through goFunc yet: one forwarder per auto-forwarding source hosted here
// (on Node.wg directly); the RPC layer's two accept loops (versions 1 and 2), per
// accepted connection one serving goroutine, one writer and one goroutine per call in
// progress, per dialled connection a reader and a writer (all rpcLayer.wg); the
// forwarded-send batcher's runs; short helpers of the seam (a remote wait, a receive's
// cancel, waitAny's watchers), each ending with its call or within seconds of Close.
// Outside the package: memberlist's and the gossip transport's (stopped by
// gossip.Close), the partition groups' Raft transport (partition/transport.Groups, closed
// by Close), raft's and each partition's (see partition's doc), and the one goroutine of
// the node's partition.LeadershipHub (Node.leaders), which tells every replica here of
// its leadership and which Close closes after the replicas. The package keeps no state
// outside a Node: two nodes in one process share nothing
// (test/walls_test.go, TestNoPackageLevelMutableState). The package's TestMain
// fails a run when any goroutine outlives the tests (go.uber.org/goleak), and
// TestNoUntrackedGoStatements when a file has more raw go statements than the ones listed
// above still use.
//
// Lock order: reconciler.mu (one reconcile pass at a time) before Node.mu; Node.mu only
// guards the parts map and is never held across a call into a partition, the metadata
// group, memberlist or the network; the metadata state's lock is taken inside
// metagroup.Group.Read and never held while calling out; gossip.Gossip's lock,
// rpcLayer.mu and steward.removedMu are leaves.
package cluster
