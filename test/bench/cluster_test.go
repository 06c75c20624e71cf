package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// The cluster benchmarks start 3 quorumbus processes on this machine (test/harness
// StartCluster, fsync on) and drive them with the unmodified SDK. Each measurement is
// sized by the flags below, not by b.N: starting a cluster costs seconds, so every
// benchmark function is meant to run once. Run them with -benchtime 1x (make
// bench-cluster). Figures: docs/benchmarks.md, "multi-node cluster".
var (
	clusterN      = flag.Int("cluster.n", 20000, "messages per throughput measurement of the cluster benchmarks")
	clusterLatN   = flag.Int("cluster.latn", 10000, "messages of each 1000 msg/s latency measurement")
	clusterRounds = flag.Int("cluster.rounds", 8, "interleaved rounds (a multiple of 4) of the forwarding comparison")
	clusterIdle   = flag.Duration("cluster.idle", 10*time.Second, "how long idle CPU is sampled")
	clusterGroups = flag.String("cluster.groups", "1,16,64", "partitions per node compared by BenchmarkClusterGroups")
)

// inflight is how many acknowledged sends are outstanding at once in the send tests.
const inflight = 256

// benchCluster is a 3-node cluster and one SDK client per node.
type benchCluster struct {
	*harness.Cluster
	clients map[string]*azservicebus.Client // by node ID
}

var queueSeq atomic.Int64

// uniqueName gives each queue a fresh name, so that a benchmark run twice (-benchtime
// Nx with N > 1) never finds the previous run's messages.
func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, queueSeq.Add(1)) }

// startBench starts 3 nodes with --replicas replicas and args and checks that none runs
// without fsync.
func startBench(b *testing.B, replicas int, args ...string) *benchCluster {
	b.Helper()
	c := harness.StartCluster(b, 3, harness.WithArgs(append([]string{"--replicas", strconv.Itoa(replicas)}, args...)...))
	bc := &benchCluster{Cluster: c, clients: map[string]*azservicebus.Client{}}
	for _, n := range c.Nodes {
		checkFsync(b, n)
		bc.clients[n.ID] = n.Client(b)
	}
	return bc
}

// checkFsync fails the benchmark if a node's command line or environment mentions a
// sync option. (cmd/quorumbus has no flag that turns fsync off; cluster.Config.Storage.NoSync
// is reachable from Go tests only, and this guards against one being added and used.)
func checkFsync(b *testing.B, n *harness.Node) {
	b.Helper()
	for _, f := range []string{"cmdline", "environ"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", n.Pid(), f))
		if err != nil {
			b.Fatalf("%s: %v", n.ID, err)
		}
		for _, arg := range strings.Split(string(raw), "\x00") {
			if strings.HasPrefix(arg, "QUORUMBUS_") || f == "cmdline" {
				if strings.Contains(strings.ToLower(arg), "sync") {
					b.Fatalf("%s runs with %q: the cluster benchmarks need fsync on", n.ID, arg)
				}
			}
		}
	}
}

// partRow is one row of `qbctl cluster partitions -o json`.
type partRow struct {
	Entity    string `json:"Entity"`
	Partition int    `json:"Partition"`
	Group     uint32 `json:"GroupID"`
	Leader    string `json:"Leader"`
	Replicas  []struct {
		Node  string `json:"Node"`
		Voter bool   `json:"Voter"`
	} `json:"Replicas"`
}

func (p partRow) hosts(id string) bool {
	return slices.ContainsFunc(p.Replicas, func(r struct {
		Node  string `json:"Node"`
		Voter bool   `json:"Voter"`
	}) bool {
		return r.Node == id
	})
}

func (bc *benchCluster) partitions(b *testing.B) ([]partRow, error) {
	b.Helper()
	out, err := bc.Nodes[0].Qbctl(b, "cluster", "partitions", "-o", "json")
	if err != nil {
		return nil, err
	}
	var rows []partRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("qbctl cluster partitions: %v\n%s", err, out)
	}
	return rows, nil
}

