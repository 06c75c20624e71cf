package cluster_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// logLines decodes n's JSON log; a line that is not a JSON object fails the test.
func logLines(t *testing.T, n *harness.Node) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(n.Log()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("%s: a log line that is not JSON: %q", n.ID, l)
			continue
		}
		out = append(out, m)
	}
	return out
}

// hasLine reports whether n logged msg at level with every attribute of attrs.
func hasLine(t *testing.T, n *harness.Node, level, msg string, attrs map[string]any) bool {
	t.Helper()
	for _, m := range logLines(t, n) {
		if m["level"] != level || m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			ok = ok && m[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// The logs an operator reads at info (docs/operations.md § What is logged): after kill
// -9 of the metadata leader, every survivor logs at info that the member died and who
// leads the metadata group now; raft's heartbeats to the dead node, which every group
// it was in retries twice a second, give at most a few lines; every line is JSON.
func TestNodeDeathLoggedAndHeartbeatNoiseLimited(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3", "--log-level", "info", "--log-format", "json"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "logs"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	var st status
	c.WaitFor(t, 30*time.Second, func() error { return qbctlJSON(t, c.Nodes[0], &st, "cluster", "status") })
	victim := c.Node(st.MetadataLeader)
	alive := others(c, victim)

	victim.Kill()
	died := time.Now()
	for _, n := range alive {
		c.WaitFor(t, 30*time.Second, func() error {
			if !hasLine(t, n, "INFO", "member died", map[string]any{"node": victim.ID}) {
				return fmt.Errorf("%s has not logged at info that %s died", n.ID, victim.ID)
			}
			if !hasLine(t, n, "INFO", "metadata leader changed", nil) {
				return fmt.Errorf("%s has not logged at info that the metadata leader changed", n.ID)
			}
			return nil
		})
	}
	// Raft retries a dead peer for as long as it is in a group's configuration (until
	// --dead-node-grace): a fixed window is what a rate is measured over.
	time.Sleep(time.Until(died.Add(20 * time.Second)))
	const maxLines = 6 // per survivor in 20 s; unlimited, each group gives ~2 a second
	for _, n := range alive {
		noisy := 0
		for _, m := range logLines(t, n) {
			msg, _ := m["msg"].(string)
			if msg == "" { // hclog's own JSON
				msg, _ = m["@message"].(string)
			}
			if strings.HasPrefix(msg, "failed to heartbeat") || strings.HasPrefix(msg, "failed to appendEntries") {
				noisy++
			}
		}
		t.Logf("%s: %d heartbeat/appendEntries failure lines in 20 s", n.ID, noisy)
		if noisy > maxLines {
			t.Errorf("%s logged %d heartbeat/appendEntries failures in 20 s after %s died, want at most %d", n.ID, noisy, victim.ID, maxLines)
		}
	}
}
