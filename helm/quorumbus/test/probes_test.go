package charttest

import (
	"strings"
	"testing"
	"time"
)

// nodeReadyTimeout is cluster.DefaultReadyTimeout (this module does not import the
// node's packages beyond the test harness).
const nodeReadyTimeout = time.Second

// Each probe waits for longer than the node may take to answer it: /readyz asks peers
// for at most nodeReadyTimeout, so a probe with Kubernetes' 1 s default
// timeout would call a node with one slow peer unready (docs/operations.md § What
// readiness means). Twice the bound leaves room for a loaded node.
func TestProbesWaitLongerThanTheNodeTakes(t *testing.T) {
	for _, vals := range []string{"one", "three", "tls"} {
		c := brokerContainer(t, decode(t, render(t, readValues(t, vals))))
		min := map[string]time.Duration{"startup": time.Second, "readiness": 2 * nodeReadyTimeout, "liveness": time.Second}
		for kind, p := range map[string]int32{"startup": c.StartupProbe.TimeoutSeconds,
			"readiness": c.ReadinessProbe.TimeoutSeconds, "liveness": c.LivenessProbe.TimeoutSeconds} {
			if got := time.Duration(p) * time.Second; got < min[kind] || p == 0 {
				t.Errorf("values %s: %s probe timeoutSeconds %d, want at least %v", vals, kind, p, min[kind])
			}
		}
	}
}

// The pods never print the root key into their logs: the node prints its banner only at
// a terminal or with --print-connection-string, so the chart gives the container no TTY
// and never sets that flag (docs/configuration.md).
func TestPodsDoNotPrintTheKey(t *testing.T) {
	for _, vals := range []string{"one", "three", "tls", "config-json"} {
		c := brokerContainer(t, decode(t, render(t, readValues(t, vals))))
		if c.TTY || c.Stdin {
			t.Errorf("values %s: the container has a TTY (%v) or stdin (%v): the node would print the key", vals, c.TTY, c.Stdin)
		}
		for _, e := range c.Env {
			if e.Name == "QUORUMBUS_PRINT_CONNECTION_STRING" && e.Value != "false" {
				t.Errorf("values %s: %s=%q prints the root key into the pod's log", vals, e.Name, e.Value)
			}
		}
		for _, a := range append(c.Command, c.Args...) {
			if strings.Contains(a, "print-connection-string") {
				t.Errorf("values %s: argument %q prints the root key into the pod's log", vals, a)
			}
		}
	}
}
