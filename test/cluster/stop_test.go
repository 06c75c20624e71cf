package cluster_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// wholeStopBound is how long each node of a cluster stopped as a whole may take to exit
// after SIGTERM (they used to take the full 30 s shutdown timeout, then exit non-zero).
const wholeStopBound = 10 * time.Second

// errorLines are n's log lines at ERROR (docs/operations.md: "needs a person").
func errorLines(t *testing.T, n *harness.Node) []string {
	t.Helper()
	var out []string
	for _, m := range logLines(t, n) {
		if m["level"] == "ERROR" {
			out = append(out, fmt.Sprint(m))
		}
	}
	return out
}

// SIGTERM to every node at once (kubectl scale --replicas=0 with parallel pod
// management, docker compose down) under SDK load: each node exits with status 0
// within wholeStopBound and logs no ERROR line, and after all restart every message a
// client saw acknowledged is received and completed (S-DUR-1, S-DUR-3), and partition
// leadership spreads over the restarted nodes again. A node handed
// its leaderships to voters that were stopping too, which passed them back, until the
// shutdown timeout.
func TestWholeClusterStopUnderLoad(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3", "--log-format", "json"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "whole-stop"
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	// More groups for each node to hand over: 64 partition groups and the metadata group.
	for i := 0; i < 3; i++ {
		createQueue(t, c.Nodes[0], fmt.Sprint("idle-", i), &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	}
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, "", 3) })

	w := newWorkload(t, q)
	workers := w.startRing(c.Nodes)
	start := w.mark()
	c.WaitFor(t, 30*time.Second, func() error { return w.progressed(start, 20, workers...) })

	took := make([]time.Duration, len(c.Nodes))
	exits := make([]error, len(c.Nodes))
	began := time.Now()
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exits[i] = n.Stop()
			took[i] = time.Since(began)
		}()
	}
	wg.Wait()
	for i, n := range c.Nodes {
		t.Logf("%s exited %v after SIGTERM to every node: %v", n.ID, took[i].Round(time.Millisecond), exits[i])
		if exits[i] != nil {
			t.Errorf("%s after SIGTERM: exit status %v, want 0", n.ID, exits[i])
		}
		if took[i] > wholeStopBound {
			t.Errorf("%s took %v to exit after SIGTERM to every node, want at most %v", n.ID, took[i].Round(time.Millisecond), wholeStopBound)
		}
		if errs := errorLines(t, n); len(errs) > 0 {
			t.Errorf("%s logged %d ERROR lines on a whole-cluster stop:\n%s", n.ID, len(errs), strings.Join(errs, "\n"))
		}
	}

	before := w.mark()
	c.RestartAll(t)
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	c.WaitFor(t, 60*time.Second, func() error { return w.progressed(before, 10, workers...) })
	// Back with new processes, no node is taken for stopping: leadership spreads again.
	c.WaitFor(t, 90*time.Second, func() error { return evenSpread(leadersOf(t, c, ""), []string{"n1", "n2", "n3"}) })
	w.stopSenders()
	p := peeker(t, c.Nodes[0], q)
	c.WaitFor(t, 60*time.Second, func() error { return w.drained(p) })
	w.stopReceivers()
	w.check(t)
}
