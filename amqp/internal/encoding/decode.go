package encoding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Decoding errors.
var (
	ErrTruncated = errors.New("encoding: truncated input")
	ErrInvalid   = errors.New("encoding: invalid encoding")
	ErrTooDeep   = errors.New("encoding: nesting too deep")
)

// MaxDepth bounds the nesting of described types, lists, maps and arrays.
const MaxDepth = 64

// fixedWidth returns the width in bytes of a fixed-width type's data, or -1
// for variable-width and compound codes, or -2 for unknown codes.
func fixedWidth(code byte) int {
	switch code {
	case codeNull, codeTrue, codeFalse, codeUint0, codeUlong0, codeList0:
		return 0
	case codeUbyte, codeByte, codeSmallUint, codeSmallUlong, codeSmallInt, codeSmallLong, codeBool:
		return 1
	case codeUshort, codeShort:
		return 2
	case codeUint, codeInt, codeFloat, codeChar, codeDecimal32:
		return 4
	case codeUlong, codeLong, codeDouble, codeTimestamp, codeDecimal64:
		return 8
	case codeDecimal128, codeUUID:
		return 16
	case codeVbin8, codeStr8, codeSym8, codeVbin32, codeStr32, codeSym32,
		codeList8, codeMap8, codeList32, codeMap32, codeArray8, codeArray32:
		return -1
	}
	return -2
}

// dataSize returns the number of bytes after the format code that hold the
// value (including any size/count prefix).
func dataSize(code byte, b []byte) (int, error) {
	w := fixedWidth(code)
	switch {
	case w >= 0:
		if len(b) < w {
			return 0, ErrTruncated
		}
		return w, nil
	case w == -2:
		return 0, fmt.Errorf("%w: unknown format code 0x%02x", ErrInvalid, code)
	}
	if code&0xf0 == 0xa0 || code&0xf0 == 0xc0 || code&0xf0 == 0xe0 {
		if len(b) < 1 {
			return 0, ErrTruncated
		}
		n := 1 + int(b[0])
		if len(b) < n {
			return 0, ErrTruncated
		}
		return n, nil
	}
	if len(b) < 4 {
		return 0, ErrTruncated
	}
	sz := uint64(binary.BigEndian.Uint32(b))
	if sz > uint64(len(b)-4) {
		return 0, ErrTruncated
	}
	return 4 + int(sz), nil
}

// Size returns the number of bytes of the encoded value at the start of b,
// without decoding it. It validates constructors and sizes but not contents.
func Size(b []byte) (int, error) { return size(b, 0) }

func size(b []byte, depth int) (int, error) {
	if depth > MaxDepth {
		return 0, ErrTooDeep
	}
	if len(b) < 1 {
		return 0, ErrTruncated
	}
	if b[0] == codeDescribed {
		n, err := size(b[1:], depth+1)
		if err != nil {
			return 0, err
		}
		m, err := size(b[1+n:], depth+1)
		if err != nil {
			return 0, err
		}
		return 1 + n + m, nil
	}
	n, err := dataSize(b[0], b[1:])
	if err != nil {
		return 0, err
	}
	return 1 + n, nil
}

// Decode decodes one value from the start of b and returns it with the number
// of bytes consumed.
func Decode(b []byte) (any, int, error) { return decode(b, 0) }

func decode(b []byte, depth int) (any, int, error) {
	if depth > MaxDepth {
		return nil, 0, ErrTooDeep
	}
	if len(b) < 1 {
		return nil, 0, ErrTruncated
	}
	code := b[0]
	if code == codeDescribed {
		d, n, err := decode(b[1:], depth+1)
		if err != nil {
			return nil, 0, err
		}
		v, m, err := decode(b[1+n:], depth+1)
		if err != nil {
			return nil, 0, err
		}
		return &Described{Descriptor: d, Value: v}, 1 + n + m, nil
	}
	n, err := dataSize(code, b[1:])
	if err != nil {
		return nil, 0, err
	}
	v, err := decodeData(code, b[1:1+n], depth)
	if err != nil {
		return nil, 0, err
	}
	return v, 1 + n, nil
}

