package cluster

import (
	"bufio"
	"encoding/gob"
	"io"
	"net"
	"net/rpc"
	"sync"
)

// Forwarded operations are many small calls in flight at once on one connection per
// peer. net/rpc's own gob codecs write every request and every response with a write
// syscall of its own, made while holding the client's request lock (or the server's
// sending lock), so concurrent calls never share one. The codecs below produce the same
// gob stream (a peer running the standard codecs reads it unchanged) into a buffer, and
// one goroutine per connection writes whatever the calls encoded meanwhile with one
// syscall: under load one write carries many calls, and a caller never waits for the
// socket.

// coalescer is the write side of one connection.
type coalescer struct {
	conn io.WriteCloser
	wake chan struct{} // capacity 1: there may be something to write
	stop chan struct{} // closed by Close
	once sync.Once

	mu  sync.Mutex
	buf []byte // encoded calls not yet handed to the writer; owner: mu
	err error  // the first write error; owner: mu
}

// newCoalescer starts the connection's writing goroutine, tracked by wg; Close ends it.
func newCoalescer(conn io.WriteCloser, wg *sync.WaitGroup) *coalescer {
	w := &coalescer{conn: conn, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	wg.Add(1)
	go w.loop(wg)
	return w
}

// Write appends p to what the next write sends (gob writes one message per call).
func (w *coalescer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// flush hands what was written so far to the writing goroutine. A write that fails
// later closes the connection, which fails the calls in flight on the reading side.
func (w *coalescer) flush() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending; it will take these bytes too
	}
	return err
}

func (w *coalescer) loop(wg *sync.WaitGroup) {
	defer wg.Done()
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
// dropped: net/rpc closes a codec only once its peer is gone or its calls are abandoned.
func (w *coalescer) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		err = w.conn.Close()
	})
	return err
}

// clientCodec is net/rpc's gob client codec with coalesced writes.
type clientCodec struct {
	dec *gob.Decoder
	enc *gob.Encoder
	w   *coalescer
}

func newClientCodec(conn net.Conn, wg *sync.WaitGroup) *clientCodec {
	w := newCoalescer(conn, wg)
	return &clientCodec{dec: gob.NewDecoder(bufio.NewReader(conn)), enc: gob.NewEncoder(w), w: w}
}

func (c *clientCodec) WriteRequest(r *rpc.Request, body any) error {
	if err := c.enc.Encode(r); err != nil {
		return err
	}
	if err := c.enc.Encode(body); err != nil {
		return err
	}
	return c.w.flush()
}

func (c *clientCodec) ReadResponseHeader(r *rpc.Response) error { return c.dec.Decode(r) }
func (c *clientCodec) ReadResponseBody(body any) error          { return c.dec.Decode(body) }
func (c *clientCodec) Close() error                             { return c.w.Close() }

// serverCodec is net/rpc's gob server codec with coalesced writes.
type serverCodec struct {
	dec *gob.Decoder
	enc *gob.Encoder
	w   *coalescer
}

func newServerCodec(conn net.Conn, wg *sync.WaitGroup) *serverCodec {
	w := newCoalescer(conn, wg)
	return &serverCodec{dec: gob.NewDecoder(bufio.NewReader(conn)), enc: gob.NewEncoder(w), w: w}
}

func (c *serverCodec) ReadRequestHeader(r *rpc.Request) error { return c.dec.Decode(r) }
func (c *serverCodec) ReadRequestBody(body any) error         { return c.dec.Decode(body) }

// WriteResponse is called under the server's sending lock. A response gob cannot encode
// leaves a broken stream behind, so the connection is closed, as net/rpc's codec does.
func (c *serverCodec) WriteResponse(r *rpc.Response, body any) error {
	if err := c.enc.Encode(r); err != nil {
		c.Close()
		return err
	}
	if err := c.enc.Encode(body); err != nil {
		c.Close()
		return err
	}
	return c.w.flush()
}

func (c *serverCodec) Close() error { return c.w.Close() }

var (
	_ rpc.ClientCodec = (*clientCodec)(nil)
	_ rpc.ServerCodec = (*serverCodec)(nil)
)
