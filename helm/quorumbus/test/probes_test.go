package charttest

import (
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
