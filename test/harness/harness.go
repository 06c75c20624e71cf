// Package harness starts real quorumbus nodes for end-to-end tests: it builds the
// binary once per test process, runs each node as a subprocess on 127.0.0.1 with its own
// data directory, and hands out official SDK clients pointed at it. Start runs one node;
// StartCluster runs n nodes that form a cluster, with fixed ports so that a node can be
// killed, paused, restarted or wiped and come back at the address its peers know. Nodes
// die with the test (t.Cleanup, and the kernel kills them if the test process dies
// first).
package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/quorumbus (and cmd/qbctl) once per test process and returns the
// directory holding both. The directory is named after the test process, and the
// directories of test processes that have ended are removed at the next build (a test
// binary has no hook that runs after its last test).
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		sweepBinaries()
		dir, err := os.MkdirTemp("", fmt.Sprintf("quorumbus-bin-%d-", os.Getpid()))
		if err != nil {
			buildErr = err
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/quorumbus", "./cmd/qbctl")
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out.String())
			return
		}
		binPath = dir
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// sweepBinaries removes the binary directories of test processes that are gone, and
// any older than a day whose name has no process ID.
func sweepBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "quorumbus-bin-*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), "quorumbus-bin-")
		if pid, _, ok := strings.Cut(rest, "-"); ok {
			if n, err := strconv.Atoi(pid); err == nil {
				if syscall.Kill(n, 0) == syscall.ESRCH {
					os.RemoveAll(d)
				}
				continue
			}
		}
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			os.RemoveAll(d)
		}
	}
}

func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("harness: cannot find its own source")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Endpoints is what a node writes to <data>/endpoints.json once it serves.
type Endpoints struct {
	AMQP             string `json:"amqp"`
	Admin            string `json:"admin"`
	Cluster          string `json:"cluster"`
	ConnectionString string `json:"connectionString"`
	// With TLS: the AMQPS listener, the admin API's URL (https://...), the
	// development CA file (--tls-self-signed) and a normal connection string for AMQPS.
	AMQPS               string `json:"amqps"`
	AdminURL            string `json:"adminURL"`
	CA                  string `json:"ca"`
	TLSConnectionString string `json:"tlsConnectionString"`
}

// Node is one running quorumbus process.
type Node struct {
	Dir  string
	Args []string // extra flags
	// ID is the node's --node-id in a cluster started by StartCluster; "" for Start.
	ID string
	// BinDir, when set, is a directory holding another build of quorumbus and qbctl
	// (an older release, for upgrade tests) that the next start runs instead of this
	// checkout's; "" runs this checkout's.
	BinDir string
	Endpoints

	t     testing.TB
	fixed *ports // nil: every listener on port 0, new ports at each (re)start
	cmd   *exec.Cmd
	log   *syncBuffer
	done  chan struct{} // closed when the process has exited
	// exitErr is the exit status; written by the goroutine waiting on the process
	// before it closes done, read only after done is closed.
	exitErr error
}

// ports are the fixed listeners of a cluster node, kept across restarts: its peers know
// it by its cluster address.
type ports struct{ amqp, admin, cluster string }

// Start runs a node with a fresh data directory. extra flags are appended, e.g.
// "--config-json", path.
func Start(t testing.TB, extra ...string) *Node {
	t.Helper()
	n := &Node{Dir: t.TempDir(), Args: extra, t: t}
	n.start()
	t.Cleanup(func() { n.Kill() })
	return n
}

// name is how messages refer to the node.
func (n *Node) name() string {
	if n.ID == "" {
		return "quorumbus"
	}
	return "quorumbus " + n.ID
}

// start launches the node and waits until it serves.
func (n *Node) start() {
	n.t.Helper()
	if err := n.launch(); err != nil {
		n.t.Fatal(err)
	}
	if err := n.awaitServing(time.Now().Add(60 * time.Second)); err != nil {
		n.t.Fatal(err)
	}
}