// createQueues creates single-partition queues.
func (bc *benchCluster) createQueues(b *testing.B, names ...string) {
	b.Helper()
	ac := bc.Nodes[0].AdminClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(len(names))*time.Second)
	defer cancel()
	// Up to 16 at a time: each create returns once its group has a leader, and most
	// of that is waiting for the new group's first election.
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(names))
	for _, q := range names {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			if _, err := ac.CreateQueue(ctx, q, nil); err != nil {
				errs <- fmt.Errorf("create %s: %w", q, err)
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// placeLeaders waits until every partition of the named entities has its replicas and
// a leader on its placement's first replica (the preferred leader, which placement
// rotates over the nodes), moving leaderships there with `qbctl partition
// transfer-leader`. Leader balancing then leaves them alone, so they stay put while the
// benchmark runs. It returns each entity's (single) partition.
func (bc *benchCluster) placeLeaders(b *testing.B, replicas int, names ...string) map[string]partRow {
	b.Helper()
	want := map[string]bool{}
	for _, q := range names {
		want[strings.ToLower(q)] = true
	}
	var got map[string]partRow
	asked := map[uint32]time.Time{}
	harness.WaitFor(b, 3*time.Minute, func() error {
		rows, err := bc.partitions(b)
		if err != nil {
			return err
		}
		got = map[string]partRow{}
		var wrong []string
		for _, p := range rows {
			if !want[strings.ToLower(p.Entity)] {
				continue
			}
			got[strings.ToLower(p.Entity)] = p
			if len(p.Replicas) != replicas || p.Leader == "" {
				wrong = append(wrong, fmt.Sprintf("%s: leader %q, %d replicas", p.Entity, p.Leader, len(p.Replicas)))
				continue
			}
			if pref := p.Replicas[0].Node; p.Leader != pref {
				wrong = append(wrong, fmt.Sprintf("%s: leader %s, preferred %s", p.Entity, p.Leader, pref))
				if time.Since(asked[p.Group]) > 3*time.Second {
					asked[p.Group] = time.Now()
					bc.Nodes[0].Qbctl(b, "partition", "transfer-leader", strconv.FormatUint(uint64(p.Group), 10), "--to", pref)
				}
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("%d of %d entities have partitions", len(got), len(want))
		}
		if len(wrong) > 0 {
			return fmt.Errorf("%d partitions not placed yet, e.g. %s", len(wrong), wrong[0])
		}
		return nil
	})
	return got
}

// sendConcurrent sends n 1 KiB messages from `workers` goroutines, each sending one
// message at a time and waiting for its acknowledgement, spread over senders, and
// returns how long that took.
func sendConcurrent(b *testing.B, senders []*azservicebus.Sender, n, workers int) time.Duration {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(s *azservicebus.Sender) {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}(senders[w%len(senders)])
	}
	wg.Wait()
	d := time.Since(start)
	if e := first.Load(); e != nil {
		b.Fatal(*e)
	}
	return d
}

// sendPhase is sendConcurrent plus what it cost: the CPU of every node and of this
// process (as a percentage of one core; the machine has 2), and the disk flushes
// (fsync/fdatasync reaching the device) per message, machine-wide.
// The disk is shared with other users' processes, whose fsyncs compete with the
// cluster's: the flush rate of the 2 s before the phase, with the cluster idle (idle
// groups write nothing), is reported as outside-flushes/s.
func sendPhase(b *testing.B, bc *benchCluster, senders []*azservicebus.Sender, n int) time.Duration {
	b.Helper()
	t0, f0 := time.Now(), diskFlushes(b)
	time.Sleep(2 * time.Second) // sampling other processes' disk flushes
	outside := float64(diskFlushes(b)-f0) / time.Since(t0).Seconds()
	c0, f0 := readCPU(b, bc.Nodes), diskFlushes(b)
	d := sendConcurrent(b, senders, n, inflight)
	cpu, flushes := readCPU(b, bc.Nodes).sub(c0), diskFlushes(b)-f0
	b.ReportMetric(float64(n)/d.Seconds(), "msgs/s")
	b.ReportMetric((cpu.nodes()+cpu[len(cpu)-1])/d.Seconds()/1e4, "cpu-%")
	b.ReportMetric(float64(flushes)/float64(n), "flushes/msg")
	b.ReportMetric(outside, "outside-flushes/s")
	b.Logf("send: CPU µs per message by process (%s, client) %s; %.0f disk flushes/s, %.0f/s just before",
		nodeIDs(bc.Nodes), cpu.perMsg(float64(n)), float64(flushes)/d.Seconds(), outside)
	return d
}

// diskFlushes is the number of flush requests the block devices completed so far
// (/proc/diskstats field 15, Linux 5.5 and later): every fsync and fdatasync on ext4
// reaches the device as one.
func diskFlushes(b *testing.B) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 20 || strings.HasPrefix(f[2], "loop") || strings.HasPrefix(f[2], "ram") {
			continue
		}
		n, _ := strconv.ParseInt(f[18], 10, 64)
		total += n
	}
	return total
}

