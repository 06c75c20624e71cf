package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func newMux(t testing.TB) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func mustLayer(t testing.TB, m *Mux, g uint32) *Layer {
	t.Helper()
	l, err := m.Layer(g)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// accept returns the next connection of l or fails after a bound.
func accept(t *testing.T, l *Layer) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("accept timed out")
	}
	return nil
}

func TestRoutesByGroup(t *testing.T) {
	srv, cli := newMux(t), newMux(t)
	s1, s2 := mustLayer(t, srv, 1), mustLayer(t, srv, 2)
	c1, c2 := mustLayer(t, cli, 1), mustLayer(t, cli, 2)
	addr := raft.ServerAddress(srv.Addr().String())

	for _, tc := range []struct {
		dial, want *Layer
		msg        string
	}{{c2, s2, "to-two"}, {c1, s1, "to-one"}} {
		conn, err := tc.dial.Dial(addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		in := accept(t, tc.want)
		buf := make([]byte, len(tc.msg))
		if _, err := io.ReadFull(in, buf); err != nil || string(buf) != tc.msg {
			t.Fatalf("got %q, %v; want %q", buf, err, tc.msg)
		}
		// And back.
		if _, err := in.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf[:2]); err != nil || string(buf[:2]) != "ok" {
			t.Fatalf("reply %q, %v", buf[:2], err)
		}
	}
}

func TestUnknownGroupIsClosed(t *testing.T) {
	srv, cli := newMux(t), newMux(t)
	c := mustLayer(t, cli, 7) // srv has no group 7
	conn, err := c.Dial(raft.ServerAddress(srv.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on unrouted conn: %v, want EOF", err)
	}
}

func TestDuplicateRouteAndReuseAfterClose(t *testing.T) {
	m := newMux(t)
	l := mustLayer(t, m, 3)
	if _, err := m.Layer(3); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Layer(3): %v, want ErrInUse", err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	mustLayer(t, m, 3)
}

func TestLayerCloseClosesItsConns(t *testing.T) {
	srv, cli := newMux(t), newMux(t)
	s := mustLayer(t, srv, 1)
	c := mustLayer(t, cli, 1)
	out, err := c.Dial(raft.ServerAddress(srv.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in := accept(t, s)
	s.Close() // the accepted side goes away: the dialler must see it
	_ = out.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := out.Read(make([]byte, 1)); err == nil {
		t.Fatal("read succeeded after the remote layer closed")
	}
	if _, err := in.Write([]byte("x")); err == nil {
		t.Fatal("write on a closed layer's conn succeeded")
	}
	c.Close()
	if _, err := c.Dial(raft.ServerAddress(srv.Addr().String()), time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
}

func TestMuxCloseStopsEverything(t *testing.T) {
	m, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := mustLayer(t, m, 1)
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept: %v", err)
	}
	if _, err := m.Layer(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Layer after Close: %v", err)
	}
}

// TestRaftTransportsShareOnePort runs two raft.NetworkTransports per node (two groups)
// over one Mux per node and checks that each RPC reaches its own group's consumer.
func TestRaftTransportsShareOnePort(t *testing.T) {
	a, b := newMux(t), newMux(t)
	newTrans := func(m *Mux, g uint32) *raft.NetworkTransport {
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  mustLayer(t, m, g),
			MaxPool: 2,
			Timeout: 2 * time.Second,
			Logger:  hclog.NewNullLogger(),
		})
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	ta1, ta2 := newTrans(a, 1), newTrans(a, 2)
	tb1, tb2 := newTrans(b, 1), newTrans(b, 2)
	_ = ta2

	// Group g's server on b answers with Term = g.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	serve := func(tr *raft.NetworkTransport, term uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case rpc := <-tr.Consumer():
					rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
				case <-stop:
					return
				}
			}
		}()
	}
	serve(tb1, 1)
	serve(tb2, 2)

	for _, tc := range []struct {
		from *raft.NetworkTransport
		want uint64
	}{{ta1, 1}, {ta2, 2}, {ta1, 1}} {
		var resp raft.AppendEntriesResponse
		err := tc.from.AppendEntries("b", raft.ServerAddress(b.Addr().String()),
			&raft.AppendEntriesRequest{Term: tc.want}, &resp)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Term != tc.want {
			t.Fatalf("answered by group %d, want %d", resp.Term, tc.want)
		}
	}
}
