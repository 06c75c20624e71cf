package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/partition"
)

// Clock is the time source of the node's own decisions (timestamps proposed to the
// metadata group, the auto-delete-on-idle check). Nil in Config means the real clock. A
// Clock that also implements partition.Clock (AfterFunc) is the partitions' clock too,
// so that a test can move every timestamp the node writes.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// RaftConfig holds the Raft settings shared by every group the node runs: its timings,
// how long an idle partition group waits before it goes quiet, and how many appends its
// leader pipelines. Tests shorten the timings; production keeps the defaults. Where the
// log is kept is StorageConfig's; the switches that only benchmarks flip are
// BenchConfig's.
type RaftConfig struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// PartitionCommitTimeout is the partition groups' CommitTimeout (0: CommitTimeout).
	// hashicorp/raft's leader sends each follower an AppendEntries that often even with
	// nothing new, which is how a follower learns that the last entries were committed;
	// for an idle group it is the largest periodic cost after heartbeats. The metadata
	// group keeps CommitTimeout: every node reads its state.
	PartitionCommitTimeout time.Duration
	// QuiesceAfter lets an idle partition group go quiet after this long without a
	// proposal (partition.Config.QuiesceAfter, raft patch 4): no heartbeats or timers
	// until the next one; the node wakes the quiet followers of a leader gossip
	// declares dead (reconcile.go, wakeOrphans). Zero: never quiet. The metadata group
	// never goes quiet.
	QuiesceAfter time.Duration
	// Pipeline is how many AppendEntries a partition group's leader keeps in flight to
	// each follower (raft's pipelined replication; transport.GroupsConfig.Pipeline,
	// partition.Config.Pipeline); under 2, one at a time, as earlier releases. The
	// metadata group replicates one at a time.
	Pipeline int
}

// StorageConfig is where and how the node's partition replicas keep their Raft logs.
type StorageConfig struct {
	// LogStore is the Raft log store of the partition replicas this node creates
	// (partition.Config.LogStore): partition.LogStoreShared ("" too: the node's one log
	// engine, logengine.go), LogStoreBolt or LogStoreWAL; a replica keeps the store it
	// was created with. The metadata group is on bolt.
	LogStore string
	// NoSync skips fsync of Raft logs. Unsafe (S-DUR-1 no longer holds); tests only.
	NoSync bool
}

// BenchConfig holds switches that bring back how earlier releases worked, for benchmarks
// that compare the two; production leaves them off.
type BenchConfig struct {
	// WholeBodies sends every message body as one Raft entry of its partition, as
	// releases before chunked bodies did (partition.Config.ChunkBytes 0), instead of
	// chunking the large ones.
	WholeBodies bool
	// PerGroupTransport gives every partition group a raft.NetworkTransport of its own
	// (pooled connections per group, as releases before transport.Groups), instead of
	// the node's one connection per peer for all groups.
	PerGroupTransport bool
}

// DefaultQuiesceAfter is how long a partition group stays idle before it goes quiet.
const DefaultQuiesceAfter = 2 * time.Second

// DefaultRaftConfig is the production Raft configuration.
func DefaultRaftConfig() RaftConfig {
	return RaftConfig{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		// A follower applies the last entries of a burst up to 1 s after its
		// leader; nothing is read from a follower, and every later entry carries
		// the commit index at once.
		PartitionCommitTimeout: 500 * time.Millisecond,
		Pipeline:               partition.DefaultPipeline,
		QuiesceAfter:           DefaultQuiesceAfter,
	}
}

func (t RaftConfig) apply(rc *raft.Config) {
	rc.HeartbeatTimeout = t.HeartbeatTimeout
	rc.ElectionTimeout = t.ElectionTimeout
	rc.LeaderLeaseTimeout = t.LeaderLeaseTimeout
	rc.CommitTimeout = t.CommitTimeout
}

