package ops

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// keyOf is the SharedAccessKey of a connection string.
func keyOf(t *testing.T, connStr string) string {
	t.Helper()
	for _, part := range strings.Split(connStr, ";") {
		if k, ok := strings.CutPrefix(part, "SharedAccessKey="); ok && k != "" {
			return k
		}
	}
	t.Fatalf("connection string %q has no SharedAccessKey", connStr)
	return ""
}

// A node whose output goes to a pipe (a container runtime, a log collector: the chart)
// never writes the root key there, in text or JSON logs; the key is in the node's data
// directory (connection-string, endpoints.json) for qbctl and people who may read it.
// --print-connection-string asks for the banner with the connection string.
func TestRootKeyNotInLogs(t *testing.T) {
	for _, args := range [][]string{nil, {"--log-format", "json"}, {"--log-level", "debug"}} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			n := harness.Start(t, args...)
			key := keyOf(t, n.ConnectionString)
			if _, err := n.AdminClient(t).CreateQueue(ctxT(t, 30*time.Second), "q", nil); err != nil {
				t.Fatal(err)
			}
			if err := n.Stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if strings.Contains(n.Log(), key) {
				t.Errorf("the root key appears in the node's output:\n%s", n.Log())
			}
			b, err := os.ReadFile(filepath.Join(n.Dir, "connection-string"))
			if err != nil || !strings.Contains(string(b), key) {
				t.Errorf("<data>/connection-string does not hold the key: %q %v", b, err)
			}
		})
	}
	t.Run("--print-connection-string", func(t *testing.T) {
		n := harness.Start(t, "--print-connection-string")
		if err := n.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if !strings.Contains(n.Log(), "Connection string:\n"+n.ConnectionString+"\n") {
			t.Errorf("--print-connection-string: no connection string in the output:\n%s", n.Log())
		}
	})
}

// `make run` (README: "prints the connection string") prints the emulator connection
// string a user pastes into an SDK, even with its output piped.
func TestMakeRunPrintsTheConnectionString(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the node through make and go run")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make: %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("make", "--no-print-directory", "run", "DATA="+t.TempDir())
	cmd.Dir = root
	// Every listener on a free loopback port instead of the fixed defaults.
	cmd.Env = append(os.Environ(), "QUORUMBUS_AMQP_ADDR=127.0.0.1:0", "QUORUMBUS_ADMIN_ADDR=127.0.0.1:0",
		"QUORUMBUS_CLUSTER_ADDR=127.0.0.1:0", "QUORUMBUS_LOG_LEVEL=warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	want := regexp.MustCompile(`^Endpoint=sb://127\.0\.0\.1:[0-9]+;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=[^;]+;UseDevelopmentEmulator=true$`)
	found := make(chan string, 1)
	var seen strings.Builder
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			seen.WriteString(s.Text() + "\n")
			if want.MatchString(s.Text()) {
				found <- s.Text()
				break
			}
		}
		io.Copy(io.Discard, out)
		close(found)
	}()
	select {
	case line, ok := <-found:
		if !ok {
			t.Fatalf("make run ended without printing the connection string:\n%s", seen.String())
		}
		t.Logf("make run printed %s", line)
	case <-time.After(3 * time.Minute): // go run compiles the node first
		t.Fatal("make run printed no connection string within 3 minutes")
	}
}
