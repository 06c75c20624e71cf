package cluster

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// BenchmarkSmallBesideLarge measures what 10 MB messages (MaxMessageSizeInKilobytes
// up to 102,400) do to other traffic of the same partition: one node (fsync on),
// one queue of one partition, 1 KiB sends one after the other, alone and while another
// goroutine keeps sending 10 MB messages to the same queue (and taking them out again,
// receive-and-delete, so the queue stays small). It runs twice: "whole" sends each body
// as one Raft entry (BenchConfig.WholeBodies, as before chunked bodies), "chunked" with
// the partition's default chunking, so one run gives both on the same machine load.
// Besides ns/op it reports the 99th percentile of the small sends' latency (p99-ms),
// the large messages moved per small send (large/op) and per second (large/s):
//
//	go test ./cluster/ -run '^$' -bench SmallBesideLarge -benchtime 200x
func BenchmarkSmallBesideLarge(b *testing.B) {
	for _, whole := range []bool{true, false} {
		name := "chunked"
		if whole {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) { benchSmallBesideLarge(b, whole) })
	}
}

func benchSmallBesideLarge(b *testing.B, whole bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := testConfig(b.TempDir())
	cfg.Bench.WholeBodies = whole
	n, err := Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	p := queueProps(1)
	p.MaxMessageSizeInKilobytes = meta.MaxMaxMessageSizeKB
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "mixed", Properties: p}); err != nil {
		b.Fatal(err)
	}
	small := make([]byte, 1100)
	large := make([]byte, 10<<20)
	msg := func(payload []byte) []*fsm.Message {
		m := &fsm.Message{Payload: payload}
		m.Size = int64(len(payload))
		return []*fsm.Message{m}
	}
	for _, withLarge := range []bool{false, true} {
		name := "alone"
		if withLarge {
			name = "beside-10MB"
		}
		b.Run(name, func(b *testing.B) {
			bg, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var moved int
			if withLarge {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for bg.Err() == nil {
						if err := n.Router().Send(bg, "mixed", msg(large)); err != nil {
							return
						}
						moved++
						// Take the large ones out so the queue stays within its quota.
						_, _ = n.Router().Receive(bg, Address{Entity: "mixed"}, "", "", fsm.ReceiveAndDelete, 100, 0)
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := n.Router().Send(ctx, "mixed", msg(small)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			elapsed := b.Elapsed()
			stop()
			wg.Wait()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(moved)/float64(b.N), "large/op")
			b.ReportMetric(float64(moved)/elapsed.Seconds(), "large/s")
			_, _ = n.Router().Receive(ctx, Address{Entity: "mixed"}, "", "", fsm.ReceiveAndDelete, 5000, 0)
		})
	}
}
