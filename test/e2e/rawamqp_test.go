package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A bare AMQP 1.0 client for what neither the Go SDK nor go-amqp can send (transactions,
// txn_test.go; link resume, resume_test.go): frames written and read by hand with a
// minimal codec of its own. The broker's codec is internal to package amqp, and testing
// it with itself would prove little.

const (
	codeOpen, codeBegin, codeAttach, codeFlow, codeTransfer, codeDisposition = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
	codeDetach, codeEnd, codeClose                                           = 0x16, 0x17, 0x18
	codeError, codeAccepted, codeRejected, codeSource, codeTarget            = 0x1d, 0x24, 0x25, 0x28, 0x29
	codeCoordinator, codeDeclare, codeDischarge, codeDeclared, codeTxnState  = 0x30, 0x31, 0x32, 0x33, 0x34
	codeSASLMechs, codeSASLInit, codeSASLOutcome                             = 0x40, 0x41, 0x44
	codeData, codeValue                                                      = 0x75, 0x77
)

type described struct {
	code  uint64
	value any
}

// rawConn is one AMQP connection to a node, opened and logged in.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

// dialRaw connects to the node's AMQP listener at addr, logs in with SASL PLAIN and the
// connection string's key, and opens the connection as container; it closes with the
// test. Every read and write fails the test after 30 s.
func dialRaw(t *testing.T, addr, connStr, container string) *rawConn {
	t.Helper()
	kv := map[string]string{}
	for _, part := range strings.Split(connStr, ";") {
		if k, v, ok := strings.Cut(part, "="); ok {
			kv[k] = v
		}
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	c := &rawConn{t: t, nc: nc}
	c.write([]byte("AMQP\x03\x01\x00\x00"))
	c.header()
	c.expect(codeSASLMechs)
	c.frame(1, list(codeSASLInit, sym("PLAIN"), bin([]byte("\x00"+kv["SharedAccessKeyName"]+"\x00"+kv["SharedAccessKey"]))), nil)
	if f := c.expect(codeSASLOutcome); f[0] != uint64(0) && f[0] != uint32(0) && f[0] != uint8(0) {
		t.Fatalf("SASL outcome %v", f[0])
	}
	c.write([]byte("AMQP\x00\x01\x00\x00"))
	c.header()
	c.frame(0, list(codeOpen, str(container), str(addr), u32(65536)), nil)
	c.expect(codeOpen)
	return c
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawConn) header() {
	c.t.Helper()
	var h [8]byte
	if _, err := io.ReadFull(c.nc, h[:]); err != nil || !bytes.HasPrefix(h[:], []byte("AMQP")) {
		c.t.Fatalf("protocol header %q: %v", h, err)
	}
}

func (c *rawConn) frame(typ byte, body, payload []byte) {
	c.t.Helper()
	b := make([]byte, 8, 8+len(body)+len(payload))
	binary.BigEndian.PutUint32(b, uint32(8+len(body)+len(payload)))
	b[4], b[5] = 2, typ
	b = append(append(b, body...), payload...)
	c.write(b)
}

// expect reads frames until one with performative code, failing on a close or a
// detach, and returns its fields.
func (c *rawConn) expect(code uint64) []any {
	c.t.Helper()
	f, _ := c.expectFrame(code)
	return f
}

// expectFrame is expect that also returns the frame's payload (a transfer's message).
func (c *rawConn) expectFrame(code uint64) ([]any, []byte) {
	c.t.Helper()
	for {
		got, fields, payload := c.next()
		if got == codeDetach || got == codeEnd || got == codeClose {
			c.t.Fatalf("broker sent performative %#x: %v", got, fields)
		}
		if got == code {
			return fields, payload
		}
	}
}

// next reads the next frame that is not a heartbeat: its performative's code and
// fields, and its payload.
func (c *rawConn) next() (uint64, []any, []byte) {
	c.t.Helper()
	for {
		var h [8]byte
		if _, err := io.ReadFull(c.nc, h[:]); err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		size := binary.BigEndian.Uint32(h[:4])
		rest := make([]byte, size-8)
		if _, err := io.ReadFull(c.nc, rest); err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		body := rest[int(h[4])*4-8:]
		if len(body) == 0 {
			continue // heartbeat
		}
		v, n, err := decode(body)
		if err != nil {
			c.t.Fatalf("decode frame: %v", err)
		}
		d, ok := v.(described)
		if !ok {
			c.t.Fatalf("frame body %v", v)
		}
		fields, _ := d.value.([]any)
		return d.code, fields, body[n:]
	}
}

// ---- encoding (AMQP 1.0 part 1; always the wide forms) ----

func descriptor(code uint64) []byte { return []byte{0x00, 0x53, byte(code)} }
func null() []byte                  { return []byte{0x40} }
func ubyte(v uint8) []byte          { return []byte{0x50, v} }
func u32(v uint32) []byte           { return binary.BigEndian.AppendUint32([]byte{0x70}, v) }

func boolean(v bool) []byte {
	if v {
		return []byte{0x41}
	}
	return []byte{0x42}
}

func variable(code byte, p []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{code}, uint32(len(p))), p...)
}
func bin(p []byte) []byte { return variable(0xb0, p) }
func str(s string) []byte { return variable(0xb1, []byte(s)) }
func sym(s string) []byte { return variable(0xb3, []byte(s)) }

