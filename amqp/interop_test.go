//go:build interop

package amqp

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProtonInterop: Apache Qpid Proton (python3-qpid-proton, Debian) sends
// to and receives from a queue. Needs `apt-get install python3-qpid-proton`;
// run with `go test -tags interop -run TestProtonInterop ./amqp/`.
func TestProtonInterop(t *testing.T) {
	_, _, addr := testServer(t, nil)
	out, err := exec.Command("/usr/bin/python3", "testdata/proton_interop.py", "amqp://"+addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("proton client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
