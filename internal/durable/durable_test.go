package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/quorumbus/quorumbus/internal/durable"
	"github.com/quorumbus/quorumbus/test/lazyfsctl"
)

// lazyDir mounts test/lazyfs (which drops what was not fsynced at Crash) for one test.
func lazyDir(t *testing.T) (*lazyfsctl.FS, string) {
	t.Helper()
	if err := lazyfsctl.Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, backing := filepath.Join(root, "mnt"), filepath.Join(root, "disk")
	os.Mkdir(dir, 0o755)
	os.Mkdir(backing, 0o755)
	l, err := lazyfsctl.Mount(dir, backing, "durable-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount() })
	return l, dir
}

// A file written with WriteFile survives a power loss; one written with os.WriteFile
// does not (what WriteFile is for).
func TestWriteFileSurvivesPowerLoss(t *testing.T) {
	l, dir := lazyDir(t)
	kept, lost := filepath.Join(dir, "kept"), filepath.Join(dir, "lost")
	if err := durable.WriteFile(kept, []byte("v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(kept, []byte("v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lost, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Crash(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "v2\n" {
		t.Errorf("durable.WriteFile after a power loss: %q, %v; want v2", b, err)
	}
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(lost); len(b) != 0 {
		t.Errorf("os.WriteFile after a power loss: %q; the simulation should have dropped it", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("temporary files left: %v", entries)
	}
}