// launch starts the process without waiting for it to serve.
func (n *Node) launch() error {
	dir := n.BinDir
	if dir == "" {
		dir = Binary(n.t)
	}
	bin := filepath.Join(dir, "quorumbus")
	os.Remove(filepath.Join(n.Dir, "endpoints.json"))
	p := ports{amqp: "127.0.0.1:0", admin: "127.0.0.1:0", cluster: "127.0.0.1:0"}
	if n.fixed != nil {
		p = *n.fixed
	}
	args := append([]string{"--data", n.Dir, "--amqp-addr", p.amqp, "--admin-addr", p.admin,
		"--cluster-addr", p.cluster, "--amqps-addr", "127.0.0.1:0", "--log-level", "warn"}, n.Args...)
	n.cmd = exec.Command(bin, args...)
	n.cmd.Env = append(os.Environ(), "QUORUMBUS_LOG_LEVEL=warn")
	n.log = &syncBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	// The node dies with the test process, whatever happens to the test.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", n.name(), err)
	}
	done := make(chan struct{})
	n.done = done
	go func(c *exec.Cmd) {
		n.exitErr = c.Wait()
		close(done)
	}(n.cmd)
	return nil
}

// awaitServing waits until the node has written endpoints.json, by deadline, and then
// answers /readyz, within 30 s more.
func (n *Node) awaitServing(deadline time.Time) error {
	for {
		b, err := os.ReadFile(filepath.Join(n.Dir, "endpoints.json"))
		if err == nil && json.Unmarshal(b, &n.Endpoints) == nil && n.ConnectionString != "" {
			break
		}
		select {
		case <-n.done:
			return fmt.Errorf("%s exited before serving: %v\n%s", n.name(), n.exitErr, n.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not write endpoints.json in time\n%s", n.name(), n.log.String())
		}
	}
	return n.awaitReady(deadline.Add(30 * time.Second))
}

func (n *Node) awaitReady(deadline time.Time) error {
	var last string
	url, client := "http://"+n.Admin+"/readyz", http.DefaultClient
	if strings.HasPrefix(n.AdminURL, "https://") {
		url, client = n.AdminURL+"/readyz", n.HTTPSClient()
	}
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		select {
		case <-n.done:
			return fmt.Errorf("%s exited before it was ready: %v\n%s", n.name(), n.exitErr, n.log.String())
		case <-time.After(20 * time.Millisecond): // polling a readiness endpoint
		}
	}
	return fmt.Errorf("%s not ready in time (last /readyz: %s)\n%s", n.name(), last, n.Log())
}

// HTTPSClient is an HTTP client for a node serving HTTPS: it trusts the node's
// development CA, or (certificates from files, whose CA the node does not know) skips
// verification, which only the harness's own probes rely on.
func (n *Node) HTTPSClient() *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if b, err := os.ReadFile(n.CA); err == nil {
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(b)
	} else {
		cfg.InsecureSkipVerify = true
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// Log is what the node printed so far.
func (n *Node) Log() string { return n.log.String() }

// syncBuffer is the node's output: exec's copying goroutine writes it while a test may
// read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Kill stops the node with SIGKILL (no clean shutdown): the crash of S-DUR-1.
func (n *Node) Kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	n.waitGone()
}

// Stop sends SIGTERM, waits for the node to exit and returns its exit status (nil for a
// clean exit). A paused node is resumed so that it can handle the signal.
func (n *Node) Stop() error {
	n.t.Helper()
	syscall.Kill(n.cmd.Process.Pid, syscall.SIGTERM)
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGCONT)
	n.waitGone()
	return n.exitErr
}

// Pause freezes the node (SIGSTOP): its sockets stay open but it answers nothing, like a
// node in a long GC pause or behind a silent network partition.
func (n *Node) Pause() {
	n.t.Helper()
	if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		n.t.Fatalf("pause %s: %v", n.name(), err)
	}
	// SIGSTOP is delivered to each thread asynchronously: until every thread of the node
	// shows state T (stopped), one may still be answering a request.
	deadline := time.Now().Add(10 * time.Second)
	for !allThreadsStopped(n.cmd.Process.Pid) {
		if time.Now().After(deadline) {
			n.t.Fatalf("pause %s: its threads did not stop within 10s", n.name())
		}
		time.Sleep(time.Millisecond) // polling /proc: the kernel offers no wait for stop
	}
}

// allThreadsStopped reports whether every thread of process pid is stopped (state T
// in /proc/PID/task/TID/stat).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Resume continues a paused node (SIGCONT).
func (n *Node) Resume() {
	n.t.Helper()
	if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		n.t.Fatalf("resume %s: %v", n.name(), err)
	}
}

