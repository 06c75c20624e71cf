package encoding

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
)

// TestGolden checks the exact bytes of every primitive and compound encoding
// (AMQP 1.0 part 1 §1.6) and that decoding them gives the value back.
func TestGolden(t *testing.T) {
	long300 := strings.Repeat("x", 300)
	cases := []struct {
		name string
		v    any
		hex  string
	}{
		{"null", nil, "40"},
		{"true", true, "41"},
		{"false", false, "42"},
		{"ubyte", uint8(7), "5007"},
		{"ushort", uint16(0x1234), "601234"},
		{"uint0", uint32(0), "43"},
		{"smalluint", uint32(200), "52c8"},
		{"uint", uint32(70000), "7000011170"},
		{"ulong0", uint64(0), "44"},
		{"smallulong", uint64(0x10), "5310"},
		{"ulong", uint64(1 << 40), "800000010000000000"},
		{"byte", int8(-2), "51fe"},
		{"short", int16(-2), "61fffe"},
		{"smallint", int32(-1), "54ff"},
		{"int", int32(1000), "71000003e8"},
		{"smalllong", int64(5), "5505"},
		{"long", int64(-1000), "81fffffffffffffc18"},
		{"float", float32(1.5), "723fc00000"},
		{"double", float64(1.5), "823ff8000000000000"},
		{"decimal32", Decimal32{1, 2, 3, 4}, "7401020304"},
		{"decimal64", Decimal64{1, 2, 3, 4, 5, 6, 7, 8}, "840102030405060708"},
		{"decimal128", Decimal128{15: 9}, "9400000000000000000000000000000009"},
		{"char", Char('é'), "73000000e9"},
		{"timestamp", Timestamp(1000), "8300000000000003e8"},
		{"uuid", UUID{0: 1, 15: 2}, "9801000000000000000000000000000002"},
		{"vbin8", []byte{1, 2}, "a0020102"},
		{"vbin8-empty", []byte{}, "a000"},
		{"str8", "hi", "a1026869"},
		{"sym8", Symbol("ab"), "a3026162"},
		{"list0", List{}, "45"},
		{"list8", List{uint32(1), "a"}, "c006025201a10161"},
		{"map8", Map{{Key: Symbol("k"), Value: int64(1)}}, "c10602a3016b5501"},
		{"described", &Described{Descriptor: uint64(0x75), Value: []byte{0xff}}, "005375a001ff"},
		{"array-sym", &Array{Code: codeSym32, Items: []any{Symbol("a"), Symbol("bc")}}, "f000000010000000" + "02b3" + "0000000161" + "000000026263"},
		{"array-long", &Array{Code: codeLong, Items: []any{int64(1)}}, "f00000000d0000000181" + "0000000000000001"},
		{"array-described", &Array{Descriptor: Symbol("d"), Code: codeStr32, Items: []any{"x"}}, "f00000000e00000001" + "00a30164" + "b1" + "0000000178"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Append(nil, c.v)
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(got) != c.hex {
				t.Fatalf("encode = %x, want %s", got, c.hex)
			}
			v, n, err := Decode(got)
			if err != nil || n != len(got) {
				t.Fatalf("decode: n=%d err=%v", n, err)
			}
			if !reflect.DeepEqual(v, c.v) {
				t.Fatalf("decode = %#v, want %#v", v, c.v)
			}
			if sz, err := Size(got); err != nil || sz != len(got) {
				t.Fatalf("Size = %d, %v", sz, err)
			}
		})
	}
	// Variable-width 32-bit forms.
	for _, v := range []any{long300, Symbol(long300), []byte(long300)} {
		b, _ := Append(nil, v)
		if b[0]&0xf0 != 0xb0 || len(b) != 305 {
			t.Fatalf("%T: want 32-bit form, got %x len %d", v, b[0], len(b))
		}
		got, _, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("%T round trip: %v", v, err)
		}
	}
}

// TestDecodeWideForms decodes encodings our encoder never produces (list32,
// map32, array8, boolean 0x56, uint in full width) as other peers may send.
func TestDecodeWideForms(t *testing.T) {
	cases := []struct {
		hex  string
		want any
	}{
		{"5601", true},
		{"5600", false},
		{"7000000005", uint32(5)},
		{"d00000000500000001" + "41", List{true}},
		{"d1000000070000000241" + "a100", Map{{Key: true, Value: ""}}},
		{"e00402" + "5201" + "02", &Array{Code: codeSmallUint, Items: []any{uint32(1), uint32(2)}}},
		{"e00203" + "43", &Array{Code: codeUint0, Items: []any{uint32(0), uint32(0), uint32(0)}}},
		{"b10000000161", "a"},
	}
	for _, c := range cases {
		b, _ := hex.DecodeString(c.hex)
		v, n, err := Decode(b)
		if err != nil || n != len(b) || !reflect.DeepEqual(v, c.want) {
			t.Errorf("%s: got %#v n=%d err=%v, want %#v", c.hex, v, n, err, c.want)
		}
	}
}

