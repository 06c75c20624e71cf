package cluster

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakGrace bounds how long TestMain waits for goroutines to end after the last test.
// A few end on their own, seconds at most after Close, rather than when Close returns:
// a forwarded receive's cancel sent to the peer, a remote wait (seam.go, remote.go).
const leakGrace = 10 * time.Second

// TestMain fails the package's run when a goroutine outlives the tests: every Node a
// test starts is closed, and Close waits for every goroutine the node started
// (goFunc), its partitions', raft's, memberlist's and the RPC layer's. No goroutine is
// ignored; one still running leakGrace after the last test is a leak.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(leakGrace)
		for {
			err := goleak.Find() // itself retries for a fraction of a second
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines still running %v after the tests: %v\n", leakGrace, err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // goroutines ending give no signal to wait on
		}
	}
	os.Exit(code)
}
