package partition

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestMain fails the run if goroutines of this package, raft or the transport outlive
// the tests (docs/principles.md, testing habit 10).
func TestMain(m *testing.M) {
	testutil.MainWithLeakCheck(m, 10*time.Second, "quorumbus/partition", "hashicorp/raft")
}
