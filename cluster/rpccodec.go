package cluster

import (
	"bufio"
	"encoding/gob"
	"net"
	"net/rpc"
	"sync"

	"github.com/quorumbus/quorumbus/cluster/wire"
)

// The codecs of version 1 of the wire (wirev1.go). Forwarded operations are many small
// calls in flight at once on one connection per peer. net/rpc's own gob codecs write
// every request and every response with a write syscall of its own, made while holding
// the client's request lock (or the server's sending lock), so concurrent calls never
// share one. The codecs below produce the same gob stream (a peer running the standard
// codecs reads it unchanged) into a wire.BatchWriter, which writes whatever the calls
// encoded meanwhile with one syscall.

// clientCodec is net/rpc's gob client codec with coalesced writes.
type clientCodec struct {
	dec *gob.Decoder
	enc *gob.Encoder
	w   *wire.BatchWriter
}

func newClientCodec(conn net.Conn, wg *sync.WaitGroup) *clientCodec {
	w := wire.NewBatchWriter(conn, wg)
	return &clientCodec{dec: gob.NewDecoder(bufio.NewReader(conn)), enc: gob.NewEncoder(w), w: w}
}

func (c *clientCodec) WriteRequest(r *rpc.Request, body any) error {
	if err := c.enc.Encode(r); err != nil {
		return err
	}
	if err := c.enc.Encode(body); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *clientCodec) ReadResponseHeader(r *rpc.Response) error { return c.dec.Decode(r) }
func (c *clientCodec) ReadResponseBody(body any) error          { return c.dec.Decode(body) }
func (c *clientCodec) Close() error                             { return c.w.Close() }

// serverCodec is net/rpc's gob server codec with coalesced writes.
type serverCodec struct {
	dec *gob.Decoder
	enc *gob.Encoder
	w   *wire.BatchWriter
}

func newServerCodec(conn net.Conn, wg *sync.WaitGroup) *serverCodec {
	w := wire.NewBatchWriter(conn, wg)
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
	return c.w.Flush()
}

func (c *serverCodec) Close() error { return c.w.Close() }

var (
	_ rpc.ClientCodec = (*clientCodec)(nil)
	_ rpc.ServerCodec = (*serverCodec)(nil)
)
