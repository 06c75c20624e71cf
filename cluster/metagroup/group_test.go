package metagroup

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// tcpLayer is a raft.StreamLayer over a loopback listener.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// open opens a group in dir on a loopback port; the test closes it.
func open(t *testing.T, dir string, bootstrap bool, place func(int32) [][]string) *Group {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Open(Config{Dir: dir, NodeID: "n1", Stream: tcpLayer{ln}, Advertise: raft.ServerAddress(ln.Addr().String()),
		BootstrapSelf: bootstrap, NoSync: true, Place: place, Logger: hclog.NewNullLogger(),
		Tune: func(rc *raft.Config) {
			rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
		}})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() }) // a second Close (after the test's) only reports the store closed
	return g
}

func waitLeader(t *testing.T, g *Group) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling raft's state: it has no leadership event here
	}
}

// A lone node's group elects itself, places a new queue's partitions through
// Config.Place when the command has no replicas, gives the state's verdict for a
// duplicate, and keeps its state across a restart (HadState).
func TestCommitPlacesAndPersists(t *testing.T) {
	dir := t.TempDir()
	placed := 0
	place := func(partitions int32) [][]string {
		placed++
		out := make([][]string, partitions)
		for i := range out {
			out[i] = []string{"n1"}
		}
		return out
	}
	g := open(t, dir, true, place)
	if !g.HadState() {
		t.Error("a bootstrapped lone node says it has no state")
	}
	waitLeader(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	props := meta.DefaultQueueProperties()
	props.PartitionCount = 2
	idx, err := g.Commit(ctx, &meta.CreateQueue{Name: "jobs", Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WaitIndex(ctx, idx); err != nil {
		t.Fatal(err)
	}
	var reps [][]string
	g.Read(func(s *meta.State) {
		for _, pl := range s.Placements() {
			if pl.Entity == "jobs" {
				for _, p := range pl.Partitions {
					reps = append(reps, p.Replicas)
				}
			}
		}
	})
	if placed != 1 || !slices.EqualFunc(reps, [][]string{{"n1"}, {"n1"}}, slices.Equal) {
		t.Fatalf("placed %d times, replicas %v; want once, [[n1] [n1]]", placed, reps)
	}
	if _, err := g.Commit(ctx, &meta.CreateQueue{Name: "JOBS", Properties: props}); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("second create: %v, want meta.ErrExists", err)
	}
	if _, err := g.Commit(ctx, &meta.CreateQueue{Name: "bad name!", Properties: props}); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("invalid name: %v, want meta.ErrInvalid", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}

	g2 := open(t, dir, false, place)
	if !g2.HadState() {
		t.Error("a restarted node says it has no state")
	}
	waitLeader(t, g2)
	if err := g2.Barrier(10 * time.Second); err != nil { // the log replays into the state
		t.Fatal(err)
	}
	var kind meta.EntityKind
	g2.Read(func(s *meta.State) { kind = s.Kind("jobs") })
	if kind != meta.KindQueue {
		t.Errorf("after a restart jobs is %v, want a queue", kind)
	}
}

// A node with no state that nobody added has no leader: Commit gives up with
// ErrNotLeader when its context ends, and WaitIndex with ErrNotApplied.
func TestCommitWithoutLeader(t *testing.T) {
	g := open(t, t.TempDir(), false, nil)
	if g.HadState() {
		t.Error("a new node says it has state")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := g.Commit(ctx, &meta.PutNode{Node: meta.Node{ID: "n1", Addr: "127.0.0.1:1"}}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Commit: %v, want ErrNotLeader", err)
	}
	if err := g.WaitIndex(ctx, 5); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("WaitIndex: %v, want ErrNotApplied", err)
	}
}
