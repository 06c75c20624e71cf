package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/quorumbus/quorumbus/test/lazyfs"
)

// The incarnation says "this data directory is the one the node had": a power loss
// must not change it while the Raft state beside it survives. Found by test/chaos's
// power-loss fault: the file was written without fsync, so a power cut soon after a
// node's first start gave the same directory a new incarnation (as if its disk had
// been wiped). test/lazyfs drops what was not fsynced, as a power cut does.
func TestIncarnationSurvivesPowerLoss(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, disk := filepath.Join(root, "data"), filepath.Join(root, "disk")
	os.Mkdir(dir, 0o755)
	os.Mkdir(disk, 0o755)
	l, err := lazyfs.Mount(dir, disk, "incarnation-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount() })

	first, err := incarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Crash()
	again, err := incarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("incarnation %q after a power loss, %q before: the same data directory looks wiped", again, first)
	}
}
