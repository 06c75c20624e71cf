package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/quorumbus/quorumbus/test/lazyfs"
)

// The node ID recorded in a data directory survives a power loss: a node restarted
// with a defaulted ID (a new host name) after a power cut still takes the recorded
// one. test/lazyfs drops what was not fsynced, as a power cut does.
func TestRecordedNodeIDSurvivesPowerLoss(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, disk := filepath.Join(root, "data"), filepath.Join(root, "disk")
	os.Mkdir(dir, 0o755)
	os.Mkdir(disk, 0o755)
	l, err := lazyfs.Mount(dir, disk, "nodeid-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount() })

	if id, err := resolveNodeID(dir, "qb-0", false); err != nil || id != "qb-0" {
		t.Fatalf("first start: %q, %v", id, err)
	}
	l.Crash()
	if id, err := resolveNodeID(dir, "new-host-name", true); err != nil || id != "qb-0" {
		t.Fatalf("after a power loss, a defaulted ID gives %q, %v; want the recorded qb-0", id, err)
	}
}
