package gossip

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine outlives the tests: Close stops memberlist
// and the transport.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tcpStreams is Streams over a loopback listener.
type tcpStreams struct{ net.Listener }

func (s tcpStreams) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

// start starts a node gossiping on a loopback port (TCP streams and UDP packets on
// the same number); the test closes it.
func start(t *testing.T, id string, key []byte, changed *atomic.Int32) *Gossip {
	t.Helper()
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().(*net.TCPAddr)
		g, err := Start(Config{
			Self:    Meta{ID: id, Cluster: addr.String(), AMQP: "127.0.0.1:5672", Zone: "z-" + id, Inc: "inc-" + id},
			Bind:    &net.UDPAddr{IP: addr.IP, Port: addr.Port},
			Streams: tcpStreams{ln},
			Key:     key,
			Changed: func() {
				if changed != nil {
					changed.Add(1)
				}
			},
			Events: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil && try < 5 {
			continue // the UDP port of that number was taken: another number
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
}

// waitFor polls cond (memberlist has no event a test can wait on besides Changed,
// which does not say what changed) until it holds, for at most 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two nodes that join see each other with what each advertises, a change of what one
// advertises (SetFormed) reaches the other, and a node that leaves is gone from the
// other's members.
func TestJoinAdvertiseLeave(t *testing.T) {
	var changed atomic.Int32
	a := start(t, "a", nil, &changed)
	b := start(t, "b", nil, nil)
	if err := b.Join([]string{a.self.Cluster}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b", func() bool { _, ok := a.Member("b"); return ok })
	waitFor(t, "b sees a", func() bool { return len(b.Members()) == 2 })
	m, _ := a.Member("b")
	if m.Cluster != b.self.Cluster || m.Zone != "z-b" || m.Inc != "inc-b" || m.AMQP != "127.0.0.1:5672" || m.Formed {
		t.Errorf("a sees b as %+v", m)
	}
	if changed.Load() == 0 {
		t.Error("Changed was not called when b joined")
	}
	if alive := a.Alive(); !alive["a"] || !alive["b"] || len(alive) != 2 {
		t.Errorf("Alive %v, want a and b", alive)
	}
	b.SetFormed()
	waitFor(t, "a sees b formed", func() bool { m, _ := a.Member("b"); return m.Formed })

	b.Leave(2 * time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a no longer sees b", func() bool { _, ok := a.Member("b"); return !ok })
	if got := a.Members(); len(got) != 1 || got[0].ID != "a" {
		t.Errorf("members after b left: %+v", got)
	}
}

// KeepJoined joins through the addresses it is given and returns when its context ends.
func TestKeepJoined(t *testing.T) {
	a := start(t, "a", nil, nil)
	c := start(t, "c", nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.KeepJoined(ctx, func() []string { return []string{a.self.Cluster} })
	}()
	waitFor(t, "a sees c", func() bool { _, ok := a.Member("c"); return ok })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("KeepJoined still runs 10s after its context ended")
	}
}

// Nodes with different gossip keys do not join each other.
func TestKeyMismatchDoesNotJoin(t *testing.T) {
	k1 := []byte("0123456789abcdef0123456789abcdef")
	k2 := []byte("fedcba9876543210fedcba9876543210")
	a := start(t, "a", k1, nil)
	d := start(t, "d", k2, nil)
	if err := d.Join([]string{a.self.Cluster}); err == nil {
		t.Error("a node with another key joined")
	}
	if _, ok := a.Member("d"); ok {
		t.Error("a sees the node with another key")
	}
}
