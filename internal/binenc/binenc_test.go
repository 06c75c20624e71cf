package binenc_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

var errBad = errors.New("test: bad input")

// The bytes of each field are fixed: fsm/testdata and cluster/wire/testdata hold them
// in files that replicas and peers of other releases read.
func TestEncodingIsFixed(t *testing.T) {
	var b []byte
	b = binenc.AppendUvarint(b, 300)
	b = binenc.AppendVarint(b, -3)
	b = binenc.AppendBool(b, true)
	b = binenc.AppendBool(b, false)
	b = binenc.AppendString(b, "ab")
	b = binenc.AppendBytes(b, []byte{0xff})
	b = binenc.AppendBytes(b, nil)
	b = binenc.AppendUint32(b, 0x01020304)
	if got, want := hex.EncodeToString(b), "ac02"+"05"+"01"+"00"+"026162"+"01ff"+"00"+"01020304"; got != want {
		t.Fatalf("encoding %s, want %s", got, want)
	}

	d := binenc.NewDecoder(b, errBad)
	if v := d.Uvarint(); v != 300 {
		t.Errorf("Uvarint %d", v)
	}
	if v := d.Varint(); v != -3 {
		t.Errorf("Varint %d", v)
	}
	if !d.Bool() || d.Bool() {
		t.Error("Bool")
	}
	if s := d.Str(); s != "ab" {
		t.Errorf("Str %q", s)
	}
	if p := d.Bytes(); !bytes.Equal(p, []byte{0xff}) {
		t.Errorf("Bytes %x", p)
	}
	if p := d.Bytes(); p != nil {
		t.Errorf("empty Bytes %x, want nil", p)
	}
	if v := d.Uint32(); v != 0x01020304 {
		t.Errorf("Uint32 %x", v)
	}
	if d.Err() != nil || len(d.Rest()) != 0 {
		t.Fatalf("err %v, %d bytes left", d.Err(), len(d.Rest()))
	}
}

func TestUvarintLen(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1<<32 - 1, math.MaxUint64} {
		if got, want := binenc.UvarintLen(v), len(binenc.AppendUvarint(nil, v)); got != want {
			t.Errorf("UvarintLen(%d) = %d, want %d", v, got, want)
		}
	}
}

// Each bad input gives an error wrapping the caller's sentinel; the first one sticks
// and every later read returns a zero value.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		read func(d *binenc.Decoder)
	}{
		{"truncated byte", nil, func(d *binenc.Decoder) { d.Byte() }},
		{"bad bool", []byte{2}, func(d *binenc.Decoder) { d.Bool() }},
		{"bad uvarint", []byte{0x80}, func(d *binenc.Decoder) { d.Uvarint() }},
		{"bad varint", bytes.Repeat([]byte{0xff}, 11), func(d *binenc.Decoder) { d.Varint() }},
		{"uint32 range", binenc.AppendUvarint(nil, 1<<32), func(d *binenc.Decoder) { d.Uvarint32("group id") }},
		{"truncated uint32", []byte{1, 2, 3}, func(d *binenc.Decoder) { d.Uint32() }},
		{"count past the input", binenc.AppendUvarint(nil, 3), func(d *binenc.Decoder) { d.Count(1) }},
		{"count of wide elements", append(binenc.AppendUvarint(nil, 2), make([]byte, 31)...), func(d *binenc.Decoder) { d.Count(16) }},
		{"truncated string", []byte{5, 'a'}, func(d *binenc.Decoder) { d.Str() }},
		{"negative raw", []byte{1}, func(d *binenc.Decoder) { d.Raw(-1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := binenc.NewDecoder(c.in, errBad)
			c.read(&d)
			first := d.Err()
			if !errors.Is(first, errBad) {
				t.Fatalf("error %v, want one wrapping %v", first, errBad)
			}
			if d.Uvarint() != 0 || d.Str() != "" || d.Raw(0) != nil || len(d.Rest()) != 0 {
				t.Error("a read after the error returned data")
			}
			d.Failf("later")
			if d.Err() != first {
				t.Errorf("error changed to %v", d.Err())
			}
		})
	}
}

// A Raw slice aliases the input but an append to it cannot overwrite what follows.
func TestRawCapacityIsCapped(t *testing.T) {
	in := []byte{1, 2, 3, 4}
	d := binenc.NewDecoder(in, errBad)
	r := d.Raw(2)
	_ = append(r, 9)
	if in[2] != 3 {
		t.Fatalf("append to a Raw slice overwrote the input: %v", in)
	}
	if &r[0] != &in[0] {
		t.Error("Raw copied; it should alias")
	}
}

// No input makes the decoder panic or return more than it holds.
func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0xac, 0x02, 0x05, 0x01, 0x02, 'a', 'b'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := binenc.NewDecoder(in, errBad)
		for i := 0; d.Err() == nil && len(d.Rest()) > 0; i++ {
			switch i % 6 {
			case 0:
				d.Uvarint()
			case 1:
				d.Varint()
			case 2:
				if s := d.Str(); len(s) > len(in) {
					t.Fatalf("string of %d bytes from %d", len(s), len(in))
				}
			case 3:
				if n := d.Count(8); n*8 > len(in) {
					t.Fatalf("count %d from %d bytes", n, len(in))
				}
			case 4:
				d.Bool()
			case 5:
				d.Uint32()
			}
		}
		if d.Err() != nil && !errors.Is(d.Err(), errBad) {
			t.Fatalf("error %v does not wrap the sentinel", d.Err())
		}
	})
}
