package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Type is the first header byte: what kind of stream a connection carries. Append only.
type Type uint8

// Stream types.
const (
	TypeRaft   Type = 1 // a Raft group's NetworkTransport; id = group id
	TypeRPC    Type = 2 // the cluster's forwarding RPC; id 0
	TypeGossip Type = 3 // memberlist's streams (push/pull, probes over TCP); id 0
	TypeGroups Type = 4 // every Raft group's RPCs (Groups); id 0 multiplexed, 1 a snapshot
)

func (t Type) String() string {
	switch t {
	case TypeRaft:
		return "raft"
	case TypeRPC:
		return "rpc"
	case TypeGossip:
		return "gossip"
	case TypeGroups:
		return "groups"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// headerLen is the size of the routing header: type byte + uint32 id.
const headerLen = 5

// Sentinel errors.
var (
	ErrClosed = errors.New("transport: closed")       // the Mux or Layer is closed
	ErrInUse  = errors.New("transport: route in use") // a Layer already serves this (type, id)
	ErrHeader = errors.New("transport: bad header")   // incoming connection sent an unknown route
)

// Config tunes a Mux. Pass nil to New for the defaults.
type Config struct {
	// HandshakeTimeout bounds how long the acceptor waits for a header, and how long a
	// routed connection may wait for its Layer to accept it.
	HandshakeTimeout time.Duration
	// Backlog is the capacity of each Layer's accept channel.
	Backlog int
	// TLS, when set, wraps every connection, accepted (tls.Server) and dialled
	// (tls.Client), before the header: the header and the stream travel inside TLS, and a
	// peer that does not complete the handshake (no certificate, another CA, plain TCP)
	// is closed before it can name a route. It must authenticate both ends (mutual
	// TLS); the handshake counts against HandshakeTimeout.
	TLS *tls.Config
}

// DefaultConfig returns the defaults.
func DefaultConfig() *Config {
	return &Config{HandshakeTimeout: 5 * time.Second, Backlog: 16}
}

// Validate reports a config that cannot work.
func (c *Config) Validate() error {
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("transport: HandshakeTimeout must be > 0, got %v", c.HandshakeTimeout)
	}
	if c.Backlog < 0 {
		return fmt.Errorf("transport: Backlog must be >= 0, got %d", c.Backlog)
	}
	return nil
}

type route struct {
	typ Type
	id  uint32
}

// Mux accepts connections on one listener and routes them by header to Layers.
type Mux struct {
	ln  net.Listener
	cfg Config

	mu       sync.Mutex                      // guards layers, fallback, closed
	layers   map[route]*Layer                // owner: mu
	fallback map[Type]func(id uint32) *Layer // routes without a Layer; owner: mu
	closed   bool                            // owner: mu

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// New starts routing the connections ln accepts. The Mux owns ln and closes it on Close.
func New(ln net.Listener, cfg *Config) (*Mux, error) {
	c := DefaultConfig()
	if cfg != nil {
		c = cfg
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Mux{ln: ln, cfg: *c, layers: make(map[route]*Layer), fallback: map[Type]func(uint32) *Layer{}, done: make(chan struct{})}
	m.wg.Go(m.acceptLoop)
	return m, nil
}

// Listen is New on a fresh TCP listener at addr (tests: "127.0.0.1:0").
func Listen(addr string, cfg *Config) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m, err := New(ln, cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return m, nil
}

// Addr is the listener's address: the ServerAddress of this node in every group.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Layer registers the Raft stream layer of group id. Closing the layer unregisters it,
// so a restarted group can register again.
func (m *Mux) Layer(group uint32) (*Layer, error) { return m.Route(TypeRaft, group) }

// Route registers a Layer for any (type, id).
func (m *Mux) Route(typ Type, id uint32) (*Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	r := route{typ, id}
	if _, ok := m.layers[r]; ok {
		return nil, fmt.Errorf("%w: %v %d", ErrInUse, typ, id)
	}
	l := &Layer{
		m:      m,
		r:      r,
		hdr:    header(typ, id),
		ch:     make(chan net.Conn, m.cfg.Backlog),
		closed: make(chan struct{}),
		conns:  make(map[net.Conn]struct{}),
	}
	m.layers[r] = l
	return l, nil
}

// Close stops accepting, closes every Layer (and so every connection they handed out)
// and waits for the Mux's goroutines.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	layers := make([]*Layer, 0, len(m.layers))
	for _, l := range m.layers {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	close(m.done)
	err := m.ln.Close()
	for _, l := range layers {
		l.Close()
	}
	m.wg.Wait()
	return err
}

func (m *Mux) acceptLoop() {
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. EMFILE): back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-m.done:
				return
			}
			continue
		}
		delay = 0
		m.wg.Go(func() { m.handshake(c) })
	}
}

