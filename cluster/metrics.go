package cluster

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/placement"
	"github.com/quorumbus/quorumbus/partition"
)

// metrics is the node's Prometheus instrumentation (docs/observability.md). Every
// series is registered on the node's own registry, never the global default, so that
// several nodes in one test process do not collide.
//
// Gauges and counters of entities and partitions are not kept here: the collector
// reads them at scrape time from what the node already has (fsm.Stats and
// partition.Metrics of each local replica), so there is one set of books. Only what
// exists nowhere else is recorded as it happens: the forwarding RPC latency and the
// group-commit batch sizes and commit latencies (node-wide histograms: per partition
// they would cost a dozen series per partition each).
type metrics struct {
	reg *prometheus.Registry

	rpcSeconds    *prometheus.HistogramVec // method, result
	batchCommands prometheus.Histogram
	batchBytes    prometheus.Histogram
	commitSeconds *prometheus.HistogramVec // result
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "quorumbus_cluster_rpc_duration_seconds",
			Help: "Latency of calls this node made to other nodes over the cluster RPC (forwarded operations, status), by method and result (ok, error, timeout).",
			// A forwarded receive may long-poll for up to a minute.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"method", "result"}),
		batchCommands: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quorumbus_partition_batch_commands",
			Help:    "Commands per Raft entry this node proposed as a partition leader (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quorumbus_partition_batch_bytes",
			Help:    "Encoded size of each Raft entry this node proposed as a partition leader.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 9), // 256 B .. 16 MiB
		}),
		commitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quorumbus_partition_commit_duration_seconds",
			Help:    "Time from handing an entry to Raft to its being committed on a quorum (each fsynced) and applied on this leader, by result (ok, error).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"result"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "quorumbus"}),
		m.rpcSeconds, m.batchCommands, m.batchBytes, m.commitSeconds,
		&nodeCollector{n: n},
	)
	return m
}

// observeRPC records one cluster RPC call.
func (m *metrics) observeRPC(method string, d time.Duration, err error) {
	result := "ok"
	switch {
	case errors.Is(err, partition.ErrTimeout):
		result = "timeout"
	case err != nil:
		result = "error"
	}
	m.rpcSeconds.WithLabelValues(method, result).Observe(d.Seconds())
}

// Batched implements partition.Observer.
func (m *metrics) Batched(cmds, bytes int) {
	m.batchCommands.Observe(float64(cmds))
	m.batchBytes.Observe(float64(bytes))
}

// Committed implements partition.Observer.
func (m *metrics) Committed(d time.Duration, ok bool) {
	result := "ok"
	if !ok {
		result = "error"
	}
	m.commitSeconds.WithLabelValues(result).Observe(d.Seconds())
}

var _ partition.Observer = (*metrics)(nil)

// Registry is the node's Prometheus registry: the node's own series (quorumbus_...),
// Go runtime and process metrics. The caller serves it (promhttp.HandlerFor) and may
// register more collectors on it (cmd/quorumbus adds the AMQP listener's).
func (n *Node) Registry() *prometheus.Registry { return n.metrics.reg }

