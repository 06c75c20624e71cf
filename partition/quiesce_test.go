package partition

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// An idle group with QuiesceAfter goes quiet on every replica and then sends nothing at
// all between the nodes; a send wakes it and is stored; a peek on the quiet leader
// verifies its leadership first and answers. Then its leader's node goes, and the
// surviving replicas, quiet, elect at once (the transport finds the port closed).
func TestGroupsQuiesceIdleGroup(t *testing.T) {
	nodes, peers := startGroupsNodes(t, 3)
	fc := testQueue(1, time.Minute)
	for _, i := range []int{1, 2, 0} {
		openGroup(t, nodes[i], peers, fc, func(cfg *Config) {
			cfg.QuiesceAfter = 300 * time.Millisecond
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		})
	}
	leader := func(among []*groupsNode) *groupsNode {
		t.Helper()
		var l *groupsNode
		testutil.WaitFor(t, 15*time.Second, func() error {
			for _, nd := range among {
				if nd.p.IsLeader() {
					l = nd
					return nil
				}
			}
			return errors.New("no leader")
		})
		return l
	}
	send := func(l *groupsNode, id string) {
		t.Helper()
		if _, err := l.p.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{msg(id, []byte("x"))}); err != nil {
			t.Fatal(err)
		}
	}
	first := leader(nodes)
	send(first, "m0")
	quiet := func(among []*groupsNode) error {
		for _, nd := range among {
			if !nd.p.Quiet() {
				return fmt.Errorf("%s is not quiet", nd.id)
			}
		}
		return nil
	}
	testutil.WaitFor(t, 15*time.Second, func() error { return quiet(nodes) })
	rpcs := func() (n uint64) {
		for _, nd := range nodes {
			s := nd.groups.Stats()
			n += s.RPCs + s.BeatFrames
		}
		return n
	}
	// The transport beats a group for up to a second after raft last asked for a
	// heartbeat (beats.go, beatKeep); then the quiet group sends nothing at all, over
	// three heartbeat timeouts.
	testutil.WaitFor(t, 15*time.Second, func() error {
		before := rpcs()
		time.Sleep(1200 * time.Millisecond)
		if sent := rpcs() - before; sent > 0 {
			return fmt.Errorf("%d RPCs and beat frames in 1.2 s", sent)
		}
		return nil
	})
	before := rpcs()
	time.Sleep(3 * time.Second)
	if sent := rpcs() - before; sent > 0 {
		t.Errorf("a quiet group sent %d RPCs and beat frames in 3 s", sent)
	}
	if err := quiet(nodes); err != nil {
		t.Fatal(err)
	}
	msgs, err := first.p.Peek(ctxT(t, 10*time.Second), fsm.Target{}, 0, 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("peek on a quiet leader: %d messages, %v", len(msgs), err)
	}
	send(first, "m1")
	testutil.WaitFor(t, 15*time.Second, func() error { return quiet(nodes) })

	// The quiet leader's process goes: partition, transport and port.
	first.p.Close()
	first.p = nil
	first.groups.Close()
	first.mux.Close()
	start := time.Now()
	var rest []*groupsNode
	for _, nd := range nodes {
		if nd != first {
			rest = append(rest, nd)
		}
	}
	next := leader(rest)
	t.Logf("a quiet group elected %s %v after its leader's node went", next.id, time.Since(start))
	send(next, "m2")
	st, err := next.p.Stats(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Targets[0].Active; got != 3 {
		t.Fatalf("the new leader holds %d messages, want 3", got)
	}
}
