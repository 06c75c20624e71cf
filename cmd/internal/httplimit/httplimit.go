// Package httplimit bounds what HTTP clients can hold of a node on each port that
// speaks HTTP (the admin port, and the AMQP and AMQPS ports' HTTP halves): how many
// connections are open at once (Listener), how long a request may take to arrive, how
// long one write of a response may wait for a client that does not read, and how long
// a keep-alive connection may sit idle (Config.Server). Without them, a client could
// hold any number of idle or slow connections open for good, each with its goroutine
// and buffers (3,000 idle keep-alive connections held a node at 3,707 goroutines).
//
// The request timeout covers the headers and the body only: once the body has been
// read the read deadline is lifted, so a long operation (a purge streaming its
// progress, a 30-second profile) is never cut off by it. The write timeout bounds each
// write of a response, not the response as a whole, for the same reason. A hijacked
// connection (AMQP over WebSockets) is left alone: net/http clears its deadlines when it
// hands it over, and the AMQP server bounds it from then on. It still counts toward the
// connection limit until it is closed.
//
// Goroutines: none of its own.
package httplimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config holds the bounds of one port (P10).
type Config struct {
	// MaxConnections bounds the port's open connections; one more is closed at once.
	MaxConnections int
	// ReadTimeout bounds the arrival of a request: its headers, within the lesser of it
	// and MaxHeaderWait, and its body.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write of a response to the client.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no next request within it.
	IdleTimeout time.Duration
}

// MaxHeaderWait bounds the arrival of a request's headers when ReadTimeout is longer.
const MaxHeaderWait = 10 * time.Second

// DefaultConfig returns the defaults: 1000 connections, 60 s for a request, a write and
// an idle connection.
func DefaultConfig() Config {
	return Config{MaxConnections: 1000, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: time.Minute}
}

// Validate names the first bound that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxConnections < 1:
		return fmt.Errorf("httplimit: MaxConnections %d: want at least 1", c.MaxConnections)
	case c.ReadTimeout <= 0, c.WriteTimeout <= 0, c.IdleTimeout <= 0:
		return errors.New("httplimit: the timeouts must be positive")
	}
	return nil
}

// Server returns an HTTP server for h with c's timeouts. Serve it on a Listener of c's.
func (c Config) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           c.Handler(h),
		ReadHeaderTimeout: min(MaxHeaderWait, c.ReadTimeout),
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		// No WriteTimeout: it would bound the whole response from the end of the request
		// on, which a long operation outlives. Handler bounds each write instead.
	}
}

// Handler wraps next so that the read deadline the server set for the request (its
// ReadTimeout) is lifted once the request's body has been read, and each write of the
// response must finish within WriteTimeout.
func (c Config) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		gw := &writer{ResponseWriter: w, rc: rc, timeout: c.WriteTimeout}
		lift := func() { _ = rc.SetReadDeadline(time.Time{}) }
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			lift()
		} else {
			r.Body = &body{ReadCloser: r.Body, eof: lift}
		}
		defer gw.extend() // net/http writes what is buffered once the handler returns
		next.ServeHTTP(gw, r)
	})
}

// body calls eof once its reader has returned io.EOF.
type body struct {
	io.ReadCloser
	once sync.Once
	eof  func()
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.eof)
	}
	return n, err
}

// writer moves the connection's write deadline WriteTimeout ahead of each write, until
// the connection is hijacked.
type writer struct {
	http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	hijacked bool // the handler's goroutine only
}

func (w *writer) extend() {
	if !w.hijacked {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *writer) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher, for handlers that stream.
func (w *writer) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Hijack implements http.Hijacker, for the WebSocket upgrade.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}

// Unwrap gives http.ResponseController the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Listener bounds how many of its connections are open at once: a connection accepted
// beyond MaxConnections is closed at once, before it is read from, and counted as
// refused. A connection counts until it is closed (by the server, or by whoever it was
// handed to).
type Listener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Uint64
}

// Listen bounds ln's open connections to c.MaxConnections.
func (c Config) Listen(ln net.Listener) *Listener { return NewListener(ln, c.MaxConnections) }

// NewListener bounds ln's open connections to max.
func NewListener(ln net.Listener, max int) *Listener {
	return &Listener{Listener: ln, max: int64(max)}
}

// Accept returns the next connection within the bound, closing the ones beyond it.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Open is how many of the listener's connections are open.
func (l *Listener) Open() int64 { return l.open.Load() }

// Refused is how many connections the listener has closed for being beyond the bound.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