// Descriptions of the series the collector computes at scrape time.
var (
	entityLabels    = []string{"entity", "subscription", "partition"}
	partitionLabels = []string{"entity", "partition"}

	descActive    = prometheus.NewDesc("quorumbus_entity_active_messages", "Active messages (locked ones included) of a queue or subscription partition, exported by the partition's leader.", entityLabels, nil)
	descLocked    = prometheus.NewDesc("quorumbus_entity_locked_messages", "Messages under a peek-lock.", entityLabels, nil)
	descScheduled = prometheus.NewDesc("quorumbus_entity_scheduled_messages", "Scheduled messages not yet active.", entityLabels, nil)
	descDeferred  = prometheus.NewDesc("quorumbus_entity_deferred_messages", "Deferred messages.", entityLabels, nil)
	descDead      = prometheus.NewDesc("quorumbus_entity_dead_letter_messages", "Messages in the dead-letter sub-queue.", entityLabels, nil)
	descSize      = prometheus.NewDesc("quorumbus_entity_size_bytes", "Bytes counted toward MaxSizeInMegabytes (the queue or subscription, its dead-letter sub-queue included).", entityLabels, nil)
	descOldest    = prometheus.NewDesc("quorumbus_entity_oldest_message_age_seconds", "Age of the oldest message (lowest sequence number, any state) of the queue or subscription, not counting its dead-letter sub-queue; 0 when empty.", entityLabels, nil)
	descIncoming  = prometheus.NewDesc("quorumbus_entity_incoming_messages_total", "Messages stored by sends and schedules (a topic's copies count per subscription), since this replica started.", entityLabels, nil)
	descOutgoing  = prometheus.NewDesc("quorumbus_entity_outgoing_messages_total", "Deliveries (peek-lock locks and receive-and-delete), dead-letter sub-queue included.", entityLabels, nil)
	descCompleted = prometheus.NewDesc("quorumbus_entity_completed_messages_total", "Messages settled with Complete, dead-letter sub-queue included.", entityLabels, nil)
	descAbandoned = prometheus.NewDesc("quorumbus_entity_abandoned_messages_total", "Messages settled with Abandon (lock expiry is not counted).", entityLabels, nil)
	descDLed      = prometheus.NewDesc("quorumbus_entity_dead_lettered_messages_total", "Messages moved to the dead-letter sub-queue, for any reason.", entityLabels, nil)
	descExpired   = prometheus.NewDesc("quorumbus_entity_expired_messages_total", "Messages whose time to live passed (also counted as dead-lettered when dead-lettering on expiration).", entityLabels, nil)

	descIsLeader    = prometheus.NewDesc("quorumbus_partition_is_leader", "1 when this node leads the partition group and serves it, else 0 (every local replica).", partitionLabels, nil)
	descTerm        = prometheus.NewDesc("quorumbus_partition_term", "Raft term this replica is in.", partitionLabels, nil)
	descLastIndex   = prometheus.NewDesc("quorumbus_partition_last_index", "Index of the last entry in this replica's Raft log.", partitionLabels, nil)
	descCommitIndex = prometheus.NewDesc("quorumbus_partition_commit_index", "Index of the last entry this replica knows to be committed.", partitionLabels, nil)
	descApplied     = prometheus.NewDesc("quorumbus_partition_applied_index", "Index of the last entry applied to this replica's state machine.", partitionLabels, nil)
	descContact     = prometheus.NewDesc("quorumbus_partition_leader_contact_age_seconds", "On a follower, seconds since it last heard from its leader (-1 before any contact); 0 on the leader.", partitionLabels, nil)
	descQuiet       = prometheus.NewDesc("quorumbus_partition_quiet", "1 while this replica is quiescent (an idle group: no heartbeats or election timer until the next operation, --raft-quiesce-after), else 0.", partitionLabels, nil)
	descProposals   = prometheus.NewDesc("quorumbus_partition_proposals_total", "Commands this replica proposed as leader.", partitionLabels, nil)
	descEntries     = prometheus.NewDesc("quorumbus_partition_entries_total", "Raft entries (group-committed batches) this replica proposed as leader.", partitionLabels, nil)
	descSnapshots   = prometheus.NewDesc("quorumbus_partition_snapshots_total", "Snapshots this replica took.", partitionLabels, nil)
	descSnapSecs    = prometheus.NewDesc("quorumbus_partition_snapshot_duration_seconds_total", "Time this replica spent taking snapshots (freeze and persist).", partitionLabels, nil)
	descSnapBytes   = prometheus.NewDesc("quorumbus_partition_snapshot_bytes", "Size of the last snapshot this replica took (0 before the first).", partitionLabels, nil)
	descUnderRep    = prometheus.NewDesc("quorumbus_partition_under_replicated", "1 when fewer of the partition group's voters are alive than it should have (--replicas, capped by the registered nodes), else 0; exported by the group's leader.", partitionLabels, nil)

	descMetaLeader  = prometheus.NewDesc("quorumbus_meta_is_leader", "1 when this node leads the metadata group.", nil, nil)
	descMetaHas     = prometheus.NewDesc("quorumbus_meta_has_leader", "1 when this node knows a leader of the metadata group.", nil, nil)
	descMetaApply   = prometheus.NewDesc("quorumbus_meta_applied_index", "Index of the last metadata entry applied on this node.", nil, nil)
	descMembers     = prometheus.NewDesc("quorumbus_cluster_members", "Cluster nodes by state as this node sees them: alive (gossip reaches them) or failed (registered in the metadata but not alive).", []string{"state"}, nil)
	descHealth      = prometheus.NewDesc("quorumbus_memberlist_health_score", "memberlist's awareness score of this node: 0 is healthy, higher means it is slow to answer probes.", nil, nil)
	descReplicas    = prometheus.NewDesc("quorumbus_node_replicas", "Partition replicas this node runs.", nil, nil)
	descBodyMem     = prometheus.NewDesc("quorumbus_bodies_memory_bytes", "Message bodies this node's replicas hold in memory (a topic's copies each counted); set only with --body-memory-budget-mb.", nil, nil)
	descBodyMemMax  = prometheus.NewDesc("quorumbus_bodies_memory_budget_bytes", "--body-memory-budget-mb in bytes: past it new bodies go to disk.", nil, nil)
	descBodyLive    = prometheus.NewDesc("quorumbus_bodies_disk_bytes", "Bytes of message bodies kept on disk and still referenced: what --body-disk-budget-mb bounds.", nil, nil)
	descBodyDiskMax = prometheus.NewDesc("quorumbus_bodies_disk_budget_bytes", "--body-disk-budget-mb in bytes (0: no limit).", nil, nil)
	descBodyFiles   = prometheus.NewDesc("quorumbus_bodies_file_bytes", "Size of the body segment files, with the space of bodies gone from files still in use.", nil, nil)
	descBodySegs    = prometheus.NewDesc("quorumbus_bodies_segments", "Body segment files.", nil, nil)
	descBodySpills  = prometheus.NewDesc("quorumbus_bodies_spilled_total", "Message bodies written to disk.", nil, nil)
	descBodyReads   = prometheus.NewDesc("quorumbus_bodies_read_total", "Message bodies read back from disk (deliveries, peeks, snapshots).", nil, nil)
	descBodyRefused = prometheus.NewDesc("quorumbus_bodies_refused_sends_total", "Sends refused with a quota error because both body budgets were full.", nil, nil)
	descMoves       = prometheus.NewDesc("quorumbus_rebalance_moves_in_progress", "On the metadata leader, partition groups it is moving a replica of (toward an even share of replicas per node, or into a zone the group lacks), at most --rebalance-moves; 0 on other nodes.", nil, nil)
	descReady       = prometheus.NewDesc("quorumbus_node_ready", "1 when /readyz answers 200 (Node.CaughtUp, docs/operations.md § What readiness means).", nil, nil)
)

