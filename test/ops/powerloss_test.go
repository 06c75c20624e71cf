package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/lazyfsctl"
)

// A power cut of every node at once keeps every acknowledged message (S-DUR-1). Three
// nodes, each data directory on test/lazyfs, on the shared log store (one log engine
// per node, whose appends from different partitions share fsyncs). Eight queues are
// sent to at once, one message per send, through all three nodes; while the sends go
// on, every node is killed (-9) and every write it had not fsynced is thrown away, as
// a power cut does to the page cache. After all three restart, every message whose
// send was acknowledged is received.
func TestPowerLossOfEveryNodeKeepsAcknowledged(t *testing.T) {
	const nodes, queues = 3, 8
	var mounts []*lazyfsctl.FS
	var dirs []string
	for i := range nodes {
		l, dir := lazyfsctl.MountTemp(t, "powerloss-n"+strconv.Itoa(i+1))
		mounts, dirs = append(mounts, l), append(dirs, dir)
	}
	c := harness.StartCluster(t, nodes, harness.WithDirs(dirs...), harness.WithArgs("--raft-log-store", "shared"))
	ctx := ctxT(t, 3*time.Minute)
	ac := c.Nodes[0].AdminClient(t)
	for q := range queues {
		if _, err := ac.CreateQueue(ctx, "pl-"+strconv.Itoa(q), nil); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu    sync.Mutex
		acked = map[string]map[string]bool{} // queue -> acknowledged message IDs
		total int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for q := range queues {
		queue := "pl-" + strconv.Itoa(q)
		acked[queue] = map[string]bool{}
		client := c.Nodes[q%nodes].Client(t)
		wg.Go(func() {
			s, err := client.NewSender(queue, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close(context.Background())
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%s-%d", queue, i)
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := s.SendMessage(sctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
				cancel()
				if err != nil {
					return // the nodes are gone: this send's outcome is unknown
				}
				mu.Lock()
				acked[queue][id] = true
				total++
				mu.Unlock()
			}
		})
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if total < 300 {
			return fmt.Errorf("%d sends acknowledged so far", total)
		}
		return nil
	})
	for _, nd := range c.Nodes { // sends still in flight
		nd.Kill()
	}
	for i, l := range mounts {
		dropped, err := l.Crash()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("power loss of n%d dropped %v", i+1, dropped)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("%d sends acknowledged before the power cut", total)
	mu.Unlock()

	c.RestartAll(t)
	client := c.Nodes[0].Client(t)
	for queue, want := range acked {
		r, err := client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		harness.WaitFor(t, 90*time.Second, func() error {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			msgs, err := r.ReceiveMessages(rctx, 100, nil)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			for _, m := range msgs {
				got[m.MessageID] = true
			}
			missing := 0
			for id := range want {
				if !got[id] {
					missing++
				}
			}
			if missing > 0 {
				return fmt.Errorf("%s: %d of %d acknowledged messages not received yet", queue, missing, len(want))
			}
			return nil
		})
		r.Close(ctx)
	}
}
