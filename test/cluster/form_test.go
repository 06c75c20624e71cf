package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Three nodes that join each other with --bootstrap-expect 3 form one cluster: every
// node reports the three members alive and the same single metadata leader.
func TestFormThreeNodes(t *testing.T) {
	c := harness.StartCluster(t, 3)
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
}

// Five nodes form one cluster too (five metadata voters, or the placement's choice).
func TestFormFiveNodes(t *testing.T) {
	c := harness.StartCluster(t, 5)
	c.WaitFor(t, 90*time.Second, func() error { return formed(t, c) })
}

// Every node of a cluster may load the same Config.json at start-up (the Helm chart and
// deploy/compose.yaml give each node the same --config-json): the nodes race to create
// the same entities, and all of them start and serve.
func TestEveryNodeLoadsTheSameConfigJSON(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("..", "e2e", "testdata", "emulator-Config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartCluster(t, 3, harness.WithArgs("--config-json", path))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	for _, n := range c.Nodes {
		q, err := n.AdminClient(t).GetQueue(context.Background(), "queue.1", nil)
		if err != nil || q == nil {
			t.Fatalf("%s: queue.1 from Config.json: %v %v", n.ID, q, err)
		}
	}
}

// Nodes started with the same --cluster-secret form one cluster over mutual TLS with
// encrypted gossip (the secret given once as a value, once as @FILE, as a mounted
// Kubernetes Secret would); cluster/auth_test.go shows that other secrets are refused.
func TestFormWithClusterSecret(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(file, []byte("a cluster secret of some length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := harness.StartCluster(t, 3, harness.WithArgs("--cluster-secret", "@"+file))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	for _, n := range c.Nodes {
		if strings.Contains(n.Log(), "cluster traffic is not authenticated") {
			t.Fatalf("%s runs without cluster credentials:\n%s", n.ID, n.Log())
		}
	}
}
