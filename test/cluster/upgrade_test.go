//go:build upgrade

package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// previousRelease is the commit a cluster is upgraded from: the release before this
// one. Move it forward at each release (docs/operations.md § Upgrading).
const previousRelease = "7cf45fe7a4abb9e8deaf85608df2afe0644ec437"

// buildRelease builds quorumbus and qbctl at commit (from this clone's history, with git
// archive: the checkout is left alone) and returns the directory holding them. The
// build is kept under the temporary directory, by commit, for the next run.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := filepath.Join(os.TempDir(), "quorumbus-release-"+commit[:12])
	bin := filepath.Join(dir, "bin")
	if _, err := os.Stat(filepath.Join(bin, "quorumbus")); err == nil {
		return bin
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s of the previous release is not in this clone (a shallow clone? fetch it): %v %s", commit, err, out)
	}
	src := dir + ".src"
	os.RemoveAll(src)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var errs bytes.Buffer
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v %s", commit, err, errs.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v %s", err, errs.String())
	}
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-o", tmp+string(filepath.Separator), "./cmd/quorumbus", "./cmd/qbctl")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// A 3-node cluster of the previous release is upgraded to this one, one node at a time
// (SIGTERM, start the new binary on the same data, wait until the cluster has converged)
// under SDK load: no acknowledged message is lost, clients see only errors they retry,
// and what existed before survives: the entities, messages sent before the upgrade, a
// peek-lock held across it, a session's state and messages. Mixed-version clusters
// (two old nodes and a new one, then one old and two new) serve throughout.
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	old := buildRelease(t, previousRelease)
	c := harness.StartCluster(t, 3, harness.WithBinary(old), harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })

	// State from before the upgrade.
	const (
		q        = "upgrade-load"
		kept     = "upgrade-kept"
		locked   = "upgrade-locked"
		sessions = "upgrade-sessions"
		topic    = "upgrade-topic"
	)
	createQueue(t, c.Nodes[0], q, &admin.QueueProperties{EnablePartitioning: to.Ptr(true), LockDuration: to.Ptr("PT10S")})
	createQueue(t, c.Nodes[0], kept, &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	createQueue(t, c.Nodes[0], locked, &admin.QueueProperties{LockDuration: to.Ptr("PT5M")})
	createQueue(t, c.Nodes[0], sessions, &admin.QueueProperties{RequiresSession: to.Ptr(true)})
	ac := c.Nodes[0].AdminClient(t)
	ctx := ctxT(t, 5*time.Minute)
	if _, err := ac.CreateTopic(ctx, topic, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, topic, "sub", nil); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, "", 3) })
	keptIDs := idRange("kept", 50)
	sendIDs(t, c.Nodes[1], kept, keptIDs)

	client := c.Nodes[0].Client(t)
	s, err := client.NewSender(locked, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("held"), Body: []byte("held")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := client.NewReceiverForQueue(locked, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive the message to hold locked: %v %d", err, len(got))
	}
	heldSeq, heldUntil := *got[0].SequenceNumber, *got[0].LockedUntil

	ss, err := client.NewSender(sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ss.SendMessage(ctx, &azservicebus.Message{SessionID: to.Ptr("s1"), Body: []byte(fmt.Sprint("s1-", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sr, err := client.AcceptSessionForQueue(ctx, sessions, "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("state-before-upgrade"), nil); err != nil {
		t.Fatal(err)
	}
	if err := sr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ts, err := client.NewSender(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("topic-1"), Body: []byte("t")}, nil); err != nil {
		t.Fatal(err)
	}

	// Load through every node while each is upgraded in turn.
	w := newWorkload(t, q)
	workers := w.startRing(c.Nodes)
	start := w.mark()
	c.WaitFor(t, 60*time.Second, func() error { return w.progressed(start, 20, workers...) })

	// The previous release prints its banner on a pipe; this one does not (a way to
	// tell, from the outside, which release a node runs).
	const oldBanner = "Quorumbus is running"
	for _, n := range c.Nodes {
		if !strings.Contains(n.Log(), oldBanner) {
			t.Fatalf("%s does not run the previous release (no %q in its output)", n.ID, oldBanner)
		}
	}
	for _, n := range c.Nodes {
		began, before := time.Now(), w.mark()
		if err := n.Stop(); err != nil {
			t.Errorf("%s (previous release) after SIGTERM: exit status %v", n.ID, err)
		}
		n.BinDir = "" // this checkout's build
		n.Restart()
		c.WaitFor(t, 90*time.Second, func() error {
			if err := formed(t, c); err != nil {
				return err
			}
			return serving(t, c, "", 3)
		})
		c.WaitFor(t, 60*time.Second, func() error { return w.progressed(before, 10, workers...) })
		for _, e := range w.errorsSince(began) {
			if !retriable(e.err) && !e.afterUnknown {
				t.Errorf("upgrade of %s: a client saw an error a user cannot retry: %s", n.ID, e)
			}
		}
		if strings.Contains(n.Log(), oldBanner) {
			t.Errorf("%s still runs the previous release after its upgrade", n.ID)
		}
		t.Logf("upgraded %s in %v", n.ID, time.Since(began).Round(time.Millisecond))
	}

	w.stopSenders()
	p := peeker(t, c.Nodes[0], q)
	c.WaitFor(t, 90*time.Second, func() error { return w.drained(p) })
	w.stopReceivers()
	w.check(t)
	c.WaitFor(t, 90*time.Second, func() error { return converged(t, c, "", 3, nil) })

	// Everything from before the upgrade is there, read through the new release.
	after := c.Nodes[2].Client(t)
	for _, name := range []string{q, kept, locked, sessions} {
		if _, err := c.Nodes[2].AdminClient(t).GetQueue(ctx, name, nil); err != nil {
			t.Errorf("queue %s after the upgrade: %v", name, err)
		}
	}
	if _, err := c.Nodes[2].AdminClient(t).GetSubscription(ctx, topic, "sub", nil); err != nil {
		t.Errorf("subscription %s/sub after the upgrade: %v", topic, err)
	}
	receiveAll(t, c.Nodes[2], kept, keptIDs)

	// The lock taken before the upgrade still holds: the message is not delivered again
	// while it lasts, and a peek shows it with its first delivery counted.
	lr, err := after.NewReceiverForQueue(locked, nil)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	again, _ := lr.ReceiveMessages(short, 1, nil)
	cancel()
	if time.Now().Before(heldUntil) && len(again) != 0 {
		t.Errorf("the message locked before the upgrade (until %v) was delivered again: seq %d", heldUntil, *again[0].SequenceNumber)
	}
	peeked, err := lr.PeekMessages(ctx, 1, nil)
	if err != nil || len(peeked) != 1 || *peeked[0].SequenceNumber != heldSeq || peeked[0].DeliveryCount != 1 {
		t.Errorf("peek of the locked message after the upgrade: %v %+v", err, peeked)
	}

	// The session's state and messages.
	sr2, err := after.AcceptSessionForQueue(ctx, sessions, "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	state, err := sr2.GetSessionState(ctx, nil)
	if err != nil || string(state) != "state-before-upgrade" {
		t.Errorf("session state after the upgrade: %q %v", state, err)
	}
	msgs, err := sr2.ReceiveMessages(ctx, 3, nil)
	if err != nil || len(msgs) == 0 {
		t.Errorf("session messages after the upgrade: %d %v", len(msgs), err)
	}
	for _, m := range msgs {
		if err := sr2.CompleteMessage(ctx, m, nil); err != nil {
			t.Errorf("complete a session message after the upgrade: %v", err)
		}
	}
	sub, err := after.NewReceiverForSubscription(topic, "sub", nil)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := sub.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(tm) != 1 || tm[0].MessageID != "topic-1" {
		t.Errorf("the subscription's message after the upgrade: %v %d", err, len(tm))
	}
}
