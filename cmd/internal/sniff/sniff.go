// Package sniff serves AMQP and HTTP on one port (the AMQPS port): after the TLS
// handshake, a connection that starts with the AMQP protocol header ("AMQP", part 2
// §2.2) goes to the AMQP server and any other to the HTTP server (the admin API and
// AMQP over WebSockets). The Service Bus SDKs' administration clients address
// https://<Endpoint host>/..., so a connection string naming the AMQPS port then works
// for both clients, as it does against Service Bus.
//
// Goroutines: Serve runs the accept loop; each accepted connection is classified by a
// goroutine of its own, bounded by Config.Timeout, and handed to the listener whose
// Accept takes it. Closing either listener closes the port.
package sniff

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// header is how every AMQP connection starts (AMQP, SASL or TLS protocol header).
var header = []byte("AMQP")

// Mux splits one listener into an AMQP and an HTTP listener.
type Mux struct {
	ln      net.Listener
	timeout time.Duration
	amqp    *chanListener
	http    *chanListener

	closeOnce sync.Once
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
}

// New splits ln. timeout bounds the handshake and the first bytes of a connection.
func New(ln net.Listener, timeout time.Duration) *Mux {
	m := &Mux{ln: ln, timeout: timeout, done: make(chan struct{})}
	m.amqp = &chanListener{m: m, c: make(chan net.Conn), errc: make(chan error, 1)}
	m.http = &chanListener{m: m, c: make(chan net.Conn), errc: make(chan error, 1)}
	return m
}

// AMQP is the listener of the connections that start with the AMQP header.
func (m *Mux) AMQP() net.Listener { return m.amqp }

// HTTP is the listener of every other connection.
func (m *Mux) HTTP() net.Listener { return m.http }

// Serve accepts connections until the Mux is closed, then returns nil. A failing
// Accept (out of file descriptors) is retried after a pause that grows to a second, as
// net/http does, instead of taking the port down, and the error is handed to the AMQP
// listener's Accept, so the AMQP server reports the port as not ready meanwhile
// (amqp.Server.Ready, /readyz). It returns an error only when ln itself is closed from
// elsewhere.
func (m *Mux) Serve() error {
	defer m.wg.Wait()
	var pause time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.Close()
				return err
			}
			select {
			case m.amqp.errc <- err:
			default: // one pending is enough
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-m.done:
				t.Stop()
				return nil
			}
			continue
		}
		pause = 0
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.classify(c)
		}()
	}
}

// classify reads the first bytes of c and hands it to the listener they name.
func (m *Mux) classify(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(m.timeout))
	first := make([]byte, len(header))
	n, err := io.ReadFull(c, first)
	if err != nil && n == 0 {
		c.Close() // a failed handshake or a silent client
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	to := m.http
	if bytes.Equal(first[:n], header) {
		to = m.amqp
	}
	pc := &peekedConn{Conn: c, first: first[:n]}
	select {
	case to.c <- pc:
	case <-m.done:
		c.Close()
	}
}

// Close closes the port and both listeners.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.ln.Close()
	})
	return err
}

type chanListener struct {
	m    *Mux
	c    chan net.Conn
	errc chan error // the port's failed Accepts (AMQP listener only)
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case err := <-l.errc:
		return nil, err
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { return l.m.Close() }
func (l *chanListener) Addr() net.Addr { return l.m.ln.Addr() }

// peekedConn gives back the bytes read to classify it before the rest.
type peekedConn struct {
	net.Conn
	first []byte
}

func (c *peekedConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
