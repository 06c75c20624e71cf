package partition

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// Benchmarks: 3 replicas in one process over the loopback mux, fsync on (NoSync false),
// default raft timing. Figures go to docs/benchmarks.md "## partition".
//
//	go test -run '^$' -bench 'Enqueue|ReceiveComplete' -benchtime 30000x ./partition/
//	go test -run '^$' -bench IdleGroups -benchtime 1x ./partition/
//
// QB_LOG_STORE=wal or shared runs them on raft-wal or the shared engine instead of bolt
// (Config.LogStore, harness_test.go).

const benchSenders = 256

func benchCluster(b *testing.B, groups int, tune ...func(*Config)) *cluster {
	c := newCluster(b, 3, func(cfg *Config) {
		d := DefaultConfig()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = d.HeartbeatTimeout, d.ElectionTimeout
		cfg.LeaderLeaseTimeout, cfg.CommitTimeout = d.LeaderLeaseTimeout, d.CommitTimeout
		for _, f := range tune {
			f(cfg)
		}
	})
	for g := 1; g <= groups; g++ {
		c.addGroup(testQueue(uint32(g), 60*time.Second))
	}
	for g := 1; g <= groups; g++ {
		c.leader(uint32(g), 30*time.Second)
	}
	return c
}

// runConcurrent runs op(i) for i in [0,n) from `workers` goroutines and reports
// throughput and the p50/p99 of op's latency (which for a write is its commit latency
// as the caller sees it: queueing + one raft round with fsync on a quorum).
func runConcurrent(b *testing.B, n, workers int, unit string, op func(i int) error) {
	lat := make([][]time.Duration, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					failed.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(n)/el.Seconds(), unit+"/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkEnqueue1KiB: 256 concurrent senders, one 1 KiB message per Enqueue, on one
// 3-replica partition. b.N messages in total.
func BenchmarkEnqueue1KiB(b *testing.B) { benchEnqueue(b, benchSenders) }

// BenchmarkEnqueue1KiBW1: one sender, one 1 KiB message per Enqueue, each waiting for
// the one before (W=1): every message is its own raft entry, so this is the latency of
// one commit round (leader append, replication, follower append, both fsynced) end to
// end.
func BenchmarkEnqueue1KiBW1(b *testing.B) { benchEnqueue(b, 1) }

// benchEnqueue sends b.N messages of 1 KiB with the given number of concurrent senders,
// one message per Enqueue, to one 3-replica partition.
func benchEnqueue(b *testing.B, senders int) {
	c := benchCluster(b, 1)
	_, lp := c.leader(1, time.Second)
	payload := make([]byte, 1024)
	ctx := ctxT(b, 10*time.Minute)
	b.SetBytes(1024)
	before := lp.raft.LastIndex()
	runConcurrent(b, b.N, senders, "msgs", func(i int) error {
		_, err := lp.Enqueue(ctx, []*fsm.Message{msg("m", payload)})
		return err
	})
	b.ReportMetric(float64(b.N)/float64(lp.raft.LastIndex()-before), "msgs/entry")
}

// BenchmarkEnqueue1KiB4Groups: the same 256 senders spread over 4 partitions (groups),
// whose leaders share the 3 nodes: aggregate acknowledged enqueues/s.
func BenchmarkEnqueue1KiB4Groups(b *testing.B) {
	const groups = 4
	c := benchCluster(b, groups)
	var leaders []*Partition
	for g := 1; g <= groups; g++ {
		_, lp := c.leader(uint32(g), time.Second)
		leaders = append(leaders, lp)
	}
	payload := make([]byte, 1024)
	ctx := ctxT(b, 10*time.Minute)
	b.SetBytes(1024)
	runConcurrent(b, b.N, benchSenders, "msgs", func(i int) error {
		_, err := leaders[i%groups].Enqueue(ctx, []*fsm.Message{msg("m", payload)})
		return err
	})
}

// BenchmarkReceiveComplete1KiB: 256 concurrent receivers each peek-lock one message and
// complete it (two proposals per message), from a backlog of b.N 1 KiB messages.
func BenchmarkReceiveComplete1KiB(b *testing.B) {
	c := benchCluster(b, 1)
	_, lp := c.leader(1, time.Second)
	payload := make([]byte, 1024)
	ctx := ctxT(b, 10*time.Minute)
	// Prefill in batches of 100 (not measured).
	for i := 0; i < b.N; i += 100 {
		batch := make([]*fsm.Message, 0, 100)
		for j := i; j < min(i+100, b.N); j++ {
			batch = append(batch, msg("m", payload))
		}
		if _, err := lp.Enqueue(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1024)
	runConcurrent(b, b.N, benchSenders, "msgs", func(int) error {
		ms, err := lp.Receive(ctx, fsm.Receive{Mode: fsm.PeekLock, Max: 1}, 0)
		if err != nil {
			return err
		}
		if len(ms) != 1 {
			return fmt.Errorf("received %d messages from the backlog", len(ms))
		}
		terrs, err := lp.Settle(ctx, fsm.Settle{Tokens: []fsm.LockToken{ms[0].LockToken}, Disposition: fsm.Complete})
		if err == nil && len(terrs) > 0 && terrs[0] != nil {
			err = terrs[0]
		}
		return err
	})
}

// BenchmarkIdleGroups: the cost of G idle groups per node (3 nodes, 3G replicas in this
// process): goroutines, heap, and CPU over an idle interval, each divided by 3.
func BenchmarkIdleGroups(b *testing.B) {
	for _, g := range []int{16, 64} {
		b.Run(fmt.Sprintf("groups=%d", g), func(b *testing.B) {
			runtime.GC()
			var m0 runtime.MemStats
			runtime.ReadMemStats(&m0)
			g0 := runtime.NumGoroutine()
			c := benchCluster(b, g)
			time.Sleep(2 * time.Second) // let elections and first heartbeats settle
			b.ResetTimer()
			for range b.N {
				const idle = 5 * time.Second
				u0 := cpuTime()
				time.Sleep(idle) // measuring idle CPU needs wall time to pass
				cpu := cpuTime() - u0
				b.ReportMetric(100*cpu.Seconds()/idle.Seconds()/3, "cpu%/node")
			}
			b.StopTimer()
			runtime.GC()
			var m1 runtime.MemStats
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(runtime.NumGoroutine()-g0)/3, "goroutines/node")
			b.ReportMetric(float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/3/(1<<20), "heapMiB/node")
			c.closeAll()
		})
	}
}

// BenchmarkIdleGroupTimers: which of a quiet group's two timers costs the idle CPU of
// BenchmarkIdleGroups (64 groups per node): hashicorp/raft's leader sends each follower
// an AppendEntries every CommitTimeout (50 ms) even with nothing to replicate, and a
// heartbeat every HeartbeatTimeout/10 (100 ms). Each variant stretches one of them 100x
// and keeps the other: CommitTimeout from the start, HeartbeatTimeout (with
// ElectionTimeout) through raft.ReloadConfig once every group has its leader, as a
// quiet group would.
func BenchmarkIdleGroupTimers(b *testing.B) {
	for _, v := range []struct {
		name          string
		commitTimeout time.Duration // 0: the default
		heartbeat     time.Duration // 0: the default
	}{
		{"defaults", 0, 0},
		{"commit-timeout=5s", 5 * time.Second, 0},
		{"heartbeat=100s", 0, 100 * time.Second},
		{"both", 5 * time.Second, 100 * time.Second},
	} {
		b.Run(v.name, func(b *testing.B) {
			c := benchCluster(b, 64, func(cfg *Config) {
				if v.commitTimeout > 0 {
					cfg.CommitTimeout = v.commitTimeout
				}
			})
			if v.heartbeat > 0 {
				for g := range c.parts {
					for _, p := range c.group(g) {
						rc := p.raft.ReloadableConfig()
						rc.HeartbeatTimeout, rc.ElectionTimeout = v.heartbeat, v.heartbeat
						if err := p.raft.ReloadConfig(rc); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			time.Sleep(2 * time.Second) // let the first heartbeats settle
			b.ResetTimer()
			for range b.N {
				const idle = 5 * time.Second
				u0 := cpuTime()
				time.Sleep(idle) // measuring idle CPU needs wall time to pass
				cpu := cpuTime() - u0
				b.ReportMetric(100*cpu.Seconds()/idle.Seconds()/3, "cpu%/node")
			}
			b.StopTimer()
			// A leader that hears from no quorum within LeaderLeaseTimeout (500 ms, not
			// reloadable) steps down: with both timers stretched, that is every leader,
			// and the CPU above is that of leaderless groups.
			leaders := 0
			for g := range c.parts {
				for _, p := range c.group(g) {
					if p.raft.State() == raft.Leader {
						leaders++
					}
				}
			}
			b.ReportMetric(float64(leaders), "leaders")
			c.closeAll()
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnqueueCommitTimeout: closed-loop sends (one sender, then 256) with
// hashicorp/raft's default CommitTimeout (50 ms) and with the 500 ms the cluster gives
// partition groups (cluster.RaftConfig.PartitionCommitTimeout), in ABBA order.
func BenchmarkEnqueueCommitTimeout(b *testing.B) {
	for _, senders := range []int{1, benchSenders} {
		for _, ct := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 50 * time.Millisecond} {
			b.Run(fmt.Sprintf("senders=%d/commit=%v", senders, ct), func(b *testing.B) {
				c := benchCluster(b, 1, func(cfg *Config) { cfg.CommitTimeout = ct })
				_, lp := c.leader(1, time.Second)
				payload := make([]byte, 1024)
				ctx := ctxT(b, 10*time.Minute)
				runConcurrent(b, b.N, senders, "msgs", func(i int) error {
					_, err := lp.Enqueue(ctx, []*fsm.Message{msg("m", payload)})
					return err
				})
			})
		}
	}
}

// BenchmarkFollowerCatchUp: a follower cut off while its group committed 8,000 small
// messages (8 senders, so a few per entry) catches up once it hears the leader again.
// The figure is Raft entries per second from the follower's first progress to its
// catching up (leaving out hashicorp/raft's retry backoff after the failures of the cut),
// with the defaults (up to ReplicationMaxEntries per AppendEntries, raft patch 5) and
// with the patch off (MaxAppendEntries, 16), alternating within one run:
//
//	go test -run '^$' -bench FollowerCatchUp -benchtime 1x ./partition/
func BenchmarkFollowerCatchUp(b *testing.B) {
	for round := range 3 {
		for _, tc := range []struct {
			name string
			max  int
		}{{"patch5", DefaultConfig().ReplicationMaxEntries}, {"max16", 0}} {
			b.Run(fmt.Sprintf("%s/round%d", tc.name, round), func(b *testing.B) {
				for range b.N {
					followerCatchUp(b, tc.max)
				}
			})
		}
	}
}

func followerCatchUp(b *testing.B, replicationMax int) {
	c := benchCluster(b, 1, func(cfg *Config) { cfg.ReplicationMaxEntries = replicationMax })
	defer c.closeAll()
	li, lp := c.leader(1, 30*time.Second)
	f := (li + 1) % 3
	fp := c.group(1)[f]
	c.isolate(1, f, true)
	runConcurrent(b, 8000, 8, "send", func(i int) error {
		_, err := lp.Enqueue(ctxT(b, 30*time.Second), []*fsm.Message{{Payload: []byte("x")}})
		return err
	})
	base, want := fp.AppliedIndex(), lp.AppliedIndex()
	c.isolate(1, f, false)
	var first time.Time
	var from uint64
	deadline := time.Now().Add(5 * time.Minute)
	for {
		at := fp.AppliedIndex()
		if first.IsZero() && at > base {
			first, from = time.Now(), at
		}
		if at >= want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the follower is at %d of %d after 5 minutes", at, want)
		}
		time.Sleep(time.Millisecond) // polling another replica's progress
	}
	if el := time.Since(first); want > from && el > 0 {
		b.ReportMetric(float64(want-from)/el.Seconds(), "catchup-entries/s")
	}
	b.ReportMetric(float64(want-base), "entries-behind")
}
