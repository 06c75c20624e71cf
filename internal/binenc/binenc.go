package binenc

import (
	"encoding/binary"
	"fmt"
)

// AppendUvarint appends v as a uvarint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v as a zig-zag varint.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// UvarintLen is the length of v's uvarint encoding.
func UvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// AppendBool appends v as one byte, 1 or 0.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendString appends s's length as a uvarint, then s.
func AppendString(b []byte, s string) []byte {
	b = AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends p's length as a uvarint, then p (nil and empty alike).
func AppendBytes(b, p []byte) []byte {
	b = AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// AppendUint32 appends v as 4 bytes, big-endian.
func AppendUint32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// Decoder reads fields from a byte slice, consuming it. Its zero value reads nothing;
// use NewDecoder.
type Decoder struct {
	b   []byte
	err error
	bad error // what errors wrap
}

// NewDecoder reads b; its errors wrap bad.
func NewDecoder(b []byte, bad error) Decoder { return Decoder{b: b, bad: bad} }

// Err is the first error met, wrapping the sentinel given to NewDecoder, or nil.
func (d *Decoder) Err() error { return d.err }

// Rest is what is left to read (it aliases the input).
func (d *Decoder) Rest() []byte { return d.b }

// Failf records an error (the first one sticks) and drops the rest of the input.
func (d *Decoder) Failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", d.bad, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.Failf("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Bool reads a byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	v := d.Byte()
	if v > 1 {
		d.Failf("bad bool %d", v)
		return false
	}
	return v == 1
}

// Uvarint reads a uvarint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Failf("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a zig-zag varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.Failf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Uvarint32 reads a uvarint that must fit in 32 bits; what names it in the error.
func (d *Decoder) Uvarint32(what string) uint32 {
	v := d.Uvarint()
	if v > 1<<32-1 {
		d.Failf("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

// Uint32 reads 4 bytes, big-endian.
func (d *Decoder) Uint32() uint32 {
	r := d.Raw(4)
	if r == nil {
		return 0
	}
	return binary.BigEndian.Uint32(r)
}

// Count reads a collection's length, refusing one that the rest of the input cannot
// hold at min bytes per element (at least 1), so that a forged length cannot make the
// caller allocate.
func (d *Decoder) Count(min int) int {
	v := d.Uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)/max(min, 1)) {
		d.Failf("count %d exceeds the input", v)
		return 0
	}
	return int(v)
}

// Raw reads n bytes. They alias the input, with their capacity capped so that an
// append to them never writes into what follows.
func (d *Decoder) Raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.Failf("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// Str reads a length-prefixed string (a copy).
func (d *Decoder) Str() string { return string(d.Raw(d.Count(1))) }

// Bytes reads a length-prefixed byte slice as a copy; nil when empty.
func (d *Decoder) Bytes() []byte {
	n := d.Count(1)
	if n == 0 {
		return nil
	}
	r := d.Raw(n)
	if r == nil {
		return nil
	}
	return append([]byte(nil), r...)
}
