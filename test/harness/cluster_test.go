package harness_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// The node controls a cluster test relies on, on a one-node cluster (which needs no
// multi-node support): a node keeps its ID and ports across Stop, Kill and a wipe,
// keeps its data across a restart and loses it with a wipe, and a paused node answers
// nothing until resumed.
func TestClusterNodeLifecycle(t *testing.T) {
	c := harness.StartCluster(t, 1)
	n := c.Node("n1")
	first := n.Endpoints
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := n.AdminClient(t).CreateQueue(ctx, "kept", nil); err != nil {
		t.Fatal(err)
	}
	idFile := func() string {
		b, _ := os.ReadFile(filepath.Join(n.Dir, "node-id"))
		return strings.TrimSpace(string(b))
	}
	if got := idFile(); got != "n1" {
		t.Fatalf("node-id file %q, want n1", got)
	}

	if err := n.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, n.Log())
	}
	n.Restart()
	if n.AMQP != first.AMQP || n.Admin != first.Admin || n.Cluster != first.Cluster {
		t.Fatalf("restart moved the node: %+v, was %+v", n.Endpoints, first)
	}
	if q, err := n.AdminClient(t).GetQueue(ctx, "kept", nil); err != nil || q == nil {
		t.Fatalf("queue lost across a restart: %v %v", q, err)
	}

	n.Pause()
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := hc.Get("http://" + n.Admin + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a paused node answered /readyz: %d", resp.StatusCode)
	}
	n.Resume()
	c.WaitFor(t, 30*time.Second, func() error {
		resp, err := hc.Get("http://" + n.Admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})

	n.WipeAndRestart()
	if n.Cluster != first.Cluster || idFile() != "n1" {
		t.Fatalf("wipe changed the node: %+v id %q", n.Endpoints, idFile())
	}
	if q, err := n.AdminClient(t).GetQueue(ctx, "kept", nil); err != nil || q != nil {
		t.Fatalf("queue survived a wipe: %v %v", q, err)
	}
	n.Kill()
	if n.Running() {
		t.Fatal("running after Kill")
	}
}
