// Package cluster owns a node's place in the cluster. Node is one type, its parts in
// files that each do one job:
//
//   - node.go: start-up (join or form the cluster, catch up, register, serve), the
//     reconciler that opens, configures and deletes the partition replicas placed on
//     this node, and Close.
//   - gossip.go: membership with hashicorp/memberlist (node ID, advertised cluster, AMQP
//     and admin addresses, zone, whether the node has cluster state), gossip over UDP
//     on the cluster port's number and memberlist's streams over the cluster port's mux.
//   - metagroup.go: the metadata Raft group (cluster/meta.State: namespace, entities,
//     rules, keys, node records, placement), formed by bootstrap-expect or grown by its
//     leader.
//   - membership.go: membership changes. The metadata leader records live nodes and
//     grows its own group (non-voters first, promoted once caught up, up to five voters
//     spread over zones), re-places the replicas of nodes dead past their grace period
//     and balances partition leadership; each partition group's leader moves its
//     group toward the placement one safe step at a time (add a non-voter, promote it
//     once caught up, then remove a dropped voter).
//   - placement.go: where the partitions of a new entity go (live nodes, draining
//     ones only when the others are too few, distinct zones first, least loaded,
//     preferred leaders rotating); a pure choice over candidates.
//   - replication.go: the replication factor kept: the metadata leader raises groups
//     placed on fewer than --replicas nodes once enough are alive, each group's leader
//     reports (gauge, log) whether its group is under-replicated, and a returning
//     node's Start waits until the groups that lack it have taken it.
//   - router.go, seam.go: the data-plane front door. Every operation names an entity;
//     the router picks the partition (SessionId, PartitionKey, MessageId under duplicate detection, or round-robin for sends,
//     the group ID inside lock tokens for settlements, the partition index in the top
//     bits of sequence numbers) and runs the operation's request (a cluster/wire type)
//     on it; seam.go keeps the operations that do more than one request (receives that
//     release what an abandoned caller locked, the change signal).
//   - route.go: the one owner of "where does group G run and who leads it" (group:
//     hosted here or not, leading here or not, the leader a local follower hears from,
//     hints from earlier calls); silent.go: a leader gone silent past its lease.
//   - remote.go, batch.go: the seam. A request runs on the local replica when it leads
//     its group, otherwise on the leader's node (peer.Call; sends to one peer batched,
//     peer.Multi), following leader changes until the caller's deadline, retrying only
//     what certainly did not apply or is idempotent (wire.Request.Idempotent).
//   - rpc.go: the node-to-node calls. peer is the typed client of one node (Call, Multi,
//     WaitChange, MetaApply, GroupStatus, Transfer, HandOver, RemoveNode, Digests,
//     MetaDigest, Cancel), serveWire the server. The protocol is cluster/wire: per
//     connection, the two nodes negotiate a version on route wire.RouteID of the
//     cluster port's RPC stream type (version 2: hand-written binary codec); a peer
//     of an older release closes that route, and the caller falls back to version 1,
//     net/rpc with gob on route 0 (wirev1.go, rpccodec.go), which this node also
//     serves to older callers. Typed errors cross the network as a bit per sentinel
//     of wireSentinels (append only) plus the details errors.As extracts.
//   - store.go: the admin API's store (metadata writes forwarded to the metadata leader,
//     read-your-writes, runtime counts); ops.go: the operator surface (admin.Cluster) and
//     the graceful stop; forward.go: auto-forwarding (S-FWD-1); idle.go: auto-delete on
//     idle (S-IDLE-1), run by the metadata leader; txn.go: Commit, a transaction's sends
//     and settlements applied in one fsm.Txn entry when they fall on one partition
//     group, by two-phase commit over the groups otherwise, with its recovery loop
//     (docs/guarantees.md § Transactions).
//
// Gossip suggests, the metadata group decides: placement and Raft membership change
// only through metadata commands proposed by the metadata leader, never straight from a
// gossip event, and a node is never removed automatically.
//
// Metrics (metrics.go): Node.Registry is a Prometheus registry of the node's own. Its
// collector runs on the scraping goroutine and reads, one at a time, the metadata
// (metaGroup.read), a copy of the parts map (Node.mu, released at once) and each
// replica's partition.Metrics and Stats; histograms are fed by the RPC layer and, as
// partition.Observer, by the partitions. CaughtUp (GET /readyz) asks leading nodes
// for their log index over the RPC.
//
// Imports: partition, partition/transport, fsm, cluster/wire, cluster/meta, cluster/admin (for its
// Store and Cluster types), hashicorp raft and memberlist, prometheus/client_golang.
// Never amqp:
// cmd/internal/bridge adapts the router to amqp.Backend.
//
// Goroutines, all tracked by Node.wg and stopped by Close (closing is closed first):
// the reconcile loop (kicked by metadata applies and gossip events, and every second);
// the metadata loop (leader duties, every second); the transaction recovery loop (every
// TxnRecoveryInterval, with one short goroutine per pass that cancels it at Close); the
// join loop (while --join is set);
// one forwarder per auto-forwarding source hosted here; the RPC server's two accept
// loops (versions 1 and 2), per accepted connection one serving goroutine, one writer
// and one goroutine per call in progress, per dialled connection a reader and a writer
// (all rpcLayer.wg); memberlist's own; raft's and each
// partition's (see partition's doc). A forwarded call whose caller gave up leaves one
// short goroutine that waits for the reply and releases what it locked.
//
// Lock order: Node.recMu (one reconcile pass at a time) before Node.mu; Node.mu only
// guards the parts map and is never held across a call into a partition, the metadata
// group, memberlist or the network; metaFSM.mu is taken inside metaGroup.read and never
// held while calling out; gossip.mu, rpcLayer.mu and Node.removedMu are leaves.
package cluster
