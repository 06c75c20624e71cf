package partition

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// Clock is the time source of the partition's own timers (lock expiry, TTL and
// scheduled-activation ticks, receive waits, linger). Nil in Config means the real clock.
// Raft's internal timers always use the real clock; shrink them through Config instead.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Config describes one replica of one partition group. Use DefaultConfig and fill the
// identity fields; tests shorten the raft timeouts here.
type Config struct {
	// DataDir is the node's data root. The group keeps raft.db (or wal/) and snapshots/ under
	// Dir() = DataDir/partitions/<entity, path-escaped>/<Index>/.
	DataDir string
	Entity  string
	Index   int

	// NodeID is this node's raft ServerID, the same in every group of the node.
	NodeID raft.ServerID
	// Stream is this group's stream layer, e.g. transport.Mux.Layer(FSM.GroupID). Its
	// Addr() is this node's ServerAddress in every group. The partition closes it.
	Stream raft.StreamLayer
	// Transport, when set, is the group's Raft transport instead of a NetworkTransport on
	// Stream: transport.Groups's, one connection per peer for every group of the node.
	// The replica closes it.
	Transport Transport
	// AddressProvider, when set, resolves a peer's ServerID to its current address (e.g.
	// from membership) so a node whose address changed stays reachable.
	AddressProvider raft.ServerAddressProvider
	// FSM is the entity's configuration at creation, identical on every replica (the log
	// replays from it); later changes go through UpdateEntity. FSM.GroupID must be set:
	// it is the first 4 bytes of every lock token.
	FSM fsm.Config
	// Peers is the initial voter set, identical on every replica. It is used only when the
	// group has no state on disk (BootstrapCluster); empty means "join later".
	Peers []raft.Server

	// Bodies, when set, keeps this replica's message bodies on disk once the node's
	// bodies in memory reach its budget (bodies.go); shared by the node's partitions.
	Bodies *Bodies

	Clock  Clock        // nil: real clock
	Logger hclog.Logger // nil: warnings and errors to stderr
	// Observer, when set, receives batch sizes and commit latencies (metrics.go).
	Observer Observer
	// LeadershipChanged, when set, is called after this replica became or stopped being
	// the group's leader, and again once a new leader serves (IsLeader turns true). It
	// runs on the goroutine of the replica's LeadershipHub and must not block.
	LeadershipChanged func()
	// Leadership is the hub that tells the replica of raft's state changes, shared by
	// every replica of the node (NewLeadershipHub; its creator closes it after them).
	// Nil: the replica uses a hub of its own, with a goroutine while it is open.
	Leadership *LeadershipHub

	// Raft timing (hashicorp/raft semantics; docs/design-notes.md §4).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// MaxAppendEntries bounds how many log entries (each a group-committed batch) go into
	// one AppendEntries RPC and one disk write, and how far raft reads the log ahead of
	// the fsm when it replays it on start: up to 128 batches of this many entries are
	// held in memory (16: about 1.8 GB less at the peak of a restart with 2 M messages
	// in the log; docs/benchmarks.md, "Backlogs larger than memory"). 1..1024.
	MaxAppendEntries int
	// ReplicationMaxEntries and ReplicationMaxBytes: a follower that is behind (a new or
	// moved replica, a restarted node) gets up to ReplicationMaxEntries entries per
	// AppendEntries as long as their data stays within ReplicationMaxBytes (raft patch
	// 5, docs/raft-patches.md), instead of MaxAppendEntries: under a load of small
	// entries, catching up took one round trip per 16 entries. 0..4096; 0 (or a value
	// not above MaxAppendEntries) turns it off.
	ReplicationMaxEntries int
	ReplicationMaxBytes   int
	// Snapshots: counted in log entries (batches), not bytes; see docs/partition.md.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	SnapshotRetain    int
	// LogCache is how many recent log entries raft keeps in memory (raft.NewLogCache) to
	// send to followers without reading raft.db. Each entry is a group-committed batch of
	// up to MaxBatchBytes, whose bodies the fsm already holds in a copy of its own, so
	// every cached entry duplicates memory: 512 kept 60 MB at 100 000 queued 1 KiB messages
	// (docs/benchmarks.md, "memory per message"). A follower further behind reads raft.db.
	LogCache int
	// NetTimeout is the raft transport's I/O deadline; NetMaxPool its pooled conns per peer.
	NetTimeout time.Duration
	NetMaxPool int
	// QuiesceAfter, when above zero, lets an idle group go quiet (raft patch 4,
	// docs/raft-patches.md): once its log is committed everywhere and nothing was
	// proposed for this long, no heartbeats, commit-timeout appends, lease checks or
	// election timers run until the next proposal. Whoever hosts the replica must call
	// Wake when the leader's node is gone or unreachable (the cluster does so from
	// gossip; a leader whose port refuses connections is found by the transport). Reads
	// on a quiet leader verify its leadership first. Zero: never quiet.
	QuiesceAfter time.Duration
	// Pipeline is how many AppendEntries the leader keeps in flight to each follower
	// (raft's pipelined replication) on a raft.NetworkTransport of the group's own
	// (Transport nil); under 2, one at a time. transport.Groups has its own setting
	// (GroupsConfig.Pipeline).
	Pipeline int
	// NoSync skips fsync of the raft log. Unsafe: S-DUR-1 no longer holds. Tests only.
	// Only the bolt log store honours it; raft-wal always fsyncs, and the shared
	// Engine follows its own EngineConfig.NoSync.
	NoSync bool
	// LogStore is the raft log and stable store of a group created on this node:
	// LogStoreBolt ("" too), LogStoreWAL or LogStoreShared (logstore.go; Engine must
	// then be set). A replica whose directory
	// already holds a log keeps the store it has (no migration).
	LogStore string
	// Engine is the node's shared log engine (OpenEngine), opened once and handed to
	// every group; needed for LogStoreShared and for a replica created with it.
	Engine *Engine

	// Group commit: one raft entry carries up to MaxBatchCmds commands or about
	// MaxBatchBytes of payload; with Linger > 0 the proposer waits that long for a batch to
	// fill. MaxInflight bounds the entries submitted to raft and not yet committed: while
	// they are in flight, new proposals accumulate into the next batch. QueueLen is the
	// capacity of the proposal queue.
	MaxBatchCmds  int
	MaxBatchBytes int
	Linger        time.Duration
	MaxInflight   int
	QueueLen      int

	// Chunked bodies: a message whose payload is larger than ChunkBytes is sent as
	// chunks of ChunkBytes, each a raft entry of its own (fsm.BodyChunk), then one small
	// entry that stores the message (fsm.EnqueueUploaded), so the proposals of other
	// senders take their turn between the chunks instead of waiting for the whole body
	// to be replicated and fsynced. ChunkWindow chunks of one message may be in flight
	// at once. An upload not completed within UploadTimeout (a leader change mid-upload)
	// is dropped by the fsm. ChunkBytes 0 sends every message as one entry.
	ChunkBytes    int
	ChunkWindow   int
	UploadTimeout time.Duration

	// TickMinInterval is the least time between two ticks, a guard against a deadline the
	// fsm does not clear.
	TickMinInterval time.Duration
}

