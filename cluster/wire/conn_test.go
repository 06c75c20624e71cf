package wire

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// pipe returns the two ends of a loopback TCP connection.
func pipe(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-acc
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestHandshakeAgreesOnVersion(t *testing.T) {
	c, s := pipe(t)
	got := make(chan error, 1)
	go func() {
		v, err := Accept(s, 5*time.Second)
		if err == nil && v != Version {
			err = fmt.Errorf("callee chose %d", v)
		}
		got <- err
	}()
	v, err := Handshake(c, 5*time.Second)
	if err != nil || v != Version {
		t.Fatalf("Handshake = %d, %v; want %d", v, err, Version)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// A callee of an older release closes the route before reading anything: the caller
// gets an error at once (and falls back to version 1), not a hang.
func TestHandshakeWithAPeerThatClosesFails(t *testing.T) {
	c, s := pipe(t)
	s.Close()
	start := time.Now()
	if _, err := Handshake(c, 5*time.Second); !errors.Is(err, ErrConnection) {
		t.Fatalf("Handshake with a closed peer: %v, want ErrConnection", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Handshake took %v: it waited for the timeout", d)
	}
}

// A caller that offers only versions this node does not speak gets version 0 and an
// error on both ends.
func TestAcceptRefusesUnknownVersions(t *testing.T) {
	c, s := pipe(t)
	got := make(chan error, 1)
	go func() {
		_, err := Accept(s, 5*time.Second)
		got <- err
	}()
	offer := binenc.AppendUvarint(binenc.AppendUvarint(append(magic[:], 0), Version+1), Version+5)
	if _, err := c.Write(offer); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 5)
	n, _ := c.Read(reply)
	if n != 5 || reply[4] != 0 {
		t.Fatalf("reply %x, want the magic and version 0", reply[:n])
	}
	if err := <-got; !errors.Is(err, ErrNoVersion) {
		t.Fatalf("Accept: %v, want ErrNoVersion", err)
	}
}

// Many concurrent calls on one connection each get their own reply; an unknown method
// is a ServerError and leaves the connection usable.
func TestClientServeConcurrentCalls(t *testing.T) {
	c, s := pipe(t)
	var wg sync.WaitGroup
	served := make(chan struct{})
	go func() {
		defer close(served)
		Serve(s, func(m Method, body []byte) (Message, error) {
			if m != MethodCancel {
				return nil, fmt.Errorf("unknown method %v", m)
			}
			var cc CancelCall
			if err := Decode(body, &cc, testErrors{}); err != nil {
				return nil, err
			}
			return &Cancelled{OK: cc.ID%2 == 0}, nil
		}, testErrors{}, &wg, 0)
	}()
	cl := NewClient(c, testErrors{}, &wg, 0)
	var callers sync.WaitGroup
	for g := range 64 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			for i := range 100 {
				id := uint64(g*1000 + i)
				select {
				case r := <-cl.Go(MethodCancel, &CancelCall{ID: id}):
					var out Cancelled
					if r.Err != nil {
						t.Errorf("call %d: %v", id, r.Err)
						return
					}
					if err := Decode(r.Body, &out, testErrors{}); err != nil || out.OK != (id%2 == 0) {
						t.Errorf("call %d: %v %v", id, out, err)
						return
					}
				case <-time.After(10 * time.Second):
					t.Errorf("call %d: no reply in 10 s", id)
					return
				}
			}
		}()
	}
	callers.Wait()
	r := <-cl.Go(MethodDigests, Empty{})
	var se *ServerError
	if !errors.As(r.Err, &se) {
		t.Fatalf("unknown method: %v, want a ServerError", r.Err)
	}
	if cl.Err() != nil {
		t.Fatalf("the connection failed after a server error: %v", cl.Err())
	}
	cl.Close()
	if r := <-cl.Go(MethodCancel, &CancelCall{}); !errors.Is(r.Err, ErrConnection) {
		t.Fatalf("call after Close: %v, want ErrConnection", r.Err)
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the client closed")
	}
	wg.Wait()
}

// A frame longer than the limit ends the connection instead of allocating it.
func TestServeRefusesOversizedFrames(t *testing.T) {
	c, s := pipe(t)
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(s, func(Method, []byte) (Message, error) { return Empty{}, nil }, testErrors{}, &wg, 1024)
	}()
	if _, err := c.Write([]byte{0x40, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve accepted a 1 GiB frame header")
	}
	wg.Wait()
}

// A call whose body exceeds the frame limit is refused on the caller's side, unsent, and
// the connection stays usable.
func TestClientRefusesOversizedCalls(t *testing.T) {
	c, s := pipe(t)
	var wg sync.WaitGroup
	go Serve(s, func(Method, []byte) (Message, error) { return &Cancelled{OK: true}, nil }, testErrors{}, &wg, 0)
	cl := NewClient(c, testErrors{}, &wg, 64)
	defer cl.Close()
	var se *ServerError
	if r := <-cl.Go(MethodMetaApply, &MetaApply{Entry: make([]byte, 100)}); !errors.As(r.Err, &se) {
		t.Fatalf("oversized call: %v, want a ServerError", r.Err)
	}
	r := <-cl.Go(MethodCancel, &CancelCall{ID: 1})
	var out Cancelled
	if r.Err != nil || Decode(r.Body, &out, testErrors{}) != nil || !out.OK {
		t.Fatalf("call after the refused one: %v %v", r.Err, out)
	}
}
