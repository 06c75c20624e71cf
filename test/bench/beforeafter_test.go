package bench

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

var (
	abGroups = flag.Int("cluster.ab-groups", 64, "single-partition queues on each cluster of BenchmarkClusterBeforeAfter")
	abBefore = flag.String("cluster.ab-before", "--raft-log-store bolt --raft-transport per-group",
		"the flags of BenchmarkClusterBeforeAfter's before cluster (after: the defaults); e.g. --raft-pipeline 1")
)

// BenchmarkClusterBeforeAfter measures the layout of earlier releases and today's in one
// run: two 3-node clusters at once, each with -cluster.ab-groups single-partition queues
// (3 replicas, so that many groups on every node), leaders spread by placement.
//
//   - before: -cluster.ab-before's flags, by default --raft-log-store bolt
//     --raft-transport per-group, a raft-boltdb file with its own fsyncs and a
//     NetworkTransport (listener, connection pool, heartbeats) per group, as every group
//     had before the shared engine and transport.Groups; the partition code is today's
//     either way. -cluster.ab-before '--raft-pipeline 1' compares replication one
//     AppendEntries at a time with pipelining.
//   - after: the defaults.
//
// Both clusters idle through the same window (idle CPU and RSS per node), then send
// -cluster.n 1 KiB messages each, 256 in flight spread over the queues, each queue's
// sender on its leader's node, in interleaved rounds (AB BA AB BA), so that outside load
// falls on both alike; last, each node's goroutines.
func BenchmarkClusterBeforeAfter(b *testing.B) {
	layouts := []struct {
		name string
		args []string
	}{
		{"before", strings.Fields(*abBefore)},
		{"after", nil},
	}
	groups := *abGroups
	bcs := make([]*benchCluster, len(layouts))
	senders := make([][]*azservicebus.Sender, len(layouts))
	for i, l := range layouts {
		bc := startBench(b, 3, l.args...)
		names := make([]string, groups)
		for j := range names {
			names[j] = uniqueName(l.name)
		}
		bc.createQueues(b, names...)
		parts := bc.placeLeaders(b, 3, names...)
		for _, q := range names {
			s, err := bc.clients[parts[q].Leader].NewSender(q, nil)
			if err != nil {
				b.Fatal(err)
			}
			senders[i] = append(senders[i], s)
		}
		bcs[i] = bc
	}

	// Idle: both clusters through one window.
	time.Sleep(2 * time.Second) // the last leadership transfers and snapshots settle
	before := make([][]procStat, len(bcs))
	for i, bc := range bcs {
		for _, n := range bc.Nodes {
			before[i] = append(before[i], readProc(b, n.Pid()))
		}
	}
	t0 := time.Now()
	time.Sleep(*clusterIdle) // the idle window: nothing talks to either cluster
	window := time.Since(t0)
	for i, bc := range bcs {
		var cpu, rss float64
		for j, n := range bc.Nodes {
			after := readProc(b, n.Pid())
			cpu += float64(after.ticks-before[i][j].ticks) / clockTicks / window.Seconds() * 100 / float64(len(bc.Nodes))
			rss += float64(after.rssKiB) / 1024 / float64(len(bc.Nodes))
		}
		b.Logf("%s: idle %.2f %% of a core and %.1f MiB RSS per node", layouts[i].name, cpu, rss)
		b.ReportMetric(cpu, layouts[i].name+"-idle-cpu-%/node")
		b.ReportMetric(rss, layouts[i].name+"-idle-rss-MiB/node")
	}

	// Sends, interleaved.
	for i := range bcs {
		sendConcurrent(b, senders[i], 500, inflight) // warm every link
	}
	const rounds = 4
	per := *clusterN / rounds
	nodes := make([][]*harness.Node, len(bcs))
	for i, bc := range bcs {
		nodes[i] = bc.Nodes
	}
	took, cpu, flushes := interleaved(b, rounds, per, senders, nodes)
	for i, l := range layouts {
		n := float64(rounds * per)
		b.Logf("%s: %.0f msgs/s; CPU µs per message by process (%s, client) %s; %.2f disk flushes/msg", l.name,
			n/took[i].Seconds(), nodeIDs(bcs[i].Nodes), cpu[i].perMsg(n), float64(flushes[i])/n)
		b.ReportMetric(n/took[i].Seconds(), l.name+"-msgs/s")
		b.ReportMetric(float64(flushes[i])/n, l.name+"-flushes/msg")
	}
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "after-vs-before-send")

	for i, bc := range bcs {
		for _, c := range bc.clients {
			c.Close(context.Background())
		}
		g := quitAndCount(b, bc.Nodes)
		b.ReportMetric(g, layouts[i].name+"-goroutines/node")
		b.Logf("%s: %.0f goroutines per node, %.1f per group", layouts[i].name, g, g/float64(groups))
	}
}