// decodeData decodes the data of a value with the given constructor; d is
// exactly the value's bytes after the constructor.
func decodeData(code byte, d []byte, depth int) (any, error) {
	be := binary.BigEndian
	switch code {
	case codeNull:
		return nil, nil
	case codeTrue:
		return true, nil
	case codeFalse:
		return false, nil
	case codeBool:
		switch d[0] {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		return nil, fmt.Errorf("%w: boolean 0x%02x", ErrInvalid, d[0])
	case codeUint0:
		return uint32(0), nil
	case codeUlong0:
		return uint64(0), nil
	case codeList0:
		return List{}, nil
	case codeUbyte:
		return d[0], nil
	case codeByte:
		return int8(d[0]), nil
	case codeSmallUint:
		return uint32(d[0]), nil
	case codeSmallUlong:
		return uint64(d[0]), nil
	case codeSmallInt:
		return int32(int8(d[0])), nil
	case codeSmallLong:
		return int64(int8(d[0])), nil
	case codeUshort:
		return be.Uint16(d), nil
	case codeShort:
		return int16(be.Uint16(d)), nil
	case codeUint:
		return be.Uint32(d), nil
	case codeInt:
		return int32(be.Uint32(d)), nil
	case codeFloat:
		return math.Float32frombits(be.Uint32(d)), nil
	case codeChar:
		return Char(be.Uint32(d)), nil
	case codeDecimal32:
		return Decimal32(d), nil
	case codeUlong:
		return be.Uint64(d), nil
	case codeLong:
		return int64(be.Uint64(d)), nil
	case codeDouble:
		return math.Float64frombits(be.Uint64(d)), nil
	case codeTimestamp:
		return Timestamp(be.Uint64(d)), nil
	case codeDecimal64:
		return Decimal64(d), nil
	case codeDecimal128:
		return Decimal128(d), nil
	case codeUUID:
		return UUID(d), nil
	case codeVbin8, codeVbin32:
		p := d[1:]
		if code == codeVbin32 {
			p = d[4:]
		}
		out := make([]byte, len(p))
		copy(out, p)
		return out, nil
	case codeStr8, codeStr32:
		p := d[1:]
		if code == codeStr32 {
			p = d[4:]
		}
		if !utf8.Valid(p) {
			return nil, fmt.Errorf("%w: string is not UTF-8", ErrInvalid)
		}
		return string(p), nil
	case codeSym8, codeSym32:
		p := d[1:]
		if code == codeSym32 {
			p = d[4:]
		}
		return Symbol(p), nil
	case codeList8, codeList32, codeMap8, codeMap32:
		count, body, err := compound(code, d)
		if err != nil {
			return nil, err
		}
		if code == codeMap8 || code == codeMap32 {
			if count%2 != 0 {
				return nil, fmt.Errorf("%w: map with odd count %d", ErrInvalid, count)
			}
			m := make(Map, 0, count/2)
			for i := 0; i < count; i += 2 {
				k, n, err := decode(body, depth+1)
				if err != nil {
					return nil, err
				}
				body = body[n:]
				v, n, err := decode(body, depth+1)
				if err != nil {
					return nil, err
				}
				body = body[n:]
				m = append(m, MapEntry{Key: k, Value: v})
			}
			if len(body) != 0 {
				return nil, fmt.Errorf("%w: %d trailing bytes in map", ErrInvalid, len(body))
			}
			return m, nil
		}
		l := make(List, 0, count)
		for i := 0; i < count; i++ {
			v, n, err := decode(body, depth+1)
			if err != nil {
				return nil, err
			}
			body = body[n:]
			l = append(l, v)
		}
		if len(body) != 0 {
			return nil, fmt.Errorf("%w: %d trailing bytes in list", ErrInvalid, len(body))
		}
		return l, nil
	case codeArray8, codeArray32:
		return decodeArray(code, d, depth)
	}
	return nil, fmt.Errorf("%w: unknown format code 0x%02x", ErrInvalid, code)
}

// compound splits a list/map/array payload (after the constructor, including
// size) into its element count and element bytes. The count is checked
// against the bytes that remain so a hostile count cannot force allocation.
func compound(code byte, d []byte) (int, []byte, error) {
	var count uint64
	var body []byte
	if code&0xf0 == 0xc0 || code&0xf0 == 0xe0 { // 8-bit size and count
		if len(d) < 2 {
			return 0, nil, ErrTruncated
		}
		count, body = uint64(d[1]), d[2:]
	} else {
		if len(d) < 8 {
			return 0, nil, ErrTruncated
		}
		count, body = uint64(binary.BigEndian.Uint32(d[4:])), d[8:]
	}
	if code != codeArray8 && code != codeArray32 && count > uint64(len(body)) {
		return 0, nil, fmt.Errorf("%w: count %d exceeds %d remaining bytes", ErrInvalid, count, len(body))
	}
	return int(count), body, nil
}

// maxZeroWidth bounds arrays whose elements take no bytes (null, true, uint0...).
const maxZeroWidth = 4096

func decodeArray(code byte, d []byte, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	count, body, err := compound(code, d)
	if err != nil {
		return nil, err
	}
	if len(body) < 1 {
		return nil, ErrTruncated
	}
	a := &Array{}
	if body[0] == codeDescribed {
		desc, n, err := decode(body[1:], depth+1)
		if err != nil {
			return nil, err
		}
		a.Descriptor = desc
		body = body[1+n:]
		if len(body) < 1 {
			return nil, ErrTruncated
		}
	}
	a.Code = body[0]
	body = body[1:]
	w := fixedWidth(a.Code)
	switch {
	case w == -2 || a.Code == codeDescribed:
		return nil, fmt.Errorf("%w: array element code 0x%02x", ErrInvalid, a.Code)
	case w == 0:
		if count > maxZeroWidth+len(body) {
			return nil, fmt.Errorf("%w: array of %d zero-width elements", ErrInvalid, count)
		}
	default:
		if count > len(body) {
			return nil, fmt.Errorf("%w: count %d exceeds %d remaining bytes", ErrInvalid, count, len(body))
		}
	}
	a.Items = make([]any, 0, count)
	for i := 0; i < count; i++ {
		n, err := dataSize(a.Code, body)
		if err != nil {
			return nil, err
		}
		v, err := decodeData(a.Code, body[:n], depth+1)
		if err != nil {
			return nil, err
		}
		body = body[n:]
		a.Items = append(a.Items, v)
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes in array", ErrInvalid, len(body))
	}
	return a, nil
}

// Fields iterates over the encoded fields of a list without decoding them.
// It is the allocation-free path used by frame and section parsers.
type Fields struct {
	body  []byte
	count int
}

// ListFields opens the list encoded at the start of b (list0/list8/list32).
// A null value yields an empty iterator.
func ListFields(b []byte) (Fields, error) {
	if len(b) < 1 {
		return Fields{}, ErrTruncated
	}
	switch b[0] {
	case codeNull, codeList0:
		return Fields{}, nil
	case codeList8, codeList32:
	default:
		return Fields{}, fmt.Errorf("%w: expected list, got 0x%02x", ErrInvalid, b[0])
	}
	n, err := dataSize(b[0], b[1:])
	if err != nil {
		return Fields{}, err
	}
	count, body, err := compound(b[0], b[1:1+n])
	if err != nil {
		return Fields{}, err
	}
	return Fields{body: body, count: count}, nil
}

// Next returns the raw encoding of the next field, or nil after the last
// field (an absent trailing field reads as null).
func (f *Fields) Next() ([]byte, error) {
	if f.count == 0 {
		return nil, nil
	}
	n, err := Size(f.body)
	if err != nil {
		return nil, err
	}
	raw := f.body[:n]
	f.body = f.body[n:]
	f.count--
	return raw, nil
}

// Remaining is the number of fields not yet read.
func (f *Fields) Remaining() int { return f.count }

// IsNull reports whether raw is absent or the null value.
func IsNull(raw []byte) bool { return len(raw) == 0 || raw[0] == codeNull }

// Described splits a described value into descriptor code (ulong or symbol
// name) and the raw value that follows.
func SplitDescribed(b []byte) (code uint64, sym Symbol, value []byte, n int, err error) {
	if len(b) < 1 || b[0] != codeDescribed {
		return 0, "", nil, 0, fmt.Errorf("%w: expected described type", ErrInvalid)
	}
	dn, err := Size(b[1:])
	if err != nil {
		return 0, "", nil, 0, err
	}
	desc := b[1 : 1+dn]
	switch desc[0] {
	case codeSym8, codeSym32:
		v, _, err := Decode(desc)
		if err != nil {
			return 0, "", nil, 0, err
		}
		sym = v.(Symbol)
	default:
		code, err = ReadUlong(desc)
		if err != nil {
			return 0, "", nil, 0, err
		}
	}
	vn, err := Size(b[1+dn:])
	if err != nil {
		return 0, "", nil, 0, err
	}
	return code, sym, b[1+dn : 1+dn+vn], 1 + dn + vn, nil
}

// ReadUlong reads any unsigned integer encoding (ubyte..ulong) as uint64.
func ReadUlong(raw []byte) (uint64, error) {
	if len(raw) < 1 {
		return 0, ErrTruncated
	}
	n, err := dataSize(raw[0], raw[1:])
	if err != nil {
		return 0, err
	}
	d := raw[1 : 1+n]
	switch raw[0] {
	case codeUint0, codeUlong0:
		return 0, nil
	case codeUbyte, codeSmallUint, codeSmallUlong:
		return uint64(d[0]), nil
	case codeUshort:
		return uint64(binary.BigEndian.Uint16(d)), nil
	case codeUint:
		return uint64(binary.BigEndian.Uint32(d)), nil
	case codeUlong:
		return binary.BigEndian.Uint64(d), nil
	}
	return 0, fmt.Errorf("%w: expected unsigned integer, got 0x%02x", ErrInvalid, raw[0])
}

// ReadUint reads an unsigned integer that must fit in 32 bits.
func ReadUint(raw []byte) (uint32, error) {
	v, err := ReadUlong(raw)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %d overflows uint", ErrInvalid, v)
	}
	return uint32(v), nil
}