// BenchmarkCluster: one queue (one partition, 3 replicas) on a 3-node cluster, the
// client connected to the node that leads it.
func BenchmarkCluster(b *testing.B) {
	bc := startBench(b, 3)
	// leaderClient creates a fresh queue and returns the client on its leader's node.
	leaderClient := func(b *testing.B, prefix string) (string, *azservicebus.Client) {
		q := uniqueName(prefix)
		bc.createQueues(b, q)
		p := bc.placeLeaders(b, 3, q)[q]
		b.Logf("%s: leader %s", q, p.Leader)
		return q, bc.clients[p.Leader]
	}

	// 256 goroutines, one SendMessage each at a time on one sender link.
	b.Run("Send256", func(b *testing.B) {
		q, c := leaderClient(b, "send")
		s, err := c.NewSender(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		sendConcurrent(b, []*azservicebus.Sender{s}, 500, inflight) // warm the link
		sendPhase(b, bc, []*azservicebus.Sender{s}, *clusterN)
	})

	// Peek-lock receive of up to 100, each message completed (BenchmarkReceiveComplete's
	// pattern), from a queue pre-filled with cluster.n messages.
	b.Run("ReceiveComplete", func(b *testing.B) {
		q, c := leaderClient(b, "recv")
		s, err := c.NewSender(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		sendBatches(b, s, *clusterN)
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		d := receiveComplete(b, r, *clusterN)
		b.ReportMetric(float64(*clusterN)/d.Seconds(), "msgs/s")
	})

	// Send -> receive latency at an offered 1000 msg/s.
	b.Run("Latency1000", func(b *testing.B) {
		q, c := leaderClient(b, "lat")
		l := measureLatency(b, c, q, *clusterLatN, 1000)
		l.report(b, "")
	})
}

// receiveComplete receives n messages in peek-lock, up to 100 per call, completing the
// messages of each call concurrently before the next, and returns how long it took.
func receiveComplete(b *testing.B, r *azservicebus.Receiver, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < n; {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		msgs, err := r.ReceiveMessages(rctx, min(100, n-done), nil)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			b.Fatalf("no message within 30 s after %d of %d", done, n)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(msgs))
		for _, m := range msgs {
			wg.Add(1)
			go func(m *azservicebus.ReceivedMessage) {
				defer wg.Done()
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					errs <- err
				}
			}(m)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(fmt.Errorf("complete: %w", err))
		}
		done += len(msgs)
	}
	return time.Since(start)
}

// latencies are send->receive latencies measured at a fixed offered rate.
type latencies struct {
	samples  []time.Duration
	achieved float64 // msgs/s received
	behind   time.Duration
}

func (l *latencies) pct(p float64) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	s := slices.Clone(l.samples)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (l *latencies) report(b *testing.B, prefix string) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(l.pct(0.50)), prefix+"p50-ms")
	b.ReportMetric(ms(l.pct(0.99)), prefix+"p99-ms")
	b.ReportMetric(ms(l.pct(1)), prefix+"max-ms")
	b.ReportMetric(l.achieved, prefix+"msgs/s")
	b.Logf("%sproducer fell behind its schedule by at most %v", prefix, l.behind.Round(time.Millisecond))
}