// Config is one node's configuration.
type Config struct {
	NodeID      string // stable identity, the same Raft ServerID in every group
	DataDir     string
	ClusterAddr string // listen address of the cluster port (all Raft groups, gossip, RPC)
	Namespace   string

	// AdvertiseAddr is the HOST:PORT peers dial to reach the cluster port; a DNS name is
	// kept as a name in Raft configurations, so a full restart with new IPs still
	// elects. Empty: ClusterAddr (which must then not be a wildcard).
	AdvertiseAddr string
	// AMQPAddr and AdminAddr are the client-facing addresses this node advertises to its
	// peers (shown by qbctl cluster status). Informational.
	AMQPAddr  string
	AdminAddr string
	// Join lists cluster addresses (HOST:PORT, names re-resolved on every try) of nodes
	// to join; retried with backoff until one answers.
	Join []string
	// BootstrapExpect is how many nodes form a new cluster: once this many see each
	// other and none has cluster state, they form it, exactly once. 1 is a single node;
	// at least 1.
	BootstrapExpect int
	// Zone is the failure domain (Kubernetes topology zone); replicas of a partition and
	// metadata voters are spread over zones where possible.
	Zone string
	// Replicas is the replication factor of each partition: a new group gets as many
	// live nodes, up to Replicas, and is raised to Replicas once enough are alive. At
	// least 1.
	Replicas int
	// DeadNodeGrace is how long a node may be unreachable before the metadata leader
	// re-places its replicas on other nodes. The node itself is never removed
	// automatically (qbctl node remove does it). Above zero.
	DeadNodeGrace time.Duration
	// RebalanceMoves bounds how many partition groups the metadata leader moves a
	// replica of at once, to spread the replicas evenly over the nodes (rebalance.go)
	// or over zones (zones.go): each move copies a group's state to a new node. 0 turns
	// these automatic moves off; re-placing a dead or removed node's replicas and
	// raising under-replicated groups are not bounded by it.
	RebalanceMoves int

	// DefaultKeyName and DefaultKey create the namespace's first shared access key
	// (rights Manage, Send, Listen) when the namespace has none. An empty DefaultKey is
	// generated.
	DefaultKeyName string
	DefaultKey     string

	// ReadyMaxLag is how many log entries a replica on this node may be behind its
	// leader's log for CaughtUp (GET /readyz) to still count it as caught up
	// (DefaultReadyMaxLag); 0: none at all.
	ReadyMaxLag uint64
	// ReadyTimeout bounds the questions CaughtUp asks other nodes (asked together, not
	// one after another), so that /readyz answers within a probe's timeout even when a
	// peer is paused or slow (DefaultReadyTimeout). Above zero.
	ReadyTimeout time.Duration
	// TLS, when set, is mutual TLS on every connection of the cluster port (Raft,
	// forwarding RPC, gossip streams): peers without a certificate this config accepts
	// cannot reach any of them (internal/certs builds it from files or a shared secret).
	TLS *tls.Config
	// GossipKey, when set (16, 24 or 32 bytes), encrypts and authenticates memberlist's
	// packets and streams (the primary key of memberlist's Keyring): gossip over UDP
	// does not go through TLS. Nodes with another key cannot join or gossip.
	GossipKey []byte
	// GossipAcceptKeys are further keys memberlist opens packets and streams with but
	// never seals them with (secondary keys of its Keyring), so that a cluster can
	// change GossipKey one node at a time (docs/security.md § Rotation). Each is 16, 24
	// or 32 bytes; they need GossipKey.
	GossipAcceptKeys [][]byte

	// TxnPrepareWindow bounds a transaction that spans partition groups (two-phase
	// commit, txn.go): its commit must be decided within this time after its prepare
	// began, and a participant still prepared after it asks the coordinator and presumes
	// abort (DefaultTxnPrepareWindow). Above zero.
	TxnPrepareWindow time.Duration
	// TxnRecoveryInterval is how often each partition leader completes decided
	// transactions and resolves prepared ones past their window
	// (DefaultTxnRecoveryInterval). Above zero.
	TxnRecoveryInterval time.Duration

	// BodyMemoryBudget is the bytes of message bodies the node's partition replicas may
	// hold in memory; past it, new bodies go to scratch files under DataDir/bodies
	// (partition.Bodies) and are read back on delivery. 0: every body in memory.
	BodyMemoryBudget int64
	// BodyDiskBudget bounds the bytes of bodies kept on disk; with both budgets full the
	// node refuses sends with a quota error. 0: no limit. Needs BodyMemoryBudget.
	BodyDiskBudget int64

	// ServeWait bounds how long an admin change, once committed, waits for the
	// partitions it creates or alters to serve it (Store.Apply) before it is
	// acknowledged anyway (DefaultServeWait). Above zero.
	ServeWait time.Duration

	Raft RaftConfig
	// Storage is where the partition replicas keep their Raft logs.
	Storage StorageConfig
	// Bench brings back earlier releases' ways, for benchmarks only.
	Bench BenchConfig
	Clock Clock // nil: real clock
	// Logger receives the node's lines, hashicorp/raft's and memberlist's included
	// (internal/hashilog), so they all follow its level and format. nil: slog.Default().
	Logger *slog.Logger

	// holdReplica, set by tests, keeps the replicas of an entity closed on this node
	// while it returns true for the entity's name (lower case): partitions that are
	// placed but not serving, as on a loaded cluster whose groups are slow to elect.
	holdReplica func(entity string) bool
	// afterConfigRead, set by tests, runs in each reconcile pass right after the pass
	// has read the metadata: a slow pass, whose reading a later change overtakes.
	afterConfigRead func()
	// olderRelease, set by tests, makes this node gossip the data level of a release
	// before batch delete (0), as a node not yet upgraded does.
	olderRelease bool
}

