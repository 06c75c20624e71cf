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
// receive-and-delete, so the queue stays small). Besides ns/op it reports the 99th
// percentile of the small sends' latency (p99-ms) and the large messages moved (large/op):
//
//	go test ./cluster/ -run '^$' -bench SmallBesideLarge -benchtime 200x
func BenchmarkSmallBesideLarge(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n, err := Start(ctx, testConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	p := queueProps(1)
	p.MaxMessageSizeInKilobytes = meta.MaxMaxMessageSizeKB
	if err := n.Apply(ctx, &meta.CreateQueue{Name: "mixed", Properties: p}); err != nil {
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
						if err := n.Send(bg, "mixed", msg(large)); err != nil {
							return
						}
						moved++
						// Take the large ones out so the queue stays within its quota.
						_, _ = n.Receive(bg, Address{Entity: "mixed"}, "", "", fsm.ReceiveAndDelete, 100, 0)
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := n.Send(ctx, "mixed", msg(small)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			stop()
			wg.Wait()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(moved)/float64(b.N), "large/op")
			_, _ = n.Receive(ctx, Address{Entity: "mixed"}, "", "", fsm.ReceiveAndDelete, 5000, 0)
		})
	}
}