// measureLatency sends n 1 KiB messages to the empty queue q, open loop at rate
// messages/s with at most 256 sends in flight, and receives them on the same client in
// peek-lock (up to 256 per call, returning 1 ms after the first message), completing
// each asynchronously. Latency is receive time minus the message's scheduled send time,
// so a stalled producer counts.
func measureLatency(b *testing.B, c *azservicebus.Client, q string, n, rate int) *latencies {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n/rate)*time.Second+2*time.Minute)
	defer cancel()
	s, err := c.NewSender(q, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	r, err := c.NewReceiverForQueue(q, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())

	type job struct {
		seq   int
		sched time.Time
	}
	jobs := make(chan job)
	var sendErr atomic.Pointer[error]
	var senders sync.WaitGroup
	for w := 0; w < inflight; w++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for j := range jobs {
				m := make([]byte, len(body))
				binary.BigEndian.PutUint64(m, uint64(j.sched.UnixNano()))
				binary.BigEndian.PutUint64(m[8:], uint64(j.seq))
				if err := s.SendMessage(ctx, &azservicebus.Message{Body: m}, nil); err != nil {
					sendErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}

	l := &latencies{}
	recvDone := make(chan error, 1)
	var completers sync.WaitGroup
	toComplete := make(chan *azservicebus.ReceivedMessage, inflight)
	for w := 0; w < 64; w++ {
		completers.Add(1)
		go func() {
			defer completers.Done()
			for m := range toComplete {
				r.CompleteMessage(ctx, m, nil) // a failed completion only redelivers; duplicates are ignored below
			}
		}()
	}
	start := time.Now().Add(50 * time.Millisecond)
	go func() {
		seen := make([]bool, n)
		got := 0
		var last time.Time
		opts := &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Millisecond}
		for got < n {
			msgs, err := r.ReceiveMessages(ctx, inflight, opts)
			if err != nil {
				recvDone <- err
				return
			}
			now := time.Now()
			for _, m := range msgs {
				toComplete <- m
				if len(m.Body) < 16 {
					continue
				}
				seq := int(binary.BigEndian.Uint64(m.Body[8:]))
				if seq < 0 || seq >= n || seen[seq] {
					continue
				}
				seen[seq] = true
				got++
				l.samples = append(l.samples, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(m.Body)))))
				last = now
			}
		}
		l.achieved = float64(n) / last.Sub(start).Seconds()
		recvDone <- nil
	}()

	interval := time.Second / time.Duration(rate)
	for i := 0; i < n; i++ {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			time.Sleep(d) // pacing the open-loop producer
		} else if -d > l.behind {
			l.behind = -d
		}
		jobs <- job{i, sched}
	}
	close(jobs)
	senders.Wait()
	if e := sendErr.Load(); e != nil {
		b.Fatal(*e)
	}
	err = <-recvDone
	close(toComplete)
	completers.Wait()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkClusterForwarding compares a client connected to the node that leads the
// queue's partition with one connected to a node that hosts no replica of it (3 nodes,
// --replicas 2), so that every operation of the second is forwarded to the leader over
// the cluster RPC. The two alternate in rounds (ABBA order), so that load from other
// processes on the machine falls on both alike.
func BenchmarkClusterForwarding(b *testing.B) {
	bc := startBench(b, 2)
	q := uniqueName("fwd")
	bc.createQueues(b, q)
	p := bc.placeLeaders(b, 2, q)[q]
	var outsider string
	for _, n := range bc.Nodes {
		if !p.hosts(n.ID) {
			outsider = n.ID
		}
	}
	if outsider == "" {
		b.Fatalf("every node hosts %s: %+v", q, p)
	}
	b.Logf("%s: leader %s, replicas on %s and %s, outsider %s", q, p.Leader, p.Replicas[0].Node, p.Replicas[1].Node, outsider)
	paths := []struct {
		name string
		c    *azservicebus.Client
	}{{"leader", bc.clients[p.Leader]}, {"remote", bc.clients[outsider]}}
	senders := make([]*azservicebus.Sender, 2)
	receivers := make([]*azservicebus.Receiver, 2)
	for i, pa := range paths {
		var err error
		if senders[i], err = pa.c.NewSender(q, nil); err != nil {
			b.Fatal(err)
		}
		if receivers[i], err = pa.c.NewReceiverForQueue(q, nil); err != nil {
			b.Fatal(err)
		}
	}
	rounds := max(4, *clusterRounds/4*4)
	per := *clusterN / rounds
	// order is ABBA: rounds 0 and 3 of every 4 start with the leader.
	order := func(r int) []int {
		if r%4 == 0 || r%4 == 3 {
			return []int{0, 1}
		}
		return []int{1, 0}
	}
	for i := range paths { // warm both links
		sendConcurrent(b, senders[i:i+1], 500, inflight)
	}
	var sendT, recvT [2]time.Duration
	var sendCPU, recvCPU [2]cpuUse // CPU time used by each process during each path's rounds
	var sendFlushes [2]int64
	for r := 0; r < rounds; r++ {
		for _, i := range order(r) {
			c0, f0 := readCPU(b, bc.Nodes), diskFlushes(b)
			sendT[i] += sendConcurrent(b, senders[i:i+1], per, inflight)
			sendCPU[i].add(readCPU(b, bc.Nodes).sub(c0))
			sendFlushes[i] += diskFlushes(b) - f0
		}
	}
	left := 1000 + rounds*per*2 // what the queue holds now
	for r := 0; r < rounds; r++ {
		for _, i := range order(r) {
			c0 := readCPU(b, bc.Nodes)
			recvT[i] += receiveComplete(b, receivers[i], per)
			recvCPU[i].add(readCPU(b, bc.Nodes).sub(c0))
			left -= per
		}
	}
	receiveComplete(b, receivers[0], left) // empty the queue for the latency rounds
	msgs := float64(rounds * per)
	for i := range paths {
		b.ReportMetric(msgs/sendT[i].Seconds(), "send-"+paths[i].name+"-msgs/s")
		b.ReportMetric(msgs/recvT[i].Seconds(), "rcv-"+paths[i].name+"-msgs/s")
		b.ReportMetric(sendCPU[i].nodes()/msgs, "send-"+paths[i].name+"-node-cpu-us/msg")
		b.ReportMetric((sendCPU[i].nodes()+sendCPU[i][len(bc.Nodes)])/sendT[i].Seconds()/1e4, "send-"+paths[i].name+"-cpu-%")
		b.ReportMetric(float64(sendFlushes[i])/msgs, "send-"+paths[i].name+"-flushes/msg")
		b.ReportMetric(recvCPU[i].nodes()/msgs, "rcv-"+paths[i].name+"-node-cpu-us/msg")
		b.Logf("%s path, CPU µs per message by process (%v, client): send %s, receive+complete %s", paths[i].name,
			nodeIDs(bc.Nodes), sendCPU[i].perMsg(msgs), recvCPU[i].perMsg(msgs))
	}
	b.ReportMetric(100*(sendT[1].Seconds()/sendT[0].Seconds()-1), "send-fwd-overhead-%")
	b.ReportMetric(100*(recvT[1].Seconds()/recvT[0].Seconds()-1), "rcv-fwd-overhead-%")

	// Latency at 1000 msg/s, in four segments in ABBA order.
	var lat [2]latencies
	for r := 0; r < 4; r++ {
		for _, i := range order(r)[:1] {
			l := measureLatency(b, paths[i].c, q, *clusterLatN/4, 1000)
			lat[i].samples = append(lat[i].samples, l.samples...)
			lat[i].achieved += l.achieved / 2
			lat[i].behind = max(lat[i].behind, l.behind)
		}
	}
	for i := range paths {
		lat[i].report(b, paths[i].name+"-")
	}
	if after := bc.placeLeaders(b, 2, q)[q]; after.Leader != p.Leader {
		b.Errorf("leadership moved from %s to %s during the benchmark", p.Leader, after.Leader)
	}
}

