package encoding

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestArraysOfEveryElementType round-trips an array of each element type,
// including compound elements and described arrays.
func TestArraysOfEveryElementType(t *testing.T) {
	cases := []*Array{
		{Code: codeNull, Items: []any{nil, nil}},
		{Code: codeBool, Items: []any{true, false}},
		{Code: codeUbyte, Items: []any{uint8(1), uint8(2)}},
		{Code: codeUshort, Items: []any{uint16(1)}},
		{Code: codeUint, Items: []any{uint32(1), uint32(1 << 20)}},
		{Code: codeUlong, Items: []any{uint64(1 << 40)}},
		{Code: codeByte, Items: []any{int8(-1)}},
		{Code: codeShort, Items: []any{int16(-1)}},
		{Code: codeInt, Items: []any{int32(-1)}},
		{Code: codeLong, Items: []any{int64(-1)}},
		{Code: codeFloat, Items: []any{float32(1)}},
		{Code: codeDouble, Items: []any{2.0}},
		{Code: codeDecimal32, Items: []any{Decimal32{1}}},
		{Code: codeDecimal64, Items: []any{Decimal64{1}}},
		{Code: codeDecimal128, Items: []any{Decimal128{1}}},
		{Code: codeChar, Items: []any{Char('x')}},
		{Code: codeTimestamp, Items: []any{Timestamp(5)}},
		{Code: codeUUID, Items: []any{UUID{1}}},
		{Code: codeVbin32, Items: []any{[]byte{1}, []byte{}}},
		{Code: codeStr32, Items: []any{"a", strings.Repeat("b", 300)}},
		{Code: codeSym32, Items: []any{Symbol("s")}},
		{Code: codeList32, Items: []any{List{uint32(1), "x"}, List{}}},
		{Code: codeMap32, Items: []any{Map{{Key: "k", Value: true}}}},
		{Code: codeArray32, Items: []any{&Array{Code: codeInt, Items: []any{int32(1)}}}},
		{Descriptor: uint64(0x77), Code: codeStr32, Items: []any{"described"}},
	}
	for _, a := range cases {
		b, err := Append(nil, a)
		if err != nil {
			t.Fatalf("code 0x%02x: %v", a.Code, err)
		}
		v, n, err := Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("code 0x%02x: decode %v", a.Code, err)
		}
		b2, err := Append(nil, v)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("code 0x%02x: not stable: %v", a.Code, err)
		}
		got := v.(*Array)
		if len(got.Items) != len(a.Items) || !reflect.DeepEqual(got.Descriptor, a.Descriptor) {
			t.Fatalf("code 0x%02x: got %#v", a.Code, got)
		}
	}
	if _, err := Append(nil, &Array{Code: codeInt, Items: []any{"not an int"}}); err == nil {
		t.Fatal("mismatched element accepted")
	}
	if _, err := Append(nil, struct{}{}); err == nil {
		t.Fatal("unsupported Go type accepted")
	}
}

// TestGoConvenienceTypes: the Go types the encoder accepts besides the
// decoded ones encode to the expected AMQP types.
func TestGoConvenienceTypes(t *testing.T) {
	now := time.UnixMilli(1234).UTC()
	cases := []struct {
		in   any
		want any
	}{
		{int(5), int64(5)},
		{now, Timestamp(1234)},
		{[]any{int64(1)}, List{int64(1)}},
		{map[string]any{"b": 1, "a": 2}, Map{{Key: "a", Value: int64(2)}, {Key: "b", Value: int64(1)}}},
		{map[Symbol]any{"k": "v"}, Map{{Key: Symbol("k"), Value: "v"}}},
		{[]string{"x"}, &Array{Code: codeStr32, Items: []any{"x"}}},
		{[]Symbol{"x"}, &Array{Code: codeSym32, Items: []any{Symbol("x")}}},
		{[]int64{7}, &Array{Code: codeLong, Items: []any{int64(7)}}},
		{[]UUID{{1}}, &Array{Code: codeUUID, Items: []any{UUID{1}}}},
		{[]Timestamp{3}, &Array{Code: codeTimestamp, Items: []any{Timestamp(3)}}},
		{[]time.Time{now}, &Array{Code: codeTimestamp, Items: []any{Timestamp(1234)}}},
		{Raw{0x41}, true},
		{Described{Descriptor: Symbol("d"), Value: nil}, &Described{Descriptor: Symbol("d")}},
		{(*Described)(nil), nil},
	}
	for _, c := range cases {
		b, err := Append(nil, c.in)
		if err != nil {
			t.Fatalf("%T: %v", c.in, err)
		}
		v, _, err := Decode(b)
		if err != nil || !reflect.DeepEqual(v, c.want) {
			t.Fatalf("%T: got %#v, want %#v (%v)", c.in, v, c.want, err)
		}
	}
	if Timestamp(1234).Time() != now || TimestampOf(now) != 1234 {
		t.Fatal("timestamp conversion")
	}
}

