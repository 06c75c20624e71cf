package bench

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

var (
	quietQueues     = flag.Int("cluster.quiet-queues", 625, "partitioned queues of BenchmarkClusterQuietScale")
	quietPartitions = flag.Int("cluster.quiet-partitions", 16, "partitions of each queue of BenchmarkClusterQuietScale: 16 (EnablePartitioning, Service Bus's count) or 1")
	quietHogs       = flag.Int("cluster.hogs", 0, "busy loops BenchmarkClusterQuietScale runs beside the cluster from before it starts")
	quietWatch      = flag.Duration("cluster.watch", 0, "how long BenchmarkClusterQuietScale watches the idle groups for elections after the idle window")
)

// BenchmarkClusterQuietScale: a 3-node cluster (3 replicas) with -cluster.quiet-queues
// queues of -cluster.quiet-partitions partitions each, so queues × partitions groups on
// every node, optionally beside -cluster.hogs busy loops started before the cluster.
// Reported: how many creates failed at their first try (the admin client without
// retries; a failed one is tried again until it succeeds), how long until every replica
// on every node was quiet, then CPU and RSS per node over -cluster.idle starting only
// then, and with -cluster.watch the elections (the sum of every replica's Raft term,
// from /metrics) in that much more idle time. With QB_BENCH_PROFILE_DIR (and
// QUORUMBUS_PPROF=true) the first node's CPU profile over the idle window is saved there.
//
//	go test -run '^$' -bench ClusterQuietScale -benchtime 1x -timeout 60m ./test/bench/ -args \
//	  -cluster.quiet-queues 625 -cluster.idle 30s      # 10,000 groups per node
//	go test -run '^$' -bench ClusterQuietScale -benchtime 1x -timeout 60m ./test/bench/ -args \
//	  -cluster.quiet-queues 100 -cluster.hogs 3 -cluster.watch 5m                    # 1,600 groups beside 3 busy loops
func BenchmarkClusterQuietScale(b *testing.B) {
	for range *quietHogs {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	if *quietPartitions != 1 && *quietPartitions != 16 {
		b.Fatalf("-cluster.quiet-partitions %d: a partitioned queue has 16 partitions, a plain one 1", *quietPartitions)
	}
	bc := startBench(b, 3)
	groups := *quietQueues * *quietPartitions
	ac := bc.Nodes[0].AdminClient(b) // without retries: what a first try answers
	b.ResetTimer()
	t0 := time.Now()
	var mu sync.Mutex
	var failed []string
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range *quietQueues {
		name := fmt.Sprintf("qs-%04d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			props := &admin.QueueProperties{}
			if *quietPartitions > 1 {
				props.EnablePartitioning = to.Ptr(true)
			}
			if _, err := ac.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: props}); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", name, firstLine(err)))
				mu.Unlock()
				// Try again until it is there.
				harness.WaitFor(b, 2*time.Minute, func() error {
					if r, err := ac.GetQueue(ctx, name, nil); err == nil && r != nil {
						return nil
					}
					_, err := ac.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: props})
					return err
				})
			}
		}()
	}
	wg.Wait()
	created := time.Since(t0)
	b.StopTimer()
	b.Logf("created %d queues (%d groups per node) in %v; %d failed at the first try", *quietQueues, groups, created.Round(time.Second), len(failed))
	for i, f := range failed {
		if i == 5 {
			b.Logf("  …")
			break
		}
		b.Logf("  %s", f)
	}
	b.ReportMetric(float64(len(failed)), "create-failures")
	b.ReportMetric(created.Seconds(), "create-s")

	// Until every replica on every node is quiet.
	t1 := time.Now()
	harness.WaitFor(b, 10*time.Minute, func() error {
		for _, n := range bc.Nodes {
			s, err := raftSums(n)
			if err != nil {
				return err
			}
			if s.replicas < groups || s.quiet < s.replicas {
				return fmt.Errorf("%s: %d of %d replicas quiet (%d of %d placed)", n.ID, s.quiet, s.replicas, s.replicas, groups)
			}
		}
		return nil
	})
	b.Logf("every replica quiet %v after the last create", time.Since(t1).Round(time.Second))
	b.ReportMetric(time.Since(t1).Seconds(), "to-quiet-s")

	before := make([]procStat, len(bc.Nodes))
	terms := make([]float64, len(bc.Nodes))
	for i, n := range bc.Nodes {
		before[i] = readProc(b, n.Pid())
		s, err := raftSums(n)
		if err != nil {
			b.Fatal(err)
		}
		terms[i] = s.terms
	}
	w0 := time.Now()
	profiled := profileIdle(b, bc.Nodes[0], fmt.Sprintf("quiet-%d", groups), *clusterIdle)
	time.Sleep(*clusterIdle) // the idle window: nothing talks to the cluster
	window := time.Since(w0)
	<-profiled
	var cpu, rss float64
	for i, n := range bc.Nodes {
		after := readProc(b, n.Pid())
		c := float64(after.ticks-before[i].ticks) / clockTicks / window.Seconds() * 100
		b.Logf("%s idle: %.2f %% of a core, RSS %.1f MiB", n.ID, c, float64(after.rssKiB)/1024)
		cpu += c / float64(len(bc.Nodes))
		rss = max(rss, float64(after.rssKiB)/1024)
	}
	b.ReportMetric(cpu, "idle-cpu-%/node")
	b.ReportMetric(rss, "max-rss-MiB/node")
	if *quietWatch > 0 {
		time.Sleep(*quietWatch) // watching idle groups for elections
	}
	var elections float64
	for i, n := range bc.Nodes {
		s, err := raftSums(n)
		if err != nil {
			b.Fatal(err)
		}
		elections += s.terms - terms[i]
		if s.quiet < s.replicas {
			b.Logf("%s: %d of %d replicas awake after the watch", n.ID, s.replicas-s.quiet, s.replicas)
		}
	}
	b.Logf("Raft terms grew by %.0f (summed over every replica of every node) in %v of idle", elections, (window + *quietWatch).Round(time.Second))
	b.ReportMetric(elections, "term-increments")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// sums is what a node's /metrics says about its replicas: how many, how many quiet, and
// the sum of their Raft terms.
type sums struct {
	replicas, quiet int
	terms           float64
}

func raftSums(n *harness.Node) (sums, error) {
	var s sums
	m, err := harness.ScrapeMetrics(n.Admin, 30*time.Second)
	if err != nil {
		return s, err
	}
	m.Each("quorumbus_partition_quiet", func(_ map[string]string, v float64) {
		s.replicas++
		if v == 1 {
			s.quiet++
		}
	})
	m.Each("quorumbus_partition_term", func(_ map[string]string, v float64) { s.terms += v })
	return s, nil
}