// handshake reads the header of one incoming connection and hands it to its Layer.
func (m *Mux) handshake(c net.Conn) {
	var hdr [headerLen]byte
	_ = c.SetReadDeadline(time.Now().Add(m.cfg.HandshakeTimeout))
	if m.cfg.TLS != nil {
		_ = c.SetWriteDeadline(time.Now().Add(m.cfg.HandshakeTimeout))
		tc := tls.Server(c, m.cfg.TLS)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			c.Close() // not a member: no certificate, or one the cluster CA did not sign
			return
		}
		_ = c.SetWriteDeadline(time.Time{})
		c = tc
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	r := route{Type(hdr[0]), binary.BigEndian.Uint32(hdr[1:])}
	m.mu.Lock()
	l, fb := m.layers[r], m.fallback[r.typ]
	m.mu.Unlock()
	if l == nil && fb != nil {
		l = fb(r.id)
	}
	if l == nil {
		c.Close() // unknown group: the dialler sees EOF and retries later
		return
	}
	l.deliver(c, m.cfg.HandshakeTimeout)
}

// setFallback has fn make (or find) the Layer of a connection of type typ whose id has
// none (nil: none made); fn nil removes it. Groups serves older peers with it.
func (m *Mux) setFallback(typ Type, fn func(id uint32) *Layer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fn == nil {
		delete(m.fallback, typ)
	} else {
		m.fallback[typ] = fn
	}
}

func header(typ Type, id uint32) [headerLen]byte {
	var h [headerLen]byte
	h[0] = byte(typ)
	binary.BigEndian.PutUint32(h[1:], id)
	return h
}

// Layer is one route of a Mux: a net.Listener for its incoming connections and a
// dialler that writes its header. It implements raft.StreamLayer.
type Layer struct {
	m   *Mux
	r   route
	hdr [headerLen]byte

	ch     chan net.Conn // routed connections waiting for Accept
	closed chan struct{} // closed by Close

	mu       sync.Mutex            // guards conns, isClosed
	conns    map[net.Conn]struct{} // every live connection dialled or accepted; owner: mu
	isClosed bool                  // owner: mu
}

var _ raft.StreamLayer = (*Layer)(nil)

// deliver hands a routed connection to Accept, or drops it if nobody takes it in time.
func (l *Layer) deliver(c net.Conn, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l.ch <- c:
	case <-l.closed:
		c.Close()
	case <-l.m.done:
		c.Close()
	case <-t.C:
		c.Close()
	}
}

// track records c so Close can close it; it reports false (and closes c) after Close.
func (l *Layer) track(c net.Conn) (net.Conn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed {
		c.Close()
		return nil, false
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, true
}

func (l *Layer) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// Accept waits for the next connection routed to this layer.
func (l *Layer) Accept() (net.Conn, error) {
	for {
		select {
		case c := <-l.ch:
			if tc, ok := l.track(c); ok {
				return tc, nil
			}
			return nil, ErrClosed
		case <-l.closed:
			return nil, ErrClosed
		}
	}
}

// Close unregisters the layer, wakes Accept and closes every connection the layer handed
// out, dialled or accepted.
func (l *Layer) Close() error {
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		return nil
	}
	l.isClosed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	close(l.closed)

	l.m.mu.Lock()
	if l.m.layers[l.r] == l {
		delete(l.m.layers, l.r)
	}
	l.m.mu.Unlock()

	for c := range conns {
		c.(*trackedConn).Conn.Close()
	}
	// Connections routed but never accepted.
	for {
		select {
		case c := <-l.ch:
			c.Close()
		default:
			return nil
		}
	}
}

// Addr is the Mux's listener address.
func (l *Layer) Addr() net.Addr { return l.m.Addr() }

// Dial connects to the Mux at address and names this layer's route.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, ErrClosed
	default:
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	if cfg := l.m.cfg.TLS; cfg != nil {
		hs := timeout
		if hs <= 0 {
			hs = l.m.cfg.HandshakeTimeout
		}
		_ = c.SetDeadline(time.Now().Add(hs))
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			c.Close()
			return nil, fmt.Errorf("transport: TLS handshake with %s: %w", address, err)
		}
		_ = c.SetDeadline(time.Time{})
		c = tc
	}
	if timeout > 0 {
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
	}
	if _, err := c.Write(l.hdr[:]); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	tc, ok := l.track(c)
	if !ok {
		return nil, ErrClosed
	}
	return tc, nil
}

// trackedConn removes itself from its layer when closed.
type trackedConn struct {
	net.Conn
	l    *Layer
	once sync.Once
}

func (c *trackedConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.Conn.Close()
		c.l.untrack(c)
	})
	return err
}