// DefaultReadyMaxLag is Config.ReadyMaxLag's default. An entry is a group-committed
// batch, so under load a healthy follower is a few entries behind; one that is
// thousands behind is still replaying a log or a snapshot.
const DefaultReadyMaxLag = 1000

// DefaultReadyTimeout is Config.ReadyTimeout's default: well inside the 3 s the chart's
// readiness probe waits (helm/quorumbus values.yaml probes.readiness.timeoutSeconds).
const DefaultReadyTimeout = time.Second

// DefaultServeWait is Config.ServeWait's default: most of the 30 s an admin change
// may take, as a client waits for its answer.
const DefaultServeWait = 20 * time.Second

// DefaultRebalanceMoves is Config.RebalanceMoves by default.
const DefaultRebalanceMoves = 2

// DefaultDeadNodeGrace is Config.DeadNodeGrace by default.
const DefaultDeadNodeGrace = 10 * time.Minute

// DefaultConfig is a single node on loopback, and the one place the node's defaults
// live: Start fills in nothing. DataDir is left empty.
func DefaultConfig() Config {
	return Config{
		NodeID:              "node-1",
		ClusterAddr:         "127.0.0.1:5400",
		Namespace:           "quorumbus",
		DefaultKeyName:      "RootManageSharedAccessKey",
		BootstrapExpect:     1,
		Replicas:            3,
		DeadNodeGrace:       DefaultDeadNodeGrace,
		RebalanceMoves:      DefaultRebalanceMoves,
		ReadyMaxLag:         DefaultReadyMaxLag,
		ReadyTimeout:        DefaultReadyTimeout,
		TxnPrepareWindow:    DefaultTxnPrepareWindow,
		TxnRecoveryInterval: DefaultTxnRecoveryInterval,
		ServeWait:           DefaultServeWait,
		Raft:                DefaultRaftConfig(),
		Storage:             StorageConfig{LogStore: partition.LogStoreShared},
	}
}