// TestDecodeHostile feeds invalid and hostile inputs; each must fail cleanly.
func TestDecodeHostile(t *testing.T) {
	for _, h := range []string{
		"", "ff", "70", "a105", "b1ffffffff", "c0", "c00510", "d0000000ff",
		"d000000004ffffffff",   // count far beyond the bytes that remain
		"f000000005ffffffff43", // 4G zero-width elements
		"5602",                 // bad boolean
		"a102c328",             // invalid UTF-8
		"00",                   // described without descriptor
		strings.Repeat("00", 200) + "40",
	} {
		b, _ := hex.DecodeString(h)
		if _, _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded without error", h)
		}
	}
	deep := append(bytes.Repeat([]byte{0xc0, 0x02, 0x01}, 100), 0x40)
	if _, _, err := Decode(deep); !errors.Is(err, ErrTooDeep) && err == nil {
		t.Errorf("deep nesting: %v", err)
	}
}

// TestRoundTripOracle encodes a message with go-amqp's public API and
// checks that our decoder and encoder agree with it section by section.
func TestRoundTripOracle(t *testing.T) {
	ttl := 90 * time.Second
	m := &amqp.Message{
		Header:     &amqp.MessageHeader{TTL: ttl, DeliveryCount: 3},
		Properties: &amqp.MessageProperties{MessageID: "id-1", GroupID: ptr("s1")},
		Annotations: amqp.Annotations{
			"x-opt-partition-key":          "pk",
			"x-opt-scheduled-enqueue-time": time.UnixMilli(1700000000000),
		},
		ApplicationProperties: map[string]any{
			"i": int64(-5), "u": uint16(9), "f": 2.5, "s": "x", "b": true, "t": time.UnixMilli(5),
			"bin": []byte{1}, "uuid": amqp.UUID{1}, "c": int8(-1),
		},
		Data: [][]byte{[]byte("hello")},
	}
	raw, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var re []byte
	for rest := raw; len(rest) > 0; {
		v, n, err := Decode(rest)
		if err != nil {
			t.Fatalf("decode section: %v", err)
		}
		if sz, err := Size(rest); err != nil || sz != n {
			t.Fatalf("Size=%d n=%d err=%v", sz, n, err)
		}
		re, err = Append(re, v)
		if err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	var back amqp.Message
	if err := back.UnmarshalBinary(re); err != nil {
		t.Fatalf("go-amqp cannot read our re-encoding: %v", err)
	}
	if back.Properties.MessageID != "id-1" || *back.Properties.GroupID != "s1" || back.Header.TTL != ttl ||
		back.Header.DeliveryCount != 3 || string(back.Data[0]) != "hello" {
		t.Fatalf("round trip mismatch: %+v %+v", back.Header, back.Properties)
	}
	if !reflect.DeepEqual(back.ApplicationProperties, m.ApplicationProperties) {
		t.Fatalf("app props: %#v", back.ApplicationProperties)
	}
	if !reflect.DeepEqual(back.Annotations, m.Annotations) {
		t.Fatalf("annotations: %#v", back.Annotations)
	}
}

// TestPassThroughUnsupportedByOracle: decimal and char (which go-amqp cannot
// decode) survive decode+encode byte for byte.
func TestPassThroughUnsupportedByOracle(t *testing.T) {
	m := Map{
		{Key: "d32", Value: Decimal32{0x22, 0x50, 0, 1}},
		{Key: "d64", Value: Decimal64{1}},
		{Key: "d128", Value: Decimal128{2}},
		{Key: "c", Value: Char(0x1F600)},
		{Key: "nan", Value: math.NaN()},
	}
	b, err := Append(nil, &Described{Descriptor: uint64(0x74), Value: m})
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := Append(nil, v)
	if !bytes.Equal(b, b2) {
		t.Fatalf("pass-through changed bytes:\n%x\n%x", b, b2)
	}
}

func TestFieldsAndReaders(t *testing.T) {
	l := List{uint32(7), nil, "name", true, int64(-3), uint64(1 << 33)}
	b, _ := Append(nil, l)
	f, err := ListFields(b)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := f.Next()
	if v, err := ReadUint(raw); v != 7 || err != nil {
		t.Fatal(v, err)
	}
	raw, _ = f.Next()
	if !IsNull(raw) {
		t.Fatal("want null")
	}
	raw, _ = f.Next()
	if s, _ := ReadString(raw); s != "name" {
		t.Fatal(s)
	}
	raw, _ = f.Next()
	if v, _ := ReadBool(raw); !v {
		t.Fatal("want true")
	}
	raw, _ = f.Next()
	if v, _ := ReadLong(raw); v != -3 {
		t.Fatal(v)
	}
	raw, _ = f.Next()
	if _, err := ReadUint(raw); err == nil {
		t.Fatal("uint overflow accepted")
	}
	if raw, _ := f.Next(); raw != nil {
		t.Fatal("want end")
	}
}

func ptr[T any](v T) *T { return &v }