func TestMapHelpersAndReaders(t *testing.T) {
	m := Map{{Key: Symbol("s"), Value: 1}, {Key: "k", Value: 2}, {Key: []byte{1}, Value: 3}}
	if v, ok := m.GetString("s"); !ok || v != 1 {
		t.Fatal("GetString symbol key")
	}
	if v, ok := m.Get("k"); !ok || v != 2 {
		t.Fatal("Get")
	}
	if _, ok := m.Get([]byte{1}); ok {
		t.Fatal("non-comparable keys never match")
	}
	m.Set("k", 9)
	m.Set("new", 10)
	if v, _ := m.Get("k"); v != 9 || len(m) != 4 {
		t.Fatal("Set")
	}
	// Every unsigned and signed encoding reads back through the readers.
	for _, v := range []any{uint8(1), uint16(1), uint32(1), uint32(0), uint32(300), uint64(0), uint64(1), uint64(1 << 40)} {
		b, _ := Append(nil, v)
		if _, err := ReadUlong(b); err != nil {
			t.Fatalf("ReadUlong(%T): %v", v, err)
		}
		if _, err := ReadLong(b); err != nil {
			t.Fatalf("ReadLong(%T): %v", v, err)
		}
	}
	for _, v := range []any{int8(-1), int16(-1), int32(-1), int64(-1), int32(1 << 20), int64(1 << 40)} {
		b, _ := Append(nil, v)
		if n, err := ReadLong(b); err != nil || n == 0 {
			t.Fatalf("ReadLong(%T): %v", v, err)
		}
	}
	if _, err := ReadLong([]byte{0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err == nil {
		t.Fatal("ulong above MaxInt64 read as long")
	}
	for _, raw := range [][]byte{{0x41}, {0x42}, {0x56, 0x01}, {0x56, 0x00}} {
		if _, err := ReadBool(raw); err != nil {
			t.Fatal(err)
		}
	}
	for _, raw := range [][]byte{{0x56, 0x02}, {0x56}, {}, {0x40}} {
		if _, err := ReadBool(raw); err == nil {
			t.Fatalf("ReadBool(%x) succeeded", raw)
		}
	}
	long := strings.Repeat("z", 300)
	for _, v := range []any{"s", Symbol("s"), []byte("s"), long, Symbol(long), []byte(long)} {
		b, _ := Append(nil, v)
		if _, err := ReadBytes(b); err != nil {
			t.Fatalf("ReadBytes(%T): %v", v, err)
		}
	}
	for _, raw := range [][]byte{{0xa1}, {0xa1, 5, 'a'}, {0xb1, 0, 0, 0}, {0xb1, 0, 0, 0, 9, 'a'}, {0x40}, {}} {
		if _, err := ReadBytes(raw); err == nil {
			t.Fatalf("ReadBytes(%x) succeeded", raw)
		}
	}
	d, _ := Append(nil, &Described{Descriptor: Symbol("com.x:y"), Value: "v"})
	if code, sym, val, n, err := SplitDescribed(d); err != nil || code != 0 || sym != "com.x:y" || n != len(d) || string(val[2:]) != "v" {
		t.Fatalf("SplitDescribed symbol: %d %q %x %v", code, sym, val, err)
	}
	if _, _, _, _, err := SplitDescribed([]byte{0x40}); err == nil {
		t.Fatal("SplitDescribed of a non-described value")
	}
	// A list too large for list8 is written as list32, and ListFields reads it.
	big := make(List, 300)
	for i := range big {
		big[i] = uint32(i)
	}
	b, _ := Append(nil, big)
	if b[0] != codeList32 {
		t.Fatalf("constructor 0x%02x", b[0])
	}
	f, err := ListFields(b)
	if err != nil || f.Remaining() != 300 {
		t.Fatalf("ListFields: %v %d", err, f.Remaining())
	}
	if _, err := ListFields([]byte{0x71, 0, 0, 0, 1}); err == nil {
		t.Fatal("ListFields of an int")
	}
	if f, err := ListFields([]byte{0x40}); err != nil || f.Remaining() != 0 {
		t.Fatal("ListFields of null")
	}
}
