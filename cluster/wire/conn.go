package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Versions. Version 1 is the cluster's net/rpc with gob on route 0 of the cluster
// port's RPC stream type; it has no in-band negotiation and stays served for nodes of
// older releases. From version 2 on, a caller dials RouteID, and the two ends agree on
// a version per connection (Handshake, Accept): the caller offers the range it speaks,
// the callee picks the highest it shares. A node of a release without RouteID closes
// such a connection before any byte is read: the caller then falls back to version 1.
const (
	MinVersion = 2 // the lowest version negotiated in band
	Version    = 2 // the highest version this release speaks
)

// RouteID is the route id, on the cluster port's RPC stream type, of connections that
// negotiate a version (route 0 carries version 1).
const RouteID = 1

// DefaultMaxFrame bounds one call's or reply's body (a batch of large messages).
const DefaultMaxFrame = 512 << 20

var magic = [3]byte{'Q', 'B', 'W'}

// Errors.
var (
	// ErrNoVersion: the peer shares no version with this node.
	ErrNoVersion = errors.New("wire: no common protocol version")
	// ErrConnection: the connection failed; a call in flight may or may not have taken
	// effect on the peer.
	ErrConnection = errors.New("wire: connection failed")
)

// ServerError is a call the peer received but could not serve (an unknown method, a
// body it could not decode). The connection stays usable.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return "wire: peer refused the call: " + e.Msg }

// Handshake is the caller's side of version negotiation on a fresh connection: it
// offers MinVersion..Version and returns the version the callee chose. Any failure
// (the callee closed the connection: an older release) is an error; the caller closes
// conn. timeout bounds the exchange.
func Handshake(conn net.Conn, timeout time.Duration) (int, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	hello := append(magic[:], 0)
	hello = binenc.AppendUvarint(hello, MinVersion)
	hello = binenc.AppendUvarint(hello, Version)
	if _, err := conn.Write(hello); err != nil {
		return 0, fmt.Errorf("%w: hello: %v", ErrConnection, err)
	}
	var got [4]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return 0, fmt.Errorf("%w: hello reply: %v", ErrConnection, err)
	}
	if [3]byte(got[:3]) != magic {
		return 0, fmt.Errorf("%w: bad hello reply %q", ErrBadMessage, got[:])
	}
	v, err := binary.ReadUvarint(byteReader{conn})
	if err != nil {
		return 0, fmt.Errorf("%w: hello reply: %v", ErrConnection, err)
	}
	if v < MinVersion || v > Version {
		return 0, fmt.Errorf("%w: the peer chose %d, this node speaks %d..%d", ErrNoVersion, v, MinVersion, Version)
	}
	return int(v), nil
}

// Accept is the callee's side: it reads the caller's offer, answers the highest version
// both speak (0 when none, then fails) and returns it. timeout bounds the exchange.
func Accept(conn net.Conn, timeout time.Duration) (int, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return 0, fmt.Errorf("%w: hello: %v", ErrConnection, err)
	}
	if [3]byte(hdr[:3]) != magic {
		return 0, fmt.Errorf("%w: bad hello %q", ErrBadMessage, hdr[:])
	}
	br := byteReader{conn}
	lo, err := binary.ReadUvarint(br)
	if err != nil {
		return 0, fmt.Errorf("%w: hello: %v", ErrConnection, err)
	}
	hi, err := binary.ReadUvarint(br)
	if err != nil {
		return 0, fmt.Errorf("%w: hello: %v", ErrConnection, err)
	}
	v := min(hi, Version)
	if v < lo || v < MinVersion {
		v = 0
	}
	reply := binenc.AppendUvarint(append(magic[:], 0), v)
	if _, err := conn.Write(reply); err != nil {
		return 0, fmt.Errorf("%w: hello reply: %v", ErrConnection, err)
	}
	if v == 0 {
		return 0, fmt.Errorf("%w: the peer offers %d..%d, this node speaks %d..%d", ErrNoVersion, lo, hi, MinVersion, Version)
	}
	return int(v), nil
}

// byteReader reads one byte at a time (the hello must not read past itself).
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var p [1]byte
	_, err := io.ReadFull(b.r, p[:])
	return p[0], err
}