// Validate reports the settings that cannot work, each by its field name.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("cluster: NodeID is empty"))
	}
	if c.BootstrapExpect < 1 {
		errs = append(errs, fmt.Errorf("cluster: BootstrapExpect %d: want 1 (a single node) or more", c.BootstrapExpect))
	}
	if c.Replicas < 1 {
		errs = append(errs, fmt.Errorf("cluster: Replicas %d: want 1 or more", c.Replicas))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DeadNodeGrace", c.DeadNodeGrace}, {"ReadyTimeout", c.ReadyTimeout}, {"TxnPrepareWindow", c.TxnPrepareWindow},
		{"TxnRecoveryInterval", c.TxnRecoveryInterval}, {"ServeWait", c.ServeWait},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("cluster: %s %v: must be above zero (DefaultConfig sets it)", d.name, d.v))
		}
	}
	if c.RebalanceMoves < 0 {
		errs = append(errs, fmt.Errorf("cluster: RebalanceMoves %d: want 0 (off) or more", c.RebalanceMoves))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("cluster: DataDir is empty"))
	}
	if c.ClusterAddr == "" {
		errs = append(errs, errors.New("cluster: ClusterAddr is empty"))
	}
	if c.DefaultKeyName == "" {
		errs = append(errs, errors.New("cluster: DefaultKeyName is empty"))
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		errs = append(errs, fmt.Errorf("cluster: GossipKey must be 16, 24 or 32 bytes, got %d", len(c.GossipKey)))
	}
	if c.BodyMemoryBudget < 0 || c.BodyDiskBudget < 0 || (c.BodyDiskBudget > 0 && c.BodyMemoryBudget == 0) {
		errs = append(errs, fmt.Errorf("cluster: body budgets %d (memory), %d (disk): want >= 0, and a disk budget only with a memory budget",
			c.BodyMemoryBudget, c.BodyDiskBudget))
	}
	if len(c.GossipAcceptKeys) > 0 && len(c.GossipKey) == 0 {
		errs = append(errs, errors.New("cluster: GossipAcceptKeys need a GossipKey to seal with"))
	}
	for i, k := range c.GossipAcceptKeys {
		if l := len(k); l != 16 && l != 24 && l != 32 {
			errs = append(errs, fmt.Errorf("cluster: GossipAcceptKeys[%d] must be 16, 24 or 32 bytes, got %d", i, l))
		}
	}
	if c.Raft.HeartbeatTimeout <= 0 || c.Raft.ElectionTimeout < c.Raft.HeartbeatTimeout ||
		c.Raft.LeaderLeaseTimeout <= 0 || c.Raft.LeaderLeaseTimeout > c.Raft.HeartbeatTimeout || c.Raft.CommitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("cluster: Raft timing %+v cannot work", c.Raft))
	}
	if c.Raft.PartitionCommitTimeout < 0 || c.Raft.QuiesceAfter < 0 {
		errs = append(errs, fmt.Errorf("cluster: Raft.PartitionCommitTimeout %v, Raft.QuiesceAfter %v: want 0 or more",
			c.Raft.PartitionCommitTimeout, c.Raft.QuiesceAfter))
	}
	if c.Raft.Pipeline < 0 || c.Raft.Pipeline > 256 {
		errs = append(errs, fmt.Errorf("cluster: Raft.Pipeline %d: want 0..256 (under 2: one at a time)", c.Raft.Pipeline))
	}
	switch l := c.Storage.LogStore; l {
	case "", partition.LogStoreShared, partition.LogStoreBolt, partition.LogStoreWAL:
	default:
		errs = append(errs, fmt.Errorf("cluster: Storage.LogStore %q: want %q, %q or %q", l,
			partition.LogStoreShared, partition.LogStoreBolt, partition.LogStoreWAL))
	}
	return errors.Join(errs...)
}

// Sentinel errors of the cluster layer.
var (
	// ErrNotMetadataLeader: this node cannot change metadata now (no leader, or another
	// node leads the metadata group and forwarding is not available).
	ErrNotMetadataLeader = metagroup.ErrNotLeader
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("cluster: node closed")
)
