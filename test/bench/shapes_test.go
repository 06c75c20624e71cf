package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// BenchmarkClusterShapes measures two namespace shapes a single-partition queue does not
// show, each on a fresh 3-node cluster with 3 replicas:
//
//   - partitioned-queue: one queue with EnablePartitioning (16 partitions, so 16 groups
//     on every node), its senders one per node, the broker spreading the sends over the
//     partitions and forwarding each to its partition's leader;
//   - topics=100x10: 100 topics with 10 subscriptions each (a topic partition's group
//     holds its subscriptions: 100 groups per node), a sender per topic on its leader's
//     node; every send is stored once and counted by all 10 subscriptions.
//
// For each: idle CPU, RSS and goroutines per node with everything idle (as
// BenchmarkClusterGroups), and the aggregate send rate with 256 sends in flight.
func BenchmarkClusterShapes(b *testing.B) {
	b.Run("partitioned-queue", func(b *testing.B) {
		bc := startBench(b, 3)
		q := uniqueName("pq")
		ac := bc.Nodes[0].AdminClient(b)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		partitioned := true
		if _, err := ac.CreateQueue(ctx, q, &admin.CreateQueueOptions{
			Properties: &admin.QueueProperties{EnablePartitioning: &partitioned}}); err != nil {
			b.Fatal(err)
		}
		rows := bc.waitLeaders(b, q)
		b.Logf("%d partitions", rows)
		var senders []*azservicebus.Sender
		for _, n := range bc.Nodes {
			s, err := bc.clients[n.ID].NewSender(q, nil)
			if err != nil {
				b.Fatal(err)
			}
			senders = append(senders, s)
		}
		bc.shape(b, fmt.Sprintf("pq%d", rows), rows, senders)
	})
	b.Run("topics=100x10", func(b *testing.B) {
		const topics, subs = 100, 10
		bc := startBench(b, 3)
		names := make([]string, topics)
		for i := range names {
			names[i] = uniqueName("t")
		}
		bc.createTopics(b, names, subs)
		parts := bc.placeLeaders(b, 3, names...)
		senders := make([]*azservicebus.Sender, topics)
		for i, t := range names {
			s, err := bc.clients[parts[t].Leader].NewSender(t, nil)
			if err != nil {
				b.Fatal(err)
			}
			senders[i] = s
		}
		bc.shape(b, "topics", topics, senders)
	})
}

// shape samples the idle cluster, sends -cluster.n messages through senders, then counts
// the goroutines (ending the nodes) and reports it all; groups is the number of
// partition groups on each node.
func (bc *benchCluster) shape(b *testing.B, name string, groups int, senders []*azservicebus.Sender) {
	b.Helper()
	cpu, rss := bc.idle(b, name)
	sendConcurrent(b, senders, 500, inflight) // warm every link
	d := sendPhase(b, bc, senders, *clusterN)
	for _, c := range bc.clients {
		c.Close(context.Background())
	}
	goroutines := quitAndCount(b, bc.Nodes)
	b.ReportMetric(float64(*clusterN)/d.Seconds(), "send-msgs/s")
	b.ReportMetric(cpu, "idle-cpu-%/node")
	b.ReportMetric(rss, "idle-rss-MiB/node")
	b.ReportMetric(goroutines, "goroutines/node")
	b.ReportMetric(float64(groups), "groups/node")
}

// createTopics creates the topics, each with subs subscriptions, up to 16 calls at a
// time.
func (bc *benchCluster) createTopics(b *testing.B, names []string, subs int) {
	b.Helper()
	ac := bc.Nodes[0].AdminClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(len(names)*subs)*100*time.Millisecond)
	defer cancel()
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	do := func(f func() error) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, t := range names {
		do(func() error {
			if _, err := ac.CreateTopic(ctx, t, nil); err != nil {
				return fmt.Errorf("create topic %s: %w", t, err)
			}
			return nil
		})
	}
	wg.Wait()
	for _, t := range names {
		for i := range subs {
			do(func() error {
				if _, err := ac.CreateSubscription(ctx, t, fmt.Sprintf("s%d", i), nil); err != nil {
					return fmt.Errorf("create subscription %s/s%d: %w", t, i, err)
				}
				return nil
			})
		}
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// waitLeaders waits until every partition of entity has a leader and returns how many
// partitions it has.
func (bc *benchCluster) waitLeaders(b *testing.B, entity string) int {
	b.Helper()
	n := 0
	harness.WaitFor(b, 2*time.Minute, func() error {
		rows, err := bc.partitions(b)
		if err != nil {
			return err
		}
		n = 0
		for _, r := range rows {
			if r.Entity != entity {
				continue
			}
			if r.Leader == "" {
				return fmt.Errorf("%s/%d has no leader", entity, r.Partition)
			}
			n++
		}
		if n == 0 {
			return fmt.Errorf("no partition of %s yet", entity)
		}
		return nil
	})
	return n
}