// Frames: a 4-byte big-endian length, then kind, uvarint sequence number, then for a
// request its method and body, for a response its status and body (for statusError,
// the message). The fixed-width length lets a sender encode a body in place, straight
// into the connection's write buffer.
const (
	kindRequest  = 1
	kindResponse = 2

	statusOK    = 0
	statusError = 1
)

// appendFrame appends a frame whose body m writes (with ec), or nothing and an error
// when the frame would exceed maxFrame.
func appendFrame(b []byte, kind byte, seq uint64, code byte, m Message, ec ErrorCodec, maxFrame int) ([]byte, error) {
	at := len(b)
	b = append(b, 0, 0, 0, 0, kind)
	b = binenc.AppendUvarint(b, seq)
	b = append(b, code)
	b = m.AppendTo(b, ec)
	n := len(b) - at - 4
	if n > maxFrame {
		return b[:at], fmt.Errorf("%w: a frame of %d bytes exceeds the limit of %d", ErrBadMessage, n, maxFrame)
	}
	binary.BigEndian.PutUint32(b[at:], uint32(n))
	return b, nil
}

// rawBody is a body already encoded (an error message).
type rawBody []byte

func (r rawBody) AppendTo(b []byte, _ ErrorCodec) []byte { return append(b, r...) }
func (rawBody) DecodeFrom(*Decoder, ErrorCodec)          {}

// readFrame reads one frame: kind, sequence number, code and body.
func readFrame(r *bufio.Reader, maxFrame int) (kind byte, seq uint64, code byte, body []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(maxFrame) || n < 3 {
		return 0, 0, 0, nil, fmt.Errorf("%w: frame of %d bytes (limit %d)", ErrBadMessage, n, maxFrame)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, 0, 0, nil, err
	}
	d := NewDecoder(buf[1:])
	seq = d.Uvarint()
	code = d.Byte()
	if d.Err() != nil {
		return 0, 0, 0, nil, d.Err()
	}
	return buf[0], seq, code, d.Rest(), nil
}

// Response is a call's reply body, or why there is none.
type Response struct {
	Body []byte
	Err  error // *ServerError, or wrapping ErrConnection
}

// Client is the caller's end of a version-2 connection: any number of calls in flight,
// their replies matched by sequence number.
type Client struct {
	w        *BatchWriter
	maxFrame int
	ec       ErrorCodec

	mu      sync.Mutex
	pending map[uint64]chan Response // owner: mu
	seq     uint64                   // owner: mu
	err     error                    // set once the connection failed; owner: mu
}

// NewClient runs the client side of conn, after Handshake; errors in calls travel
// through ec. Its reading and writing goroutines join wg; Close (or a failed
// connection) ends them.
func NewClient(conn net.Conn, ec ErrorCodec, wg *sync.WaitGroup, maxFrame int) *Client {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	c := &Client{w: NewBatchWriter(conn, wg), maxFrame: maxFrame, ec: ec, pending: map[uint64]chan Response{}}
	r := bufio.NewReaderSize(conn, 64<<10)
	wg.Go(func() { c.read(r) })
	return c
}

// Go sends a call, its body encoded straight into the connection's write buffer, and
// returns the channel its response arrives on (capacity 1).
func (c *Client) Go(m Method, body Message) <-chan Response {
	ch := make(chan Response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		ch <- Response{Err: err}
		return ch
	}
	c.seq++
	seq := c.seq
	c.pending[seq] = ch
	c.mu.Unlock()
	var tooLarge error
	err := c.w.Append(func(b []byte) []byte {
		b, tooLarge = appendFrame(b, kindRequest, seq, byte(m), body, c.ec, c.maxFrame)
		return b
	})
	switch {
	case tooLarge != nil:
		c.mu.Lock()
		delete(c.pending, seq)
		c.mu.Unlock()
		ch <- Response{Err: &ServerError{Msg: tooLarge.Error()}} // not sent: the connection stays usable
	case err != nil:
		c.fail(fmt.Errorf("%w: %v", ErrConnection, err))
	}
	return ch
}

// Err reports why the connection failed, nil while it works.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error {
	err := c.w.Close()
	c.fail(fmt.Errorf("%w: closed", ErrConnection))
	return err
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.pending
	c.pending = map[uint64]chan Response{}
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- Response{Err: err}
	}
}