// nodeCollector reads the node's state at scrape time. Entity series come from the
// replicas this node leads only, so that summing over nodes gives each count once;
// partition series come from every local replica, so that a follower's lag and a
// missing leader are visible.
type nodeCollector struct{ n *Node }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descLocked, descScheduled, descDeferred, descDead, descSize,
		descOldest, descIncoming, descOutgoing, descCompleted, descAbandoned, descDLed, descExpired,
		descIsLeader, descTerm, descLastIndex, descCommitIndex, descApplied, descContact, descQuiet, descProposals,
		descEntries, descSnapshots, descSnapSecs, descSnapBytes, descUnderRep,
		descMetaLeader, descMetaHas, descMetaApply, descMembers, descHealth, descReplicas, descReady, descMoves,
		descBodyMem, descBodyMemMax, descBodyLive, descBodyDiskMax, descBodyFiles, descBodySegs, descBodySpills,
		descBodyReads, descBodyRefused} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	// Display names and the registered nodes, from the local metadata replica.
	names := map[uint32]string{}
	var registered []meta.Node
	n.meta.Read(func(s *meta.State) {
		for _, pl := range s.PlacementsView() {
			for _, p := range pl.Partitions {
				names[p.GroupID] = pl.Entity
			}
		}
		registered = s.Nodes()
	})
	n.mu.RLock()
	reps := make(map[uint32]*replica, len(n.parts))
	for id, r := range n.parts {
		reps[id] = r
	}
	n.mu.RUnlock()

	now := n.clock.Now()
	live := map[string]bool{n.cfg.NodeID: true} // before gossip starts, this node alone
	if n.gossip != nil {
		live = n.gossip.Alive()
	}
	want := placement.Want(n.cfg.Replicas, len(registered))
	for id, r := range reps {
		name := names[id]
		if name == "" {
			name = r.entity // placement gone: the replica is being removed
		}
		part := strconv.Itoa(r.index)
		pm := r.p.Metrics()
		gauge(descIsLeader, b2f(pm.IsLeader), name, part)
		gauge(descTerm, float64(pm.Term), name, part)
		gauge(descLastIndex, float64(pm.LastIndex), name, part)
		gauge(descCommitIndex, float64(pm.CommitIndex), name, part)
		gauge(descApplied, float64(pm.AppliedIndex), name, part)
		contact := 0.0
		if !pm.IsLeader {
			contact = -1
			if !pm.LastContact.IsZero() {
				contact = now.Sub(pm.LastContact).Seconds()
			}
		}
		gauge(descContact, contact, name, part)
		gauge(descQuiet, b2f(pm.Quiet), name, part)
		counter(descProposals, float64(pm.Proposals), name, part)
		counter(descEntries, float64(pm.Entries), name, part)
		counter(descSnapshots, float64(pm.Snapshots), name, part)
		counter(descSnapSecs, pm.SnapshotTime.Seconds(), name, part)
		gauge(descSnapBytes, float64(pm.LastSnapshotBytes), name, part)

		if !pm.IsLeader {
			continue
		}
		if servers, err := r.p.Servers(); err == nil {
			gauge(descUnderRep, b2f(liveVoters(servers, live) < want), name, part)
		}
		st, err := r.p.MetricStats() // a local read under the machine's lock; a quiet group stays quiet
		if err != nil {
			continue // lost leadership since: the new leader exports it
		}
		// Targets come in pairs: each queue or subscription, then its dead-letter sub-queue.
		for i := 0; i+1 < len(st.Targets); i += 2 {
			mt, dt := st.Targets[i], st.Targets[i+1]
			l := []string{name, mt.Target.Sub, part}
			gauge(descActive, float64(mt.Active), l...)
			gauge(descLocked, float64(mt.Locked+dt.Locked), l...)
			gauge(descScheduled, float64(mt.Scheduled), l...)
			gauge(descDeferred, float64(mt.Deferred), l...)
			gauge(descDead, float64(dt.Active+dt.Deferred+dt.Scheduled), l...)
			gauge(descSize, float64(mt.Bytes+dt.Bytes), l...)
			age := 0.0
			if mt.Oldest > 0 {
				age = max(0, float64(now.UnixMilli()-mt.Oldest)/1000)
			}
			gauge(descOldest, age, l...)
			mc, dc := mt.Counters, dt.Counters
			counter(descIncoming, float64(mc.Incoming), l...)
			counter(descOutgoing, float64(mc.Outgoing+dc.Outgoing), l...)
			counter(descCompleted, float64(mc.Completed+dc.Completed), l...)
			counter(descAbandoned, float64(mc.Abandoned+dc.Abandoned), l...)
			counter(descDLed, float64(mc.DeadLettered), l...)
			counter(descExpired, float64(mc.Expired), l...)
		}
	}
	gauge(descReplicas, float64(len(reps)))

	gauge(descMetaLeader, b2f(n.meta.IsLeader()))
	gauge(descMetaHas, b2f(n.meta.Leader() != ""))
	gauge(descMetaApply, float64(n.meta.AppliedIndex()))
	if n.gossip != nil {
		alive := n.gossip.Alive()
		failed := 0
		for _, nd := range registered {
			if !alive[nd.ID] {
				failed++
			}
		}
		gauge(descMembers, float64(len(alive)), "alive")
		gauge(descMembers, float64(failed), "failed")
		gauge(descHealth, float64(n.gossip.HealthScore()))
	}
	// The same check as /readyz: on a node that follows others, one GroupStatus call per
	// leading node, bounded so that an unreachable peer cannot stall the scrape.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gauge(descReady, b2f(n.CaughtUp(ctx) == nil))
	gauge(descMoves, float64(n.steward.moves.Load()))
	if n.bodies != nil {
		st := n.bodies.Stats()
		gauge(descBodyMem, float64(st.MemoryBytes))
		gauge(descBodyMemMax, float64(st.MemoryBudget))
		gauge(descBodyLive, float64(st.LiveBytes))
		gauge(descBodyDiskMax, float64(st.DiskBudget))
		gauge(descBodyFiles, float64(st.DiskBytes))
		gauge(descBodySegs, float64(st.Segments))
		counter(descBodySpills, float64(st.Spilled))
		counter(descBodyReads, float64(st.Read))
		counter(descBodyRefused, float64(st.Refused))
	}
}
