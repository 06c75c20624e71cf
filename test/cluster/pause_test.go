package cluster_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
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
