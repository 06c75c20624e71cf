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
)

// Server accepts AMQP 1.0 connections and serves them from a Backend.
type Server struct {
	cfg     *Config
	backend Backend
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and connections

	mu        sync.Mutex // guards listeners, conns, refusing, closed
	listeners []net.Listener
	conns     map[*conn]struct{}
	refusing  int // connections being refused for MaxConnections
	closed    bool

	authChecks atomic.Uint64 // checkAuth runs over all connections (tests wait on it)
	suspended  suspended     // links that may be resumed (resume.go)
	stats      serverStats   // Stats
}

// maxRefusing bounds the connections being answered "too many connections"
// at once (each lives at most HandshakeTimeout).
const maxRefusing = 64

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
	return &Server{cfg: &c, backend: b, log: log, ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{}}, nil
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

func (s *Server) serve(ln net.Listener) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.ServeConn(nc)
	}
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
