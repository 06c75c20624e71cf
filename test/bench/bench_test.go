package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

var body = make([]byte, 1024)

func setup(b *testing.B, queue string) (*harness.Node, *azservicebus.Client) {
	b.Helper()
	n := harness.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.AdminClient(b).CreateQueue(ctx, queue, nil); err != nil {
		b.Fatal(err)
	}
	return n, n.Client(b)
}

// BenchmarkSendConcurrent: 64 goroutines each send single 1 KiB messages on one shared
// sender link; every send waits for its durable acknowledgement (S-SEND-1).
func BenchmarkSendConcurrent(b *testing.B) {
	_, c := setup(b, "q")
	s, err := c.NewSender("q", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const workers = 64
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < b.N; i += workers {
				if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkSendBatch: batches of 100 1 KiB messages, one at a time (each batch one
// acknowledgement, all-or-nothing).
func BenchmarkSendBatch(b *testing.B) {
	_, c := setup(b, "q")
	s, err := c.NewSender("q", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	start := time.Now()
	sendBatches(b, s, b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// sendBatches sends n 1 KiB messages in batches of 100, one batch at a time.
func sendBatches(b *testing.B, s *azservicebus.Sender, n int) {
	ctx := context.Background()
	for sent := 0; sent < n; {
		batch, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 100 && sent < n; i++ {
			if err := batch.AddMessage(&azservicebus.Message{Body: body}, nil); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiveComplete: peek-lock receive in batches of up to 100 and complete every
// message individually (each completion acknowledged, S-LOCK-2).
func BenchmarkReceiveComplete(b *testing.B) {
	_, c := setup(b, "q")
	s, err := c.NewSender("q", nil)
	if err != nil {
		b.Fatal(err)
	}
	sendBatches(b, s, b.N)
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	d := receiveComplete(b, r, b.N)
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}
