package hosts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Ports of a quorumbus node on its host: every host has its own address, so all use
// the same numbers, as pods do.
const (
	AMQPPort    = 5672
	AdminPort   = 5300
	ClusterPort = 5400
)

// QuorumbusArgs is the command line of a quorumbus node on host h, a member of a cluster
// of the hosts of its Net: node ID and advertised address are the host's name, it joins
// the others by name with --bootstrap-expect N-Spare, and its clock follows the host's
// ClockOffsetFile (JumpClock). extra flags come last.
func (h *Host) QuorumbusArgs(extra ...string) []string {
	var join []string
	for _, o := range h.net.hosts {
		if o != h {
			join = append(join, o.Name+":"+strconv.Itoa(ClusterPort))
		}
	}
	args := []string{"--data", h.DataDir(), "--node-id", h.Name,
		"--amqp-addr", h.IP + ":" + strconv.Itoa(AMQPPort),
		"--admin-addr", h.IP + ":" + strconv.Itoa(AdminPort),
		"--cluster-addr", h.IP + ":" + strconv.Itoa(ClusterPort), // not 0.0.0.0: the proxies hold 127.0.1.x
		"--advertise-addr", h.Name + ":" + strconv.Itoa(ClusterPort),
		"--bootstrap-expect", strconv.Itoa(len(h.net.hosts) - h.net.cfg.Spare),
		"--clock-offset-file", h.ClockOffsetFile()}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	return append(args, extra...)
}

// StartQuorumbus launches the quorumbus binary of harness.Binary with
// QuorumbusArgs(extra...) on every host but the spares, all at once (a forming cluster
// needs its peers), and waits until each serves (endpoints.json written and /readyz
// answering 200).
func (n *Net) StartQuorumbus(timeout time.Duration, extra ...string) error {
	up := n.hosts[:len(n.hosts)-n.cfg.Spare]
	for _, h := range up {
		if err := h.LaunchQuorumbus(extra...); err != nil {
			return err
		}
	}
	var errs []error
	deadline := time.Now().Add(timeout)
	for _, h := range up {
		errs = append(errs, h.AwaitReady(time.Until(deadline)))
	}
	return errors.Join(errs...)
}

// LaunchQuorumbus starts the quorumbus binary of harness.Binary on h with
// QuorumbusArgs(extra...), without waiting: a spare joins the running cluster this way.
func (h *Host) LaunchQuorumbus(extra ...string) error {
	return h.Launch(nil, filepath.Join(harness.Binary(h.net.t), "quorumbus"), h.QuorumbusArgs(extra...)...)
}

// Endpoints reads what the host's node wrote to its data directory once serving.
func (h *Host) Endpoints() (harness.Endpoints, error) {
	var e harness.Endpoints
	b, err := os.ReadFile(filepath.Join(h.DataDir(), "endpoints.json"))
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, err
	}
	if e.ConnectionString == "" {
		return e, fmt.Errorf("%s: endpoints.json without a connection string", h.Name)
	}
	return e, nil
}

// AwaitReady waits until the host's node has written endpoints.json and its /readyz
// answers 200, or its process exits, or timeout passes.
func (h *Host) AwaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for time.Now().Before(deadline) {
		if !h.Running() {
			return fmt.Errorf("%s exited before it was ready; its log ends:\n%s", h.Name, h.LogTail(2048))
		}
		if e, err := h.Endpoints(); err != nil {
			last = err.Error()
		} else if resp, err := client.Get("http://" + e.Admin + "/readyz"); err != nil {
			last = err.Error()
		} else {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's readiness
	}
	return fmt.Errorf("%s not ready within %v (last: %s); its log ends:\n%s", h.Name, timeout, last, h.LogTail(2048))
}

// LogTail is the last max bytes of the host's log.
func (h *Host) LogTail(max int) string {
	b, _ := os.ReadFile(h.LogPath())
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// ClockOffsetFile is the file the host's node reads its clock offset from
// (--clock-offset-file). It is outside the data directory: Wipe and PowerLoss keep it.
func (h *Host) ClockOffsetFile() string { return filepath.Join(h.Dir, "clock-offset") }

// JumpClock sets the host's node's clock d from the machine's (0: the machine's); the
// node reads it within 100 ms.
func (h *Host) JumpClock(d time.Duration) error {
	return os.WriteFile(h.ClockOffsetFile(), []byte(d.String()), 0o644)
}