// DefaultPipeline is how many AppendEntries a group's leader keeps in flight to each
// follower by default: one round trip to the follower no longer waits for the one
// before it (raft patch 1 made it safe, docs/raft-patches.md).
const DefaultPipeline = 8

// DefaultConfig returns production defaults; the identity fields are left empty.
func DefaultConfig() *Config {
	return &Config{
		HeartbeatTimeout:      time.Second,
		ElectionTimeout:       time.Second,
		LeaderLeaseTimeout:    500 * time.Millisecond,
		CommitTimeout:         50 * time.Millisecond,
		MaxAppendEntries:      16,
		ReplicationMaxEntries: 512,
		ReplicationMaxBytes:   1 << 20,
		SnapshotThreshold:     2048,
		SnapshotInterval:      2 * time.Minute,
		TrailingLogs:          1024,
		SnapshotRetain:        2,
		LogCache:              32,
		NetTimeout:            10 * time.Second,
		NetMaxPool:            3,
		Pipeline:              DefaultPipeline,
		MaxBatchCmds:          1024,
		MaxBatchBytes:         1 << 20,
		MaxInflight:           4,
		QueueLen:              4096,
		ChunkBytes:            512 << 10,
		ChunkWindow:           2,
		UploadTimeout:         2 * time.Minute,
		TickMinInterval:       5 * time.Millisecond,
	}
}

