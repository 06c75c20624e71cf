package charttest

import (
	"os"
	"testing"
)

// TestMain removes the binaries the tests built into temporary directories (quorumbus
// and qbctl; etcd and kube-apiserver when $QUORUMBUS_KUBE_BIN is unset): hundreds of
// megabytes that would otherwise stay in $TMPDIR after every run.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{staticDir, builtKubeBinDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}