// ReadLong reads any integer encoding (signed or unsigned that fits) as int64.
func ReadLong(raw []byte) (int64, error) {
	v, _, err := Decode(raw)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			break
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("%w: expected integer, got %T", ErrInvalid, v)
}

// ReadBool reads a boolean.
func ReadBool(raw []byte) (bool, error) {
	if len(raw) < 1 {
		return false, ErrTruncated
	}
	switch raw[0] {
	case codeTrue:
		return true, nil
	case codeFalse:
		return false, nil
	case codeBool:
		if len(raw) < 2 {
			return false, ErrTruncated
		}
		switch raw[1] {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: expected boolean, got 0x%02x", ErrInvalid, raw[0])
}

// ReadBytes returns the payload of a binary, string or symbol without copying.
func ReadBytes(raw []byte) ([]byte, error) {
	if len(raw) < 1 {
		return nil, ErrTruncated
	}
	switch raw[0] {
	case codeVbin8, codeStr8, codeSym8:
		if len(raw) < 2 || len(raw) < 2+int(raw[1]) {
			return nil, ErrTruncated
		}
		return raw[2 : 2+int(raw[1])], nil
	case codeVbin32, codeStr32, codeSym32:
		if len(raw) < 5 {
			return nil, ErrTruncated
		}
		n := uint64(binary.BigEndian.Uint32(raw[1:]))
		if n > uint64(len(raw)-5) {
			return nil, ErrTruncated
		}
		return raw[5 : 5+n], nil
	}
	return nil, fmt.Errorf("%w: expected binary/string/symbol, got 0x%02x", ErrInvalid, raw[0])
}

// ReadString reads a string or symbol as a Go string.
func ReadString(raw []byte) (string, error) {
	b, err := ReadBytes(raw)
	return string(b), err
}
