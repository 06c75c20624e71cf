package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Server accepts AMQP 1.0 connections and serves them from a Backend.
type Server struct {
	cfg     *Config
	backend Backend
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and connections

	mu        sync.Mutex // guards listeners, conns, refusing, closed, acceptErr
	listeners []net.Listener
	conns     map[*conn]struct{}
	refusing  int // connections being refused for MaxConnections
	closed    bool

	// acceptErr holds, per listener, the error of its last failed Accept (or
	// the error that ended its loop). Written by that listener's accept loop.
	acceptErr map[net.Listener]acceptFailure

	authChecks atomic.Uint64 // checkAuth runs over all connections (tests wait on it)
	suspended  suspended     // links that may be resumed (resume.go)
	stats      serverStats   // Stats
}

// maxRefusing bounds the connections being answered "too many connections"
// at once (each lives at most HandshakeTimeout).
const maxRefusing = 64

// Accept back-off bounds (as net/http.Server uses): the wait after a failed
// Accept doubles from acceptRetryMin up to acceptRetryMax.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// acceptRetryGrace is how long after a back-off ends a failure still counts if
// no new one was seen: the retried Accept runs within microseconds, and if it
// fails again the failure is renewed. Past it, the retry is taken to be blocked
// waiting for a client, which means the listener accepts again.
const acceptRetryGrace = 500 * time.Millisecond

// acceptFailure is a listener's last Accept error. It counts until until; a
// zero until (the listener was closed) counts for good.
type acceptFailure struct {
	err   error
	until time.Time
}

// New returns a server. cfg nil means DefaultConfig().
func New(cfg *Config, b Backend) (*Server, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("amqp: invalid config: %w", err)
	}
	if b == nil {
		return nil, errors.New("amqp: nil Backend")
	}
	c := *cfg
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: &c, backend: b, log: log, ctx: ctx, cancel: cancel,
		conns: map[*conn]struct{}{}, acceptErr: map[net.Listener]acceptFailure{}}, nil
}

// Start listens on every Config.Addresses entry and serves in the background.
func (s *Server) Start() error {
	for _, a := range s.cfg.Addresses {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			_ = s.Close()
			return fmt.Errorf("amqp: listen %s: %w", a, err)
		}
		if err := s.addListener(ln); err != nil {
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.serve(ln)
		}()
	}
	return nil
}

// Addrs returns the addresses the server listens on.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]net.Addr, 0, len(s.listeners))
	for _, ln := range s.listeners {
		out = append(out, ln.Addr())
	}
	return out
}

func (s *Server) addListener(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.Close()
		return errors.New("amqp: server closed")
	}
	s.listeners = append(s.listeners, ln)
	return nil
}

// Serve accepts connections on ln until the server is closed.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.addListener(ln); err != nil {
		return err
	}
	return s.serve(ln)
}

// serve accepts connections on ln until the server is closed. A failed
// Accept (EMFILE "too many open files", ENFILE, ENOBUFS, ECONNABORTED, ...)
// never ends the loop: it backs off and retries, as net/http does, because the
// cause is usually transient (connections closing free descriptors) and a
// node whose listener stopped for good would look alive to its health checks
// while serving no one. While it backs off, and until its retry has waited
// acceptRetryGrace without failing, Ready reports the error: a retry that
// blocks is waiting for a client, so no client has to arrive for the node to
// be ready again. The loop ends only when the server closes or ln is closed.
func (s *Server) serve(ln net.Listener) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err == nil {
			if delay > 0 {
				delay = 0
				s.setAcceptErr(ln, nil, 0)
				s.log.Info("amqp: accepting connections again", "addr", ln.Addr())
			}
			s.ServeConn(nc)
			continue
		}
		if s.ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("amqp: listener %s closed: %w", ln.Addr(), err)
			s.setAcceptErr(ln, err, -1)
			return err
		}
		if delay == 0 {
			delay = acceptRetryMin
		} else {
			delay = min(2*delay, acceptRetryMax)
		}
		s.setAcceptErr(ln, fmt.Errorf("amqp: accept on %s: %w", ln.Addr(), err), delay+acceptRetryGrace)
		s.log.Warn("amqp: accept failed; retrying", "addr", ln.Addr(), "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// setAcceptErr records ln's Accept error for d (for good when d < 0); a nil
// err clears it.
func (s *Server) setAcceptErr(ln net.Listener, err error, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		delete(s.acceptErr, ln)
	case d < 0:
		s.acceptErr[ln] = acceptFailure{err: err}
	default:
		s.acceptErr[ln] = acceptFailure{err: err, until: time.Now().Add(d)}
	}
}

// Ready reports why the server is not accepting connections: nil while every
// listener accepts, else the error of a listener whose Accept fails (it is
// retrying) or that was closed under it. Health checks (/readyz) use it so a
// node that cannot accept clients is taken out of rotation.
func (s *Server) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("amqp: server closed")
	}
	var errs []error
	now := time.Now()
	for _, ln := range s.listeners {
		if f, ok := s.acceptErr[ln]; ok && (f.until.IsZero() || now.Before(f.until)) {
			errs = append(errs, f.err)
		}
	}
	return errors.Join(errs...)
}

// ServeConn serves one already-accepted connection in the background (for
// example one end of a net.Pipe in tests).
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.cfg.MaxConnections {
		// Past the limit a connection gets its open answered with a close that
		// says why (amqp:resource-limit-exceeded); beyond a further margin of
		// such refusals in flight, the socket is just closed.
		if s.refusing >= maxRefusing {
			s.mu.Unlock()
			nc.Close()
			return
		}
		c.overLimit = true
		s.refusing++
	} else {
		s.conns[c] = struct{}{}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.conns.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.stats.conns.Add(-1)
		c.run()
		s.mu.Lock()
		if c.overLimit {
			s.refusing--
		} else {
			delete(s.conns, c)
		}
		s.mu.Unlock()
	}()
}

// Close stops listening, closes every connection and waits for all goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	lns := s.listeners
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.cancel()
	}
	s.wg.Wait()
	return nil
}