// mapOf is a map32 of keys and values, alternating.
func mapOf(kv ...[]byte) []byte {
	var items []byte
	for _, x := range kv {
		items = append(items, x...)
	}
	b := []byte{0xd1}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(items)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(kv)))
	return append(b, items...)
}

// u64Described is a value described by a numeric descriptor too wide for descriptor
// (a Service Bus filter's, e.g.).
func u64Described(code uint64, v []byte) []byte {
	return append(binary.BigEndian.AppendUint64([]byte{0x00, 0x80}, code), v...)
}

// list is a described list: descriptor code, then the fields.
func list(code uint64, fields ...[]byte) []byte {
	var items []byte
	for _, f := range fields {
		items = append(items, f...)
	}
	b := descriptor(code)
	b = append(b, 0xd0)
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(items)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(fields)))
	return append(b, items...)
}

// amqpMap is a decoded map: keys and values, alternating, in the order sent.
type amqpMap []any

// decode reads one value: described values, lists, maps, binaries, strings, symbols,
// booleans and unsigned integers are returned; anything else is skipped (nil).
func decode(b []byte) (any, int, error) {
	if len(b) == 0 {
		return nil, 0, io.ErrUnexpectedEOF
	}
	code := b[0]
	if code == 0x00 {
		d, n, err := decode(b[1:])
		if err != nil {
			return nil, 0, err
		}
		v, m, err := decode(b[1+n:])
		if err != nil {
			return nil, 0, err
		}
		var dc uint64
		switch x := d.(type) {
		case uint64:
			dc = x
		case uint32:
			dc = uint64(x)
		}
		return described{dc, v}, 1 + n + m, nil
	}
	need := func(n int) error {
		if len(b) < 1+n {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	switch code {
	case 0x40:
		return nil, 1, nil
	case 0x41:
		return true, 1, nil
	case 0x42:
		return false, 1, nil
	case 0x43:
		return uint32(0), 1, nil
	case 0x44:
		return uint64(0), 1, nil
	case 0x45:
		return []any{}, 1, nil
	case 0x50:
		if err := need(1); err != nil {
			return nil, 0, err
		}
		return b[1], 2, nil
	case 0x52:
		if err := need(1); err != nil {
			return nil, 0, err
		}
		return uint32(b[1]), 2, nil
	case 0x53:
		if err := need(1); err != nil {
			return nil, 0, err
		}
		return uint64(b[1]), 2, nil
	case 0x56:
		if err := need(1); err != nil {
			return nil, 0, err
		}
		return b[1] != 0, 2, nil
	case 0x70:
		if err := need(4); err != nil {
			return nil, 0, err
		}
		return binary.BigEndian.Uint32(b[1:]), 5, nil
	case 0x80:
		if err := need(8); err != nil {
			return nil, 0, err
		}
		return binary.BigEndian.Uint64(b[1:]), 9, nil
	}
	var width, size int
	switch code >> 4 {
	case 0x4:
		return nil, 1, nil
	case 0x5:
		width = 1
	case 0x6:
		width = 2
	case 0x7:
		width = 4
	case 0x8:
		width = 8
	case 0x9:
		width = 16
	case 0xa, 0xc, 0xe:
		if err := need(1); err != nil {
			return nil, 0, err
		}
		size, width = int(b[1]), 1
	case 0xb, 0xd, 0xf:
		if err := need(4); err != nil {
			return nil, 0, err
		}
		size, width = int(binary.BigEndian.Uint32(b[1:])), 4
	default:
		return nil, 0, fmt.Errorf("constructor %#x", code)
	}
	if code>>4 < 0xa {
		if err := need(width); err != nil {
			return nil, 0, err
		}
		return nil, 1 + width, nil
	}
	if err := need(width + size); err != nil {
		return nil, 0, err
	}
	data := b[1+width : 1+width+size]
	n := 1 + width + size
	switch code {
	case 0xa0, 0xb0:
		return bytes.Clone(data), n, nil
	case 0xa1, 0xb1, 0xa3, 0xb3:
		return string(data), n, nil
	case 0xc0, 0xd0, 0xc1, 0xd1:
		if len(data) < width {
			return nil, 0, io.ErrUnexpectedEOF
		}
		count := int(data[0])
		if width == 4 {
			count = int(binary.BigEndian.Uint32(data))
		}
		data = data[width:]
		out := make([]any, 0, min(count, len(data)))
		for range count {
			v, m, err := decode(data)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, v)
			data = data[m:]
		}
		if code == 0xc1 || code == 0xd1 {
			return amqpMap(out), n, nil
		}
		return out, n, nil
	}
	return nil, n, nil // arrays: skipped
}