// BenchmarkClusterGroups compares a cluster whose nodes each host 1, 16 or 64 partition
// groups (single-partition queues, 3 replicas on 3 nodes, leaders spread by placement):
// idle CPU and resident memory per node with every group idle; then aggregate send
// throughput, 256 sends in flight spread evenly over the queues, each queue's sender on
// its leader's node; then each node's goroutines (from the stacks the runtime prints on
// SIGQUIT, with the clients closed). A fresh cluster per size.
func BenchmarkClusterGroups(b *testing.B) {
	var sizes []int
	for _, f := range strings.Split(*clusterGroups, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g < 1 {
			b.Fatalf("-cluster.groups %q: %v", *clusterGroups, err)
		}
		sizes = append(sizes, g)
	}
	for _, g := range sizes {
		b.Run(fmt.Sprintf("groups=%d", g), func(b *testing.B) { benchGroups(b, g, sizes) })
	}
}

// benchGroups measures a cluster with groups partition groups per node. On the largest
// one it also sends over the first k queues for every k in sizes, in interleaved rounds
// (ABC CBA ...), so that the rates of the sizes are compared under the same load from
// other processes (the separate clusters run minutes apart).
func benchGroups(b *testing.B, groups int, sizes []int) {
	bc := startBench(b, 3)
	names := make([]string, groups)
	for i := range names {
		names[i] = uniqueName(fmt.Sprintf("g%d", groups))
	}
	bc.createQueues(b, names...)
	parts := bc.placeLeaders(b, 3, names...)
	leads := map[string]int{}
	for _, p := range parts {
		leads[p.Leader]++
	}
	b.Logf("leaders per node: %v", leads)

	cpu, rss := bc.idle(b, fmt.Sprint(groups))

	senders := make([]*azservicebus.Sender, groups)
	for i, q := range names {
		s, err := bc.clients[parts[q].Leader].NewSender(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		senders[i] = s
	}
	sendConcurrent(b, senders, 500, inflight) // warm every link
	sendPhase(b, bc, senders, *clusterN)
	if groups == slices.Max(sizes) && len(sizes) > 1 {
		const rounds = 4
		per := *clusterN / rounds
		sets := make([][]*azservicebus.Sender, len(sizes))
		nodes := make([][]*harness.Node, len(sizes))
		for j, k := range sizes {
			sets[j], nodes[j] = senders[:k], bc.Nodes
		}
		took, cpu, flushes := interleaved(b, rounds, per, sets, nodes)
		for j, k := range sizes {
			rate := float64(rounds*per) / took[j].Seconds()
			b.Logf("interleaved, %d queues: CPU µs per message by process (%s, client) %s; %.2f disk flushes/msg", k,
				nodeIDs(bc.Nodes), cpu[j].perMsg(float64(rounds*per)), float64(flushes[j])/float64(rounds*per))
			b.ReportMetric(rate, fmt.Sprintf("interleaved-%dq-msgs/s", k))
			b.ReportMetric(took[0].Seconds()/took[j].Seconds(), fmt.Sprintf("interleaved-%dq-vs-%dq", k, sizes[0]))
		}
	}

	for _, c := range bc.clients {
		c.Close(context.Background())
	}
	goroutines := quitAndCount(b, bc.Nodes)

	b.ReportMetric(cpu, "idle-cpu-%/node")
	b.ReportMetric(rss, "idle-rss-MiB/node")
	b.ReportMetric(goroutines, "goroutines/node")
	b.ReportMetric(cpu/float64(groups), "idle-cpu-%/group")
	b.ReportMetric(rss/float64(groups), "idle-rss-MiB/group")
	b.ReportMetric(goroutines/float64(groups), "goroutines/group")
}

// interleaved sends per messages over each set of senders in turn (256 in flight), in
// rounds whose order reverses every other one (ABC CBA ...), so that outside load falls
// on every set alike. It returns, per set, the time its sends took, the CPU used
// meanwhile by the nodes that serve it (nodes[i]) and by this process, and the disk
// flushes (machine-wide).
func interleaved(b *testing.B, rounds, per int, sets [][]*azservicebus.Sender, nodes [][]*harness.Node) ([]time.Duration, []cpuUse, []int64) {
	b.Helper()
	took := make([]time.Duration, len(sets))
	cpu := make([]cpuUse, len(sets))
	flushes := make([]int64, len(sets))
	for r := 0; r < rounds; r++ {
		for k := range sets {
			i := k
			if r%2 == 1 {
				i = len(sets) - 1 - k
			}
			c0, f0 := readCPU(b, nodes[i]), diskFlushes(b)
			took[i] += sendConcurrent(b, sets[i], per, inflight)
			cpu[i].add(readCPU(b, nodes[i]).sub(c0))
			flushes[i] += diskFlushes(b) - f0
		}
	}
	return took, cpu, flushes
}

// idle samples the cluster with nothing talking to it for -cluster.idle, after 2 s for
// the last leadership transfers and snapshots to settle: it reports the machine's disk
// flushes per second as idle-flushes/s and returns the mean CPU (% of a core) and RSS
// (MiB) per node. name labels the profiles profileIdle saves.
func (bc *benchCluster) idle(b *testing.B, name string) (cpu, rss float64) {
	b.Helper()
	time.Sleep(2 * time.Second)
	before := make([]procStat, len(bc.Nodes))
	for i, n := range bc.Nodes {
		before[i] = readProc(b, n.Pid())
	}
	t0, f0 := time.Now(), diskFlushes(b)
	profiled := profileIdle(b, bc.Nodes[0], name, *clusterIdle)
	time.Sleep(*clusterIdle) // the idle window: nothing talks to the cluster
	window := time.Since(t0)
	<-profiled
	b.ReportMetric(float64(diskFlushes(b)-f0)/window.Seconds(), "idle-flushes/s")
	for i, n := range bc.Nodes {
		after := readProc(b, n.Pid())
		c := float64(after.ticks-before[i].ticks) / clockTicks / window.Seconds() * 100
		b.Logf("%s idle: %.2f %% of a core, RSS %.1f MiB", n.ID, c, float64(after.rssKiB)/1024)
		cpu += c / float64(len(bc.Nodes))
		rss += float64(after.rssKiB) / 1024 / float64(len(bc.Nodes))
	}
	return cpu, rss
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

type procStat struct {
	ticks  uint64 // utime + stime
	rssKiB int64
}

// readProc reads a process's CPU time and resident set size from /proc.
func readProc(b *testing.B, pid int) procStat {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may contain spaces:
	// state is field 3, utime 14, stime 15.
	rest := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, err1 := strconv.ParseUint(rest[11], 10, 64)
	st, err2 := strconv.ParseUint(rest[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	ps := procStat{ticks: ut + st}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			ps.rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return ps
}

// cpuUse is CPU time (µs, user + system) used by each node and, last, by this process
// (the SDK clients).
type cpuUse []float64

// readCPU reads the CPU time used so far by each node and by this process.
func readCPU(b *testing.B, nodes []*harness.Node) cpuUse {
	b.Helper()
	u := make(cpuUse, 0, len(nodes)+1)
	for _, n := range nodes {
		u = append(u, float64(readProc(b, n.Pid()).ticks)*1e6/clockTicks)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return append(u, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e3)
}

func (u cpuUse) sub(v cpuUse) cpuUse {
	out := make(cpuUse, len(u))
	for i := range u {
		out[i] = u[i] - v[i]
	}
	return out
}

func (u *cpuUse) add(v cpuUse) {
	if *u == nil {
		*u = make(cpuUse, len(v))
	}
	for i := range v {
		(*u)[i] += v[i]
	}
}

// nodes is the CPU time of all nodes together.
func (u cpuUse) nodes() float64 {
	var t float64
	for _, x := range u[:len(u)-1] {
		t += x
	}
	return t
}

func (u cpuUse) perMsg(n float64) string {
	parts := make([]string, len(u))
	for i, x := range u {
		parts[i] = fmt.Sprintf("%.0f", x/n)
	}
	return strings.Join(parts, "/")
}

func nodeIDs(nodes []*harness.Node) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return strings.Join(ids, "/")
}

var goroutineHeader = regexp.MustCompile(`(?m)^goroutine \d+ .*\[`)

var createdBy = regexp.MustCompile(`(?m)^created by (\S+)`)

// quitAndCount ends every node with SIGQUIT at once and returns the mean number of
// goroutines whose stacks they printed. It logs the first node's goroutines by the
// function that started them, the most frequent first: which are hashicorp/raft's
// own and which are the project's.
func quitAndCount(b *testing.B, nodes []*harness.Node) float64 {
	b.Helper()
	counts := make([]int, len(nodes))
	dumps := make([]string, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := n.Quit()
			if i := strings.Index(out, "SIGQUIT"); i >= 0 {
				out = out[i:]
			}
			counts[i] = len(goroutineHeader.FindAllStringIndex(out, -1))
			dumps[i] = out
		}()
	}
	wg.Wait()
	by := map[string]int{}
	for _, m := range createdBy.FindAllStringSubmatch(dumps[0], -1) {
		by[m[1]]++
	}
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(x, y string) int { return by[y] - by[x] })
	var top []string
	for _, k := range kinds[:min(len(kinds), 16)] {
		top = append(top, fmt.Sprintf("%d %s", by[k], k))
	}
	b.Logf("%s's goroutines by creator: %s", nodes[0].ID, strings.Join(top, "; "))
	total := 0
	for i, c := range counts {
		if c == 0 {
			b.Fatalf("%s printed no goroutine on SIGQUIT", nodes[i].ID)
		}
		total += c
	}
	b.Logf("goroutines per node: %v", counts)
	return float64(total) / float64(len(nodes))
}

var failoverQueues = flag.Int("cluster.failover-queues", 900, "single-partition queues of BenchmarkClusterFailoverQuiet (a third led by each node)")

// BenchmarkClusterFailoverQuiet: a 3-node cluster with -cluster.failover-queues idle
// single-partition queues, each node leading a third of them; kill -9 of one node, then
// the time until every queue it led accepts an SDK send through a surviving node
// (each queue tried over and over, 32 at a time, every try bounded by 2 s). Reported:
// the slowest queue and the median. One of the queues the node leads is kept busy
// through the kill (one send after another through a surviving node): busy-s is the
// time from the kill to the end of its first send that started after it and succeeded.
func BenchmarkClusterFailoverQuiet(b *testing.B) {
	bc := startBench(b, 3)
	names := make([]string, *failoverQueues)
	for i := range names {
		names[i] = uniqueName("fo")
	}
	bc.createQueues(b, names...)
	parts := bc.placeLeaders(b, 3, names...)
	victim := bc.Nodes[0]
	via := bc.clients[bc.Nodes[1].ID]
	var led []string
	for q, p := range parts {
		if p.Leader == victim.ID {
			led = append(led, q)
		}
	}
	b.Logf("%s leads %d of %d queues", victim.ID, len(led), len(names))
	senders := map[string]*azservicebus.Sender{}
	for _, q := range led {
		s, err := via.NewSender(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		senders[q] = s
	}
	// The same sends before the kill, the groups quiet: what a send to a quiet group
	// costs through a follower's node (it wakes the group).
	quiet := func(awake int) {
		harness.WaitFor(b, 2*time.Minute, func() error {
			for _, n := range bc.Nodes {
				if !n.Running() {
					continue
				}
				s, err := raftSums(n)
				if err != nil {
					return err
				}
				if s.replicas-s.quiet > awake {
					return fmt.Errorf("%s: %d of %d replicas awake", n.ID, s.replicas-s.quiet, s.replicas)
				}
			}
			return nil
		})
	}
	quiet(0)
	pre := sendEach(b, senders, led, time.Now())
	slices.Sort(pre)
	if pre[0] < 0 {
		b.Fatalf("a quiet queue accepted no send within 2 minutes before the kill")
	}
	quiet(0) // reported below: ResetTimer drops metrics reported before it

	// The first queue the victim leads is kept busy (sends one after another through
	// a surviving node) through the kill; the others are quiet.
	busy := led[0]
	led = led[1:]
	var killed atomic.Int64 // UnixNano of the kill, 0 before
	busyTook := make(chan time.Duration, 1)
	stopBusy := make(chan struct{})
	defer close(stopBusy)
	go func() {
		for {
			select {
			case <-stopBusy:
				return
			default:
			}
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := senders[busy].SendMessage(ctx, &azservicebus.Message{Body: body}, nil)
			cancel()
			if k := killed.Load(); err == nil && k != 0 && t0.UnixNano() > k {
				busyTook <- time.Since(time.Unix(0, k))
				return
			}
		}
	}()
	quiet(1) // every group but the busy one quiet before the kill
	b.ResetTimer()
	victim.Kill()
	start := time.Now()
	killed.Store(start.UnixNano())
	took := sendEach(b, senders, led, start)
	b.StopTimer()
	slices.Sort(took)
	if len(took) == 0 || took[0] < 0 {
		b.Fatalf("a queue accepted no send within 2 minutes")
	}
	b.ReportMetric(pre[len(pre)-1].Seconds(), "before-slowest-s")
	b.ReportMetric(pre[len(pre)/2].Seconds(), "before-median-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "slowest-s")
	b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
	b.ReportMetric(float64(len(led)), "groups-led")
	select {
	case d := <-busyTook:
		b.ReportMetric(d.Seconds(), "busy-s")
	case <-time.After(2 * time.Minute):
		b.Fatalf("the busy queue %s accepted no send within 2 minutes of the kill", busy)
	}
}

// sendEach sends one message to each queue of qs through its sender, 32 queues at a
// time, each tried over and over (every try bounded by 2 s) for up to 2 minutes after
// start, and returns for each the time from start to its first acknowledged send (-1:
// none).
func sendEach(b *testing.B, senders map[string]*azservicebus.Sender, qs []string, start time.Time) []time.Duration {
	took := make([]time.Duration, len(qs))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for time.Since(start) < 2*time.Minute {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := senders[q].SendMessage(ctx, &azservicebus.Message{Body: []byte("m")}, nil)
				cancel()
				if err == nil {
					took[i] = time.Since(start)
					return
				}
			}
			took[i] = -1
		}()
	}
	wg.Wait()
	return took
}

// profileIdle, with QB_BENCH_PROFILE_DIR set (and the nodes started with
// QUORUMBUS_PPROF=true), saves node n's CPU profile over the idle window and its heap
// profile after it as <dir>/idle-<name>-{cpu,heap}.pprof, for a per-component view of
// what an idle group costs. The channel closes when both are saved (at once without).
func profileIdle(b *testing.B, n *harness.Node, name string, window time.Duration) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("QB_BENCH_PROFILE_DIR")
	if dir == "" {
		close(done)
		return done
	}
	label := name
	save := func(path, kind string) {
		resp, err := http.Get("http://" + n.Admin + path)
		if err != nil {
			b.Logf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("idle-%s-%s.pprof", label, kind)))
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	}
	go func() {
		defer close(done)
		save(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())), "cpu")
		save("/debug/pprof/heap", "heap")
	}()
	return done
}
