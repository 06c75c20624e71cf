package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run when a goroutine outlives the tests: every Node a
// test starts is closed, and Close waits for every goroutine the node started
// (goFunc), its partitions', raft's, memberlist's and the RPC layer's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
