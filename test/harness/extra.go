package harness

import (
	"os"
	"path/filepath"
)

// QUORUMBUS_E2E_BIN names a directory that already holds quorumbus and qbctl binaries.
// When set, Binary uses them instead of building cmd/quorumbus from this checkout: useful
// to test a release build, or to keep testing a known build while the tree is being edited.
func init() {
	dir := os.Getenv("QUORUMBUS_E2E_BIN")
	if dir == "" {
		return
	}
	buildOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "quorumbus")); err != nil {
			buildErr = err
			return
		}
		binPath = dir
	})
}
