package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// readyzBound is how long GET /readyz may take with a peer that answers nothing: the
// node bounds its questions to peers at 1 s (cluster.DefaultReadyTimeout), the chart's
// readiness probe gives up after 3 s (helm/quorumbus values.yaml probes.readiness).
// The margin covers a loaded 2-core machine.
const readyzBound = 2500 * time.Millisecond

// readyz asks n's /readyz once and returns the status code and how long it took.
func readyz(n *harness.Node) (int, time.Duration, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	resp, err := c.Get("http://" + n.Admin + "/readyz")
	if err != nil {
		return 0, time.Since(start), err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// A node whose peer is paused (SIGSTOP: its sockets accept, nothing answers) still
// answers /readyz well within the probe's timeout, on every other node, from the
// moment of the pause through the failover; once the groups have new leaders the
// survivors are ready (docs/operations.md § What readiness means).
func TestReadyzAnswersInTimeWithPausedPeer(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "readyz-pause"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	victim := c.Nodes[2]
	transferAll(t, c, q, victim.ID)
	alive := others(c, victim)
	for _, n := range alive { // each has asked the victim at least once: a connection is open
		c.WaitFor(t, 30*time.Second, func() error {
			if code, _, err := readyz(n); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s /readyz: %d %v", n.ID, code, err)
			}
			return nil
		})
	}

	victim.Pause()
	t.Cleanup(func() { victim.Resume(); victim.Kill() })
	paused := time.Now()
	var mu sync.Mutex
	var slow []string
	var wg sync.WaitGroup
	for _, n := range alive {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(paused) < 6*time.Second {
				code, took, err := readyz(n)
				if err != nil || took > readyzBound {
					mu.Lock()
					slow = append(slow, fmt.Sprintf("%s at +%v: %d %v in %v", n.ID, time.Since(paused).Round(time.Millisecond), code, err, took.Round(time.Millisecond)))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(slow) > 0 {
		t.Errorf("/readyz took longer than %v with a paused peer:\n%v", readyzBound, slow)
	}
	for _, n := range alive {
		c.WaitFor(t, 30*time.Second, func() error {
			if code, _, err := readyz(n); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s /readyz after the failover: %d %v", n.ID, code, err)
			}
			return nil
		})
	}
}

// sendLoop sends small messages to queue through node n, one every 50 ms, each within 5 s,
// without the SDK's retries (a new client after any error, as the workload does), until
// stop is closed; it returns when each successful send ended and each failed one began.
func sendLoop(t *testing.T, n *harness.Node, queue string, stop chan struct{}) func() (ok, failed []time.Time, errs []string) {
	var mu sync.Mutex
	var oks, fails []time.Time
	var msgs []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		var client *azservicebus.Client
		var s *azservicebus.Sender
		for i := 0; !stopped(stop); i++ {
			var err error
			if client == nil {
				client, err = azservicebus.NewClientFromConnectionString(n.ConnectionString, &azservicebus.ClientOptions{
					RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
				if err == nil {
					s, err = client.NewSender(queue, nil)
				}
			}
			began := time.Now()
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(n.ID, "-", i))}, nil)
				cancel()
			}
			mu.Lock()
			if err == nil {
				oks = append(oks, time.Now())
			} else {
				fails = append(fails, began)
				msgs = append(msgs, fmt.Sprintf("%s %s: send begun at %s: %v", time.Now().Format("15:04:05.000"), n.ID, began.Format("15:04:05.000"), err))
			}
			mu.Unlock()
			if err != nil && client != nil {
				client.Close(context.Background())
				client, s = nil, nil
			}
			pause(stop, 50*time.Millisecond) // pacing
		}
		if client != nil {
			client.Close(context.Background())
		}
	}()
	return func() ([]time.Time, []time.Time, []string) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return oks, fails, msgs
	}
}

// pauseRecoveryBound is how long after SIGSTOP of the leader of every partition a send
// begun through another node may still fail. kill -9 recovers in about 2 s (an election
// after the 1 s heartbeat timeout); the margin covers a loaded 2-core machine. Sends
// already forwarded to the leader when it stopped fail when their client's deadline
// passes, with their outcome unknown, as they would after a crash.
const pauseRecoveryBound = 10 * time.Second

// A paused partition leader (SIGSTOP: a long GC pause, a frozen VM) is handled like a
// crash: sends through the other nodes fail only until the groups have elected new
// leaders, not for as long as the paused node keeps its sockets open.
func TestSendsRecoverAfterLeaderPause(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "pause-leader"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	victim := c.Nodes[2]
	transferAll(t, c, q, victim.ID)
	alive := others(c, victim)

	stop := make(chan struct{})
	var results []func() ([]time.Time, []time.Time, []string)
	for _, n := range alive {
		results = append(results, sendLoop(t, n, q, stop))
	}
	t.Cleanup(func() {
		if !stopped(stop) {
			close(stop)
		}
	})
	// Both senders succeed before the pause (the clients are connected).
	time.Sleep(2 * time.Second) // a window of normal operation, measured below

	victim.Pause()
	t.Cleanup(func() { victim.Resume(); victim.Kill() })
	paused := time.Now()
	time.Sleep(30 * time.Second) // the window over which failures are observed
	close(stop)

	var lastFail time.Time
	var all []string
	for i, r := range results {
		oks, fails, msgs := r()
		before, after := 0, 0
		for _, o := range oks {
			if o.Before(paused) {
				before++
			} else if o.After(paused.Add(25 * time.Second)) {
				after++
			}
		}
		if before == 0 || after == 0 {
			t.Errorf("sender on %s: %d sends succeeded before the pause, %d in the last 5 s; want some of each", alive[i].ID, before, after)
		}
		for _, f := range fails {
			if f.After(lastFail) {
				lastFail = f
			}
		}
		all = append(all, msgs...)
	}
	recovery := time.Duration(0)
	if lastFail.After(paused) {
		recovery = lastFail.Sub(paused)
	}
	t.Logf("sends begun up to %v after the pause of %s failed (%d failures)", recovery.Round(time.Millisecond), victim.ID, len(all))
	if recovery > pauseRecoveryBound {
		t.Errorf("sends begun %v after the leader was paused failed, want none after %v:\n%s", recovery.Round(time.Millisecond), pauseRecoveryBound, strings.Join(all, "\n"))
	}
}
