package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// The cluster secret changes from A to B by restarting one node at a time, in the
// three rolls docs/security.md ("Rotation") gives: accept B, use B (accepting A), drop
// A. While each node is down the other two serve, and once it is back every node sees
// all three alive and the same metadata leader and serves again: the Go SDK sends
// through one node and receives through the next. At the end a process with only A
// is refused and never becomes a member.
func TestRotateClusterSecretOneNodeAtATime(t *testing.T) {
	dir := t.TempDir()
	secretA, secretB := filepath.Join(dir, "secret-a"), filepath.Join(dir, "secret-b")
	for path, v := range map[string]string{secretA: "cluster secret A, the old one\n", secretB: "cluster secret B, the new one\n"} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, b := "@"+secretA, "@"+secretB
	c := harness.StartCluster(t, 3, harness.WithArgs("--cluster-secret", a))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const queue = "rotation"
	if _, err := c.Nodes[0].AdminClient(t).CreateQueue(ctxT(t, 30*time.Second), queue, nil); err != nil {
		t.Fatalf("create queue %s: %v", queue, err)
	}
	seq := 0
	serves := func(label string, nodes []*harness.Node) {
		t.Helper()
		for i, n := range nodes {
			seq++
			roundTrip(t, n, nodes[(i+1)%len(nodes)], queue, fmt.Sprintf("%s #%d via %s", label, seq, n.ID))
		}
	}
	serves("formed with A", c.Nodes)

	for _, roll := range []struct {
		name     string
		current  string
		accepted []string
	}{
		{"accept B", a, []string{b}},
		{"use B", b, []string{a}},
		{"drop A", b, nil},
	} {
		for _, n := range c.Nodes {
			step := roll.name + ", " + n.ID
			if err := n.Stop(); err != nil {
				t.Fatalf("%s: stop: %v\n%s", step, err, n.Log())
			}
			var others []*harness.Node
			for _, o := range c.Nodes {
				if o != n {
					others = append(others, o)
				}
			}
			serves(step+" down", others)
			setSecrets(n, roll.current, roll.accepted...)
			n.Restart()
			c.WaitFor(t, 60*time.Second, func() error {
				if err := formed(t, c); err != nil {
					return fmt.Errorf("%s restarted: %w", step, err)
				}
				return nil
			})
			serves(step+" back", c.Nodes)
		}
	}

	// A process that knows only A no longer gets in: its handshakes fail (the nodes
	// present certificates from B's CA, which it does not trust, and trust only B's).
	intruder := c.LaunchNode(t, "--cluster-secret", a, "--log-level", "debug")
	c.WaitFor(t, 60*time.Second, func() error {
		if !intruder.Running() {
			return harness.Permanent(fmt.Errorf("the node with only A exited:\n%s", intruder.Log()))
		}
		if !strings.Contains(intruder.Log(), "not a cluster member") {
			return errors.New("the node with only A has not tried to join yet")
		}
		return nil
	})
	c.WaitFor(t, 30*time.Second, func() error { return formed(t, c) }) // exactly the three, none else
	for _, n := range c.Nodes {
		var st status
		if err := qbctlJSON(t, n, &st, "cluster", "status"); err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Members {
			if m.ID == intruder.ID {
				t.Fatalf("%s lists the node with only A as a member: %+v", n.ID, st.Members)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(intruder.Dir, "endpoints.json")); err == nil {
		t.Fatalf("the node with only A serves:\n%s", intruder.Log())
	}
	serves("after the intruder", c.Nodes)
}

// setSecrets gives n, for its next start, the cluster secret current and the accepted
// ones in place of those it had.
func setSecrets(n *harness.Node, current string, accepted ...string) {
	var args []string
	for i := 0; i < len(n.Args); i++ {
		if n.Args[i] == "--cluster-secret" || n.Args[i] == "--cluster-secret-accepted" {
			i++ // and its value
			continue
		}
		args = append(args, n.Args[i])
	}
	args = append(args, "--cluster-secret", current)
	if len(accepted) > 0 {
		args = append(args, "--cluster-secret-accepted", strings.Join(accepted, ","))
	}
	n.Args = args
}

// roundTrip sends body to queue through node from and receives it through node to,
// completing whatever else it receives (a send retried after a lost answer may have
// gone through twice).
func roundTrip(t *testing.T, from, to *harness.Node, queue, body string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := from.Client(t).NewSender(queue, nil)
		if err != nil {
			return fmt.Errorf("sender via %s: %v", from.ID, err)
		}
		defer s.Close(context.Background())
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			return fmt.Errorf("send %q via %s: %v", body, from.ID, err)
		}
		return nil
	})
	harness.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := to.Client(t).NewReceiverForQueue(queue, nil)
		if err != nil {
			return fmt.Errorf("receiver via %s: %v", to.ID, err)
		}
		defer r.Close(context.Background())
		for {
			msgs, err := r.ReceiveMessages(ctx, 10, nil)
			if err != nil {
				return fmt.Errorf("receive %q via %s: %v", body, to.ID, err)
			}
			for _, m := range msgs {
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					return fmt.Errorf("complete via %s: %v", to.ID, err)
				}
				if string(m.Body) == body {
					return nil
				}
			}
		}
	})
}