// Validate reports a config that cannot work.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("partition: "+format, a...)) }
	if c.DataDir == "" {
		bad("DataDir is empty")
	}
	if c.Entity == "" {
		bad("Entity is empty")
	}
	if c.Index < 0 {
		bad("Index %d < 0", c.Index)
	}
	if c.NodeID == "" {
		bad("NodeID is empty")
	}
	if c.Stream == nil && c.Transport == nil {
		bad("Stream and Transport are nil")
	}
	if c.FSM.GroupID == 0 {
		bad("FSM.GroupID is 0")
	}
	if c.HeartbeatTimeout <= 0 || c.ElectionTimeout < c.HeartbeatTimeout {
		bad("need 0 < HeartbeatTimeout (%v) <= ElectionTimeout (%v)", c.HeartbeatTimeout, c.ElectionTimeout)
	}
	if c.LeaderLeaseTimeout <= 0 || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		bad("need 0 < LeaderLeaseTimeout (%v) <= HeartbeatTimeout", c.LeaderLeaseTimeout)
	}
	if c.CommitTimeout <= 0 {
		bad("CommitTimeout must be > 0")
	}
	if c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024 {
		bad("MaxAppendEntries %d not in 1..1024", c.MaxAppendEntries)
	}
	if c.ReplicationMaxEntries < 0 || c.ReplicationMaxEntries > 4096 || c.ReplicationMaxBytes < 0 {
		bad("ReplicationMaxEntries %d not in 0..4096, or ReplicationMaxBytes %d below 0", c.ReplicationMaxEntries, c.ReplicationMaxBytes)
	}
	if c.SnapshotThreshold == 0 || c.SnapshotInterval <= 0 || c.SnapshotRetain < 1 {
		bad("SnapshotThreshold, SnapshotInterval and SnapshotRetain must be > 0")
	}
	if c.LogCache < 1 {
		bad("LogCache %d < 1", c.LogCache)
	}
	if c.NetTimeout <= 0 || c.NetMaxPool < 1 {
		bad("NetTimeout and NetMaxPool must be > 0")
	}
	if c.QuiesceAfter < 0 {
		bad("QuiesceAfter %v < 0", c.QuiesceAfter)
	}
	if c.Pipeline < 0 || c.Pipeline > 256 {
		bad("Pipeline %d not in 0..256", c.Pipeline)
	}
	if c.MaxBatchCmds < 1 || c.MaxBatchBytes < 1 || c.MaxInflight < 1 || c.QueueLen < 0 || c.Linger < 0 {
		bad("MaxBatchCmds, MaxBatchBytes, MaxInflight must be > 0; QueueLen, Linger >= 0")
	}
	if c.ChunkBytes < 0 || (c.ChunkBytes > 0 && (c.ChunkWindow < 1 || c.UploadTimeout <= 0)) {
		bad("ChunkBytes %d < 0, or chunking without ChunkWindow >= 1 and UploadTimeout > 0", c.ChunkBytes)
	}
	switch c.LogStore {
	case "", LogStoreBolt, LogStoreWAL:
	case LogStoreShared:
		if c.Engine == nil {
			bad("LogStore %q needs Engine", c.LogStore)
		}
	default:
		bad("LogStore %q: want %q, %q or %q", c.LogStore, LogStoreBolt, LogStoreWAL, LogStoreShared)
	}
	if c.TickMinInterval < 0 {
		bad("TickMinInterval < 0")
	}
	for _, s := range c.Peers {
		if s.ID == "" || s.Address == "" {
			bad("peer %+v lacks ID or Address", s)
		}
	}
	return errors.Join(errs...)
}

// Dir is where this replica keeps its files: <DataDir>/partitions/<entity>/<index>/, the
// entity name path-escaped (Service Bus names may contain '/').
func (c *Config) Dir() string {
	return Dir(c.DataDir, c.Entity, c.Index)
}

// Dir is the directory of partition index of entity under the node data root.
func Dir(dataDir, entity string, index int) string {
	e := url.PathEscape(entity)
	if e == "." || e == ".." {
		e = strings.ReplaceAll(e, ".", "%2E")
	}
	return filepath.Join(dataDir, "partitions", e, strconv.Itoa(index))
}

func (c *Config) raftConfig(logger hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = c.NodeID
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.ReplicationMaxEntries, rc.ReplicationMaxBytes = c.ReplicationMaxEntries, c.ReplicationMaxBytes
	// A buffered applyCh lets raft take up to MaxAppendEntries entries per disk write
	// (docs/design-notes.md §2: 15-20x the write throughput).
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.QuiesceAfter = c.QuiesceAfter
	// The fsm lives in memory: raft must restore the latest snapshot on start and replay
	// the log after it.
	rc.NoSnapshotRestoreOnStart = false
	rc.Logger = logger
	return rc
}
