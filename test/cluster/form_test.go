package cluster_test

import (
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
