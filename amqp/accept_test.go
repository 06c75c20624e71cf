package amqp

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// emfileListener wraps a real listener; until release is closed its Accept
// fails as accept(2) does when the process is out of file descriptors.
type emfileListener struct {
	net.Listener
	release chan struct{}
	mu      sync.Mutex
	fails   int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	select {
	case <-l.release:
		return l.Listener.Accept()
	default:
	}
	l.mu.Lock()
	l.fails++
	l.mu.Unlock()
	return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(),
		Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

func (l *emfileListener) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fails
}

// TestAcceptSurvivesEMFILE: a listener whose Accept fails with "too many open
// files" (not a timeout) keeps being retried; Ready reports the failure while
// it lasts; once descriptors are available again Ready is nil before any new
// client arrives (a health check must not wait for one), and a new client is
// served. Before the fix the accept loop returned for good on the
// first such error while health checks stayed green.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	b := newMemBackend()
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	cfg := DefaultConfig()
	cfg.Addresses = nil
	s, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: inner, release: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := ln.failures(); n < 3 {
			return errors.New("fewer than 3 failed accepts so far")
		}
		return nil
	})
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("Ready() = %v while Accept fails with EMFILE, want that error", err)
	}
	close(ln.release)
	// The retried Accept now blocks waiting for a client: no client comes until
	// Ready is nil.
	testutil.WaitFor(t, 10*time.Second, s.Ready)

	c := dialPlain(t, inner.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("session on a connection accepted after EMFILE: %v", err)
	}
	if _, err := sess.NewSender(ctx, "q1", nil); err != nil {
		t.Fatalf("sender after EMFILE: %v", err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready() = %v after a client was served", err)
	}

	s.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close = %v, want nil", err)
	}
}

// TestReadyReportsClosedListener: a listener closed under the server (not by
// Server.Close) ends its accept loop, and Ready says so.
func TestReadyReportsClosedListener(t *testing.T) {
	s, _, _ := testServer(t, nil)
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready() = %v on a fresh server", err)
	}
	s.mu.Lock()
	ln := s.listeners[0]
	s.mu.Unlock()
	ln.Close()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if err := s.Ready(); err == nil {
			return errors.New("Ready() still nil after the listener closed")
		}
		return nil
	})
}