func (c *Client) read(r *bufio.Reader) {
	for {
		kind, seq, code, body, err := readFrame(r, c.maxFrame)
		if err == nil && kind != kindResponse {
			err = fmt.Errorf("%w: frame kind %d from the callee", ErrBadMessage, kind)
		}
		if err != nil {
			c.w.Close()
			c.fail(fmt.Errorf("%w: %v", ErrConnection, err))
			return
		}
		c.mu.Lock()
		ch := c.pending[seq]
		delete(c.pending, seq)
		c.mu.Unlock()
		if ch == nil {
			continue // failed meanwhile
		}
		if code == statusError {
			ch <- Response{Err: &ServerError{Msg: string(body)}}
		} else {
			ch <- Response{Body: body}
		}
	}
}

// Handler serves one call: its reply, or an error the caller gets as a ServerError. It
// runs on a goroutine of its own.
type Handler func(m Method, body []byte) (Message, error)

// Serve runs the callee side of conn, after Accept, until the connection ends; each call
// runs h on a goroutine that joins wg, and its reply travels with errors through ec. It
// closes conn.
func Serve(conn net.Conn, h Handler, ec ErrorCodec, wg *sync.WaitGroup, maxFrame int) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	w := NewBatchWriter(conn, wg)
	defer w.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		kind, seq, code, body, err := readFrame(r, maxFrame)
		if err != nil {
			return
		}
		if kind != kindRequest {
			return
		}
		wg.Go(func() {
			out, err := h(Method(code), body)
			_ = w.Append(func(b []byte) []byte { // a failed write closed conn
				if err == nil {
					b, err = appendFrame(b, kindResponse, seq, statusOK, out, ec, maxFrame)
				}
				if err != nil {
					b, _ = appendFrame(b, kindResponse, seq, statusError, rawBody(err.Error()), ec, maxFrame)
				}
				return b
			})
		})
	}
}

// BatchWriter is the write side of one connection shared by concurrent calls: callers
// append what they send to a buffer, and one goroutine writes whatever accumulated
// meanwhile with one syscall. Under load one write carries many calls, and a caller
// never waits for the socket.
type BatchWriter struct {
	conn io.WriteCloser
	wake chan struct{} // capacity 1: there may be something to write
	stop chan struct{} // closed by Close
	once sync.Once

	mu  sync.Mutex
	buf []byte // bytes not yet handed to the writer; owner: mu
	err error  // the first write error; owner: mu
}

// NewBatchWriter starts the connection's writing goroutine, tracked by wg; Close ends it.
func NewBatchWriter(conn io.WriteCloser, wg *sync.WaitGroup) *BatchWriter {
	w := &BatchWriter{conn: conn, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	wg.Go(w.loop)
	return w
}

// Write appends p to what the next write sends; Flush hands it to the writer.
func (w *BatchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Append lets add append to the write buffer, under the writer's lock (so what it
// appends stays together), then flushes.
func (w *BatchWriter) Append(add func([]byte) []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.buf = add(w.buf)
	w.mu.Unlock()
	return w.Flush()
}

// Flush hands what was written so far to the writing goroutine. A write that fails
// later closes the connection, which fails the calls in flight on the reading side.
func (w *BatchWriter) Flush() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending; it will take these bytes too
	}
	return err
}

func (w *BatchWriter) loop() {
	var spare []byte
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			return
		}
		w.mu.Lock()
		out := w.buf
		if len(out) > 0 { // swap buffers; spare is never the one callers append to
			w.buf = spare[:0]
		}
		w.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := w.conn.Write(out); err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			w.conn.Close()
			return
		}
		if cap(out) <= 1<<20 { // keep a buffer for the next round, unless a burst made it huge
			spare = out
		} else {
			spare = nil
		}
	}
}

// Close closes the connection and ends the writing goroutine. Bytes not yet written are
// dropped.
func (w *BatchWriter) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		err = w.conn.Close()
		w.mu.Lock()
		if w.err == nil {
			w.err = net.ErrClosed
		}
		w.mu.Unlock()
	})
	return err
}
