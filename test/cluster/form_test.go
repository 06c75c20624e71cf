package cluster_test

import (
	"context"
	"path/filepath"
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
