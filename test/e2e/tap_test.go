package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// AMQP performative descriptor codes (AMQP 1.0 part 2 §2.7).
const (
	perfAttach = 0x12
	perfFlow   = 0x13
)

// tap is a TCP proxy between one SDK client and the node. It records the AMQP frames the
// client has sent, once they have been written to the node, so a test can wait until a
// request has reached the broker instead of sleeping and hoping it has.
type tap struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	up    []*bytes.Buffer // per proxied connection, client to node bytes; owner: mu
	conns []net.Conn      // to close at the end; owner: mu
}

// tapped returns a client whose connection goes through a new tap.
func (e *env) tapped(t *testing.T) (*azservicebus.Client, *tap) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln, target: e.n.AMQP}
	tp.wg.Add(1)
	go tp.accept()
	t.Cleanup(tp.close)
	cs := e.n.ConnectionString
	if !strings.Contains(cs, "sb://"+e.n.AMQP+";") {
		t.Fatalf("connection string %q does not name the AMQP endpoint %s", cs, e.n.AMQP)
	}
	cs = strings.Replace(cs, "sb://"+e.n.AMQP+";", "sb://"+ln.Addr().String()+";", 1)
	c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, tp
}

func (tp *tap) accept() {
	defer tp.wg.Done()
	for {
		client, err := tp.ln.Accept()
		if err != nil {
			return // closed
		}
		node, err := net.Dial("tcp", tp.target)
		if err != nil {
			client.Close()
			continue
		}
		up := &bytes.Buffer{}
		tp.mu.Lock()
		tp.up = append(tp.up, up)
		tp.conns = append(tp.conns, client, node)
		tp.mu.Unlock()
		tp.wg.Add(2)
		go func() { // client to node, recorded after each write
			defer tp.wg.Done()
			defer node.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if _, werr := node.Write(buf[:n]); werr != nil {
						return
					}
					tp.mu.Lock()
					up.Write(buf[:n])
					tp.mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // node to client
			defer tp.wg.Done()
			defer client.Close()
			io.Copy(client, node)
		}()
	}
}

func (tp *tap) close() {
	tp.ln.Close()
	tp.mu.Lock()
	for _, c := range tp.conns {
		c.Close()
	}
	tp.mu.Unlock()
	tp.wg.Wait()
}

// sent returns the bodies of the frames with performative code that the client has sent
// to the node so far, over every connection, in order per connection.
func (tp *tap) sent(code byte) [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out [][]byte
	for _, up := range tp.up {
		b := up.Bytes()
		for len(b) >= 8 {
			if bytes.HasPrefix(b, []byte("AMQP")) { // protocol header (SASL, then AMQP)
				b = b[8:]
				continue
			}
			size := int(binary.BigEndian.Uint32(b))
			doff := 4 * int(b[4])
			if size < 8 || doff < 8 || doff > size || len(b) < size {
				break // incomplete (or not AMQP: nothing more to learn)
			}
			body := b[doff:size]
			// A performative is a described list: 0x00, then its code as smallulong (0x53).
			if len(body) >= 3 && body[0] == 0x00 && body[1] == 0x53 && body[2] == code {
				out = append(out, bytes.Clone(body))
			}
			b = b[size:]
		}
	}
	return out
}

// waitSent waits until the client has sent more than n frames with performative code
// whose body contains each of substrs, and returns how many it has sent.
func (tp *tap) waitSent(t *testing.T, code byte, n int, substrs ...string) int {
	t.Helper()
	var got int
	testutil.WaitFor(t, 10*time.Second, func() error {
		got = 0
		for _, f := range tp.sent(code) {
			ok := true
			for _, s := range substrs {
				ok = ok && bytes.Contains(f, []byte(s))
			}
			if ok {
				got++
			}
		}
		if got <= n {
			return errors.New("the client's frame has not reached the node")
		}
		return nil
	})
	return got
}
