package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// TestSecondNodeOnDataDirectoryInUseExitsAtOnce: a second quorumbus started on a data
// directory a running node uses says "data directory in use by pid N" and exits
// non-zero at once; it used to wait without end on the Raft log's file lock, ignoring
// SIGTERM. The running node goes on serving, and once it is gone a node
// starts on the directory again (the kernel dropped its lock).
func TestSecondNodeOnDataDirectoryInUseExitsAtOnce(t *testing.T) {
	n := harness.Start(t)
	bin := filepath.Join(harness.Binary(t), "quorumbus")
	// Its own ports, so that only the directory is shared.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--data", n.Dir, "--amqp-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--cluster-addr", "127.0.0.1:0", "--amqps-addr", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the second node did not exit within 60 s:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the second node exited with %v, want a non-zero status:\n%s", err, out)
	}
	if want := fmt.Sprintf("data directory in use by pid %d", n.Pid()); !strings.Contains(string(out), want) {
		t.Fatalf("the second node said\n%s\nwant it to say %q", out, want)
	}
	// At once: well within what a start-up on a busy machine takes, and far from the
	// Raft log's lock wait.
	if took > 15*time.Second {
		t.Errorf("the second node took %v to exit", took)
	}
	resp, err := http.Get("http://" + n.Admin + "/readyz")
	if err != nil {
		t.Fatalf("the first node stopped serving: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first node's /readyz: %d", resp.StatusCode)
	}
	n.Kill()
	n.Restart() // the lock went with the killed process
}
