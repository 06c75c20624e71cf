package cluster

import (
	"testing"

	"github.com/quorumbus/quorumbus/test/lazyfsctl"
)

// The incarnation says "this data directory is the one the node had": a power loss
// must not change it while the Raft state beside it survives. Found by test/chaos's
// power-loss fault: the file was written without fsync, so a power cut soon after a
// node's first start gave the same directory a new incarnation (as if its disk had
// been wiped). test/lazyfs drops what was not fsynced, as a power cut does.
func TestIncarnationSurvivesPowerLoss(t *testing.T) {
	l, dir := lazyfsctl.MountTemp(t, "incarnation-test")

	first, err := incarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Crash(); err != nil {
		t.Fatal(err)
	}
	again, err := incarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("incarnation %q after a power loss, %q before: the same data directory looks wiped", again, first)
	}
}
