package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/quorumbus/quorumbus/test/harness"
)

// TestAcceptOutOfFileDescriptors reproduces the probe's finding on a real node: its file
// limit is lowered to just above what it uses, and clients that open connections without
// speaking exhaust it. While its AMQP listener cannot accept, /readyz answers 503 (asked
// over a connection opened before); once those clients go away, the node accepts again,
// /readyz is 200 and the SDK sends and receives. Before the fix the accept loop ended at
// the first EMFILE: this binary then exited, and a server started with amqp.Server.Start
// stopped accepting for good while /readyz stayed 200.
func TestAcceptOutOfFileDescriptors(t *testing.T) {
	n := harness.Start(t)
	q := name("emfile")
	if _, err := n.AdminClient(t).CreateQueue(testCtx(t), q, nil); err != nil {
		t.Fatal(err)
	}
	// One keep-alive connection to the admin API, opened now: the probe below must not
	// need an Accept of its own.
	probe := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}, Timeout: 5 * time.Second}
	readyz := func() (int, error) {
		resp, err := probe.Get("http://" + n.Admin + "/readyz")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := readyz(); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz before: %d %v", code, err)
	}

	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", n.Pid()))
	if err != nil {
		t.Skipf("cannot count the node's descriptors: %v", err)
	}
	// Only the soft limit is lowered (it is what accept(2) hits); the hard one stays, so
	// the limit can be raised back without CAP_SYS_RESOURCE.
	var old unix.Rlimit
	if err := unix.Prlimit(n.Pid(), unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Skipf("cannot read the node's file limit: %v", err)
	}
	limit := unix.Rlimit{Cur: uint64(len(fds) + 16), Max: old.Max}
	if err := unix.Prlimit(n.Pid(), unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Skipf("cannot lower the node's file limit: %v", err)
	}
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	// Open connections that never speak until the node's Accept fails: the kernel still
	// completes handshakes into the backlog, so keep going until /readyz says so.
	harness.WaitFor(t, 30*time.Second, func() error {
		for i := 0; i < 8; i++ {
			c, err := net.DialTimeout("tcp", n.AMQP, time.Second)
			if err != nil {
				break
			}
			idle = append(idle, c)
		}
		code, err := readyz()
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d with %d idle connections open", code, len(idle))
		}
		return nil
	})

	for _, c := range idle {
		c.Close()
	}
	idle = nil
	if err := unix.Prlimit(n.Pid(), unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		code, err := readyz()
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz %d", code)
		}
		return err
	})
	sendReceive(t, n.Client(t), q, "after EMFILE")
}