// Running reports whether the node's process has not exited.
func (n *Node) Running() bool {
	select {
	case <-n.done:
		return false
	default:
		return n.done != nil
	}
}

func (n *Node) waitGone() {
	select {
	case <-n.done:
	case <-time.After(60 * time.Second):
		// A hung shutdown: SIGQUIT makes the Go runtime write every goroutine's stack to
		// the node's log, shown with the failure; SIGKILL then ends it for sure.
		syscall.Kill(n.cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.done
		}
		log := n.log.String()
		log = log[max(0, len(log)-256<<10):]
		n.t.Errorf("%s (pid %d) still running 60s after being stopped; its log ends with its goroutines:\n%s",
			n.name(), n.cmd.Process.Pid, log)
	}
}

// Restart starts the node again on the same data directory, once it has exited (Kill or
// Stop first). A single node (Start) gets new ports; a cluster node (StartCluster) keeps
// its ports and ID, since its peers know it by its address.
func (n *Node) Restart() {
	n.t.Helper()
	if n.Running() {
		n.t.Fatalf("Restart of %s while it runs: Kill or Stop it first", n.name())
	}
	n.start()
}

// WipeAndRestart kills the node if it runs, deletes its data directory and starts it
// again with the same ID and ports: a node that lost its disk and must be rebuilt from
// its peers.
func (n *Node) WipeAndRestart() {
	n.t.Helper()
	n.Kill()
	if err := os.RemoveAll(n.Dir); err != nil {
		n.t.Fatalf("wipe %s: %v", n.Dir, err)
	}
	if err := os.MkdirAll(n.Dir, 0o750); err != nil {
		n.t.Fatal(err)
	}
	n.start()
}

// Client is an azservicebus client for this node, with short retries so error paths
// stay fast in tests.
func (n *Node) Client(t testing.TB) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(n.ConnectionString, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// rewrite sends the admin client's https://<endpoint>/... requests to the node's admin
// listener over plain HTTP; the signature still covers the original URL.
type rewrite struct{ addr string }

func (r rewrite) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host, req.Host = "http", r.addr, r.addr
	return http.DefaultClient.Do(req)
}

// AdminClient is an azservicebus/admin client for this node.
func (n *Node) AdminClient(t testing.TB) *admin.Client {
	t.Helper()
	c, err := admin.NewClientFromConnectionString(n.ConnectionString, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: rewrite{n.Admin},
			Retry:     policy.RetryOptions{MaxRetries: -1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Qbctl runs the qbctl binary against this node and returns its stdout; stderr is
// returned in the error when it fails.
func (n *Node) Qbctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(Binary(t), "qbctl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--admin-addr", n.Admin, "--data", n.Dir}, args...)...)
	cmd.Env = append(os.Environ(), "QUORUMBUS_CONNECTION_STRING=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after 3m: %w", err)
	}
	if err != nil {
		return out.String(), fmt.Errorf("qbctl %v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), nil
}

// RunToExit runs quorumbus with a fresh data directory and the given flags, expecting it
// to exit by itself (a start-up failure) within 60 s. It returns what the process printed
// and its exit error (nil for exit status 0).
func RunToExit(t testing.TB, extra ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(Binary(t), "quorumbus")
	args := append([]string{"--data", t.TempDir(), "--amqp-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--cluster-addr", "127.0.0.1:0"}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("quorumbus did not exit within 60s:\n%s", out)
	}
	return string(out), err
}

// Pid is the node's process ID (0 before it started): for reading /proc/<pid>/stat and
// /proc/<pid>/status from benchmarks.
func (n *Node) Pid() int {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Quit ends the node with SIGQUIT, on which the Go runtime prints the stack of every
// goroutine before exiting, waits for it to exit and returns what it printed. The node
// is gone afterwards (Restart brings it back). This counts a node's goroutines without
// adding a debug endpoint to the product.
func (n *Node) Quit() string {
	n.t.Helper()
	syscall.Kill(n.cmd.Process.Pid, syscall.SIGQUIT)
	syscall.Kill(n.cmd.Process.Pid, syscall.SIGCONT)
	n.waitGone()
	return n.log.String()
}
