package transport

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestMain fails the run if goroutines of this package or raft's transport outlive the
// tests (docs/principles.md, testing habit 10).
func TestMain(m *testing.M) {
	testutil.MainWithLeakCheck(m, 5*time.Second, "partition/transport", "hashicorp/raft")
}
