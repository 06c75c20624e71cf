package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"time"
)

// The Append* functions append the smallest valid encoding of a value.

// AppendNull appends null.
func AppendNull(b []byte) []byte { return append(b, codeNull) }

// AppendBool appends a boolean (true/false compact form).
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, codeTrue)
	}
	return append(b, codeFalse)
}

// AppendUbyte appends a ubyte.
func AppendUbyte(b []byte, v uint8) []byte { return append(b, codeUbyte, v) }

// AppendUshort appends a ushort.
func AppendUshort(b []byte, v uint16) []byte {
	return binary.BigEndian.AppendUint16(append(b, codeUshort), v)
}

// AppendUint appends a uint using uint0/smalluint when possible.
func AppendUint(b []byte, v uint32) []byte {
	switch {
	case v == 0:
		return append(b, codeUint0)
	case v < 256:
		return append(b, codeSmallUint, byte(v))
	}
	return binary.BigEndian.AppendUint32(append(b, codeUint), v)
}

// AppendUlong appends a ulong using ulong0/smallulong when possible.
func AppendUlong(b []byte, v uint64) []byte {
	switch {
	case v == 0:
		return append(b, codeUlong0)
	case v < 256:
		return append(b, codeSmallUlong, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeUlong), v)
}

// AppendByte appends a byte.
func AppendByte(b []byte, v int8) []byte { return append(b, codeByte, byte(v)) }

// AppendShort appends a short.
func AppendShort(b []byte, v int16) []byte {
	return binary.BigEndian.AppendUint16(append(b, codeShort), uint16(v))
}

// AppendInt appends an int using smallint when possible.
func AppendInt(b []byte, v int32) []byte {
	if v >= -128 && v <= 127 {
		return append(b, codeSmallInt, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint32(append(b, codeInt), uint32(v))
}

// AppendLong appends a long using smalllong when possible.
func AppendLong(b []byte, v int64) []byte {
	if v >= -128 && v <= 127 {
		return append(b, codeSmallLong, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint64(append(b, codeLong), uint64(v))
}

// AppendTimestamp appends a timestamp.
func AppendTimestamp(b []byte, v Timestamp) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeTimestamp), uint64(v))
}

// AppendUUID appends a uuid.
func AppendUUID(b []byte, v UUID) []byte { return append(append(b, codeUUID), v[:]...) }

func appendVar(b []byte, c8, c32 byte, p []byte) []byte {
	if len(p) < 256 {
		b = append(b, c8, byte(len(p)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, c32), uint32(len(p)))
	}
	return append(b, p...)
}

// AppendBinary appends a binary (vbin8/vbin32).
func AppendBinary(b []byte, p []byte) []byte { return appendVar(b, codeVbin8, codeVbin32, p) }

// AppendString appends a string (str8/str32).
func AppendString(b []byte, s string) []byte {
	if len(s) < 256 {
		b = append(b, codeStr8, byte(len(s)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(len(s)))
	}
	return append(b, s...)
}

// AppendSymbol appends a symbol (sym8/sym32).
func AppendSymbol(b []byte, s Symbol) []byte {
	if len(s) < 256 {
		b = append(b, codeSym8, byte(len(s)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, codeSym32), uint32(len(s)))
	}
	return append(b, s...)
}

// AppendDescriptor appends the described-type constructor with a ulong code.
func AppendDescriptor(b []byte, code uint64) []byte {
	return AppendUlong(append(b, codeDescribed), code)
}

// ListStart begins a list32 whose size and count are patched by ListEnd.
// It returns the new buffer and the offset to pass to ListEnd.
func ListStart(b []byte) ([]byte, int) {
	off := len(b)
	return append(b, codeList32, 0, 0, 0, 0, 0, 0, 0, 0), off
}

// ListEnd patches the list started at off with count elements. A list that
// turned out empty is rewritten as list0, and a short one as list8.
func ListEnd(b []byte, off int, count int) []byte {
	body := len(b) - off - 9
	switch {
	case count == 0:
		b = b[:off]
		return append(b, codeList0)
	case body+1 < 256 && count < 256:
		// shift body down by 6 bytes to use list8.
		b[off] = codeList8
		b[off+1] = byte(body + 1)
		b[off+2] = byte(count)
		copy(b[off+3:], b[off+9:])
		return b[:len(b)-6]
	}
	binary.BigEndian.PutUint32(b[off+1:], uint32(body+4))
	binary.BigEndian.PutUint32(b[off+5:], uint32(count))
	return b
}

// MapStart begins a map32 patched by MapEnd (count counts keys and values).
func MapStart(b []byte) ([]byte, int) {
	off := len(b)
	return append(b, codeMap32, 0, 0, 0, 0, 0, 0, 0, 0), off
}

// MapEnd patches the map started at off holding count keys plus values.
func MapEnd(b []byte, off int, count int) []byte {
	body := len(b) - off - 9
	if body+1 < 256 && count < 256 {
		b[off] = codeMap8
		b[off+1] = byte(body + 1)
		b[off+2] = byte(count)
		copy(b[off+3:], b[off+9:])
		return b[:len(b)-6]
	}
	binary.BigEndian.PutUint32(b[off+1:], uint32(body+4))
	binary.BigEndian.PutUint32(b[off+5:], uint32(count))
	return b
}

// Append appends the encoding of v. Besides the decoded value types it
// accepts int (as long), time.Time (as timestamp), []any (list),
// map[string]any and map[Symbol]any (maps with sorted keys), Described by
// value, Raw, and slices []Symbol, []string, []int64, []UUID, []Timestamp,
// []time.Time which encode as arrays.
func Append(b []byte, v any) ([]byte, error) { return appendValue(b, v, 0) }

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return b, ErrTooDeep
	}
	var err error
	switch x := v.(type) {
	case nil:
		return append(b, codeNull), nil
	case bool:
		return AppendBool(b, x), nil
	case uint8:
		return AppendUbyte(b, x), nil
	case uint16:
		return AppendUshort(b, x), nil
	case uint32:
		return AppendUint(b, x), nil
	case uint64:
		return AppendUlong(b, x), nil
	case int8:
		return AppendByte(b, x), nil
	case int16:
		return AppendShort(b, x), nil
	case int32:
		return AppendInt(b, x), nil
	case int64:
		return AppendLong(b, x), nil
	case int:
		return AppendLong(b, int64(x)), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(b, codeFloat), math.Float32bits(x)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, codeDouble), math.Float64bits(x)), nil
	case Decimal32:
		return append(append(b, codeDecimal32), x[:]...), nil
	case Decimal64:
		return append(append(b, codeDecimal64), x[:]...), nil
	case Decimal128:
		return append(append(b, codeDecimal128), x[:]...), nil
	case Char:
		return binary.BigEndian.AppendUint32(append(b, codeChar), uint32(x)), nil
	case Timestamp:
		return AppendTimestamp(b, x), nil
	case time.Time:
		return AppendTimestamp(b, TimestampOf(x)), nil
	case UUID:
		return AppendUUID(b, x), nil
	case []byte:
		return AppendBinary(b, x), nil
	case string:
		return AppendString(b, x), nil
	case Symbol:
		return AppendSymbol(b, x), nil
	case Raw:
		return append(b, x...), nil
	case *Described:
		if x == nil {
			return append(b, codeNull), nil
		}
		return appendDescribed(b, x.Descriptor, x.Value, depth)
	case Described:
		return appendDescribed(b, x.Descriptor, x.Value, depth)
	case List:
		return appendList(b, x, depth)
	case []any:
		return appendList(b, x, depth)
	case Map:
		off := 0
		b, off = MapStart(b)
		for _, e := range x {
			if b, err = appendValue(b, e.Key, depth+1); err != nil {
				return b, err
			}
			if b, err = appendValue(b, e.Value, depth+1); err != nil {
				return b, err
			}
		}
		return MapEnd(b, off, 2*len(x)), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := make(Map, 0, len(x))
		for _, k := range keys {
			m = append(m, MapEntry{Key: k, Value: x[k]})
		}
		return appendValue(b, m, depth)
	case map[Symbol]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		m := make(Map, 0, len(x))
		for _, k := range keys {
			m = append(m, MapEntry{Key: Symbol(k), Value: x[Symbol(k)]})
		}
		return appendValue(b, m, depth)
	case *Array:
		if x == nil {
			return append(b, codeNull), nil
		}
		return appendArray(b, x, depth)
	case Array:
		return appendArray(b, &x, depth)
	case []Symbol:
		a := &Array{Code: codeSym32, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = x[i]
		}
		return appendArray(b, a, depth)
	case []string:
		a := &Array{Code: codeStr32, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = x[i]
		}
		return appendArray(b, a, depth)
	case []int64:
		a := &Array{Code: codeLong, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = x[i]
		}
		return appendArray(b, a, depth)
	case []UUID:
		a := &Array{Code: codeUUID, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = x[i]
		}
		return appendArray(b, a, depth)
	case []Timestamp:
		a := &Array{Code: codeTimestamp, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = x[i]
		}
		return appendArray(b, a, depth)
	case []time.Time:
		a := &Array{Code: codeTimestamp, Items: make([]any, len(x))}
		for i := range x {
			a.Items[i] = TimestampOf(x[i])
		}
		return appendArray(b, a, depth)
	}
	return b, fmt.Errorf("encoding: cannot encode %T", v)
}

func appendDescribed(b []byte, d, v any, depth int) ([]byte, error) {
	b = append(b, codeDescribed)
	b, err := appendValue(b, d, depth+1)
	if err != nil {
		return b, err
	}
	return appendValue(b, v, depth+1)
}

func appendList(b []byte, l []any, depth int) ([]byte, error) {
	if len(l) == 0 {
		return append(b, codeList0), nil
	}
	var err error
	b, off := ListStart(b)
	for _, e := range l {
		if b, err = appendValue(b, e, depth+1); err != nil {
			return b, err
		}
	}
	return ListEnd(b, off, len(l)), nil
}

// appendArray writes an array32 whose elements all use a.Code. Compact codes
// that cannot hold an element (smalluint, str8, ...) are widened.
func appendArray(b []byte, a *Array, depth int) ([]byte, error) {
	code := widen(a.Code)
	off := len(b)
	b = append(b, codeArray32, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	if a.Descriptor != nil {
		b = append(b, codeDescribed)
		if b, err = appendValue(b, a.Descriptor, depth+1); err != nil {
			return b, err
		}
	}
	b = append(b, code)
	for _, it := range a.Items {
		if b, err = appendElement(b, code, it, depth+1); err != nil {
			return b, err
		}
	}
	binary.BigEndian.PutUint32(b[off+1:], uint32(len(b)-off-5))
	binary.BigEndian.PutUint32(b[off+5:], uint32(len(a.Items)))
	return b, nil
}

func widen(code byte) byte {
	switch code {
	case codeUint0, codeSmallUint:
		return codeUint
	case codeUlong0, codeSmallUlong:
		return codeUlong
	case codeSmallInt:
		return codeInt
	case codeSmallLong:
		return codeLong
	case codeTrue, codeFalse:
		return codeBool
	case codeVbin8:
		return codeVbin32
	case codeStr8:
		return codeStr32
	case codeSym8:
		return codeSym32
	case codeList0, codeList8:
		return codeList32
	case codeMap8:
		return codeMap32
	case codeArray8:
		return codeArray32
	}
	return code
}

// appendElement appends an array element's data (no constructor) for code.
func appendElement(b []byte, code byte, v any, depth int) ([]byte, error) {
	mismatch := func() ([]byte, error) {
		return b, fmt.Errorf("encoding: array element %T does not fit code 0x%02x", v, code)
	}
	be := binary.BigEndian
	switch code {
	case codeNull:
		if v != nil {
			return mismatch()
		}
		return b, nil
	case codeBool:
		x, ok := v.(bool)
		if !ok {
			return mismatch()
		}
		if x {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case codeVbin32, codeStr32, codeSym32:
		var p []byte
		switch x := v.(type) {
		case []byte:
			p = x
		case string:
			p = []byte(x)
		case Symbol:
			p = []byte(x)
		default:
			return mismatch()
		}
		return append(be.AppendUint32(b, uint32(len(p))), p...), nil
	case codeList32, codeMap32, codeArray32:
		start := len(b)
		tmp, err := appendValue(nil, v, depth)
		if err != nil {
			return b, err
		}
		// Re-encode in the 32-bit form the array constructor declares.
		val, _, err := Decode(tmp)
		if err != nil {
			return b, err
		}
		switch code {
		case codeList32:
			l, ok := val.(List)
			if !ok {
				return mismatch()
			}
			b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
			for _, e := range l {
				if b, err = appendValue(b, e, depth+1); err != nil {
					return b, err
				}
			}
			be.PutUint32(b[start:], uint32(len(b)-start-4))
			be.PutUint32(b[start+4:], uint32(len(l)))
		case codeMap32:
			m, ok := val.(Map)
			if !ok {
				return mismatch()
			}
			b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
			for _, e := range m {
				if b, err = appendValue(b, e.Key, depth+1); err != nil {
					return b, err
				}
				if b, err = appendValue(b, e.Value, depth+1); err != nil {
					return b, err
				}
			}
			be.PutUint32(b[start:], uint32(len(b)-start-4))
			be.PutUint32(b[start+4:], uint32(2*len(m)))
		default:
			if _, ok := val.(*Array); !ok {
				return mismatch()
			}
			b = append(b, tmp[1:]...) // tmp is already array32
		}
		return b, nil
	}
	// Fixed-width: encode normally with the same code, then strip the constructor.
	var tmp [17]byte
	var enc []byte
	switch x := v.(type) {
	case uint8:
		enc = append(tmp[:0], codeUbyte, x)
	case uint16:
		enc = be.AppendUint16(append(tmp[:0], codeUshort), x)
	case uint32:
		enc = be.AppendUint32(append(tmp[:0], codeUint), x)
	case uint64:
		enc = be.AppendUint64(append(tmp[:0], codeUlong), x)
	case int8:
		enc = append(tmp[:0], codeByte, byte(x))
	case int16:
		enc = be.AppendUint16(append(tmp[:0], codeShort), uint16(x))
	case int32:
		enc = be.AppendUint32(append(tmp[:0], codeInt), uint32(x))
	case int64:
		enc = be.AppendUint64(append(tmp[:0], codeLong), uint64(x))
	default:
		var err error
		enc, err = appendValue(tmp[:0], v, depth)
		if err != nil {
			return b, err
		}
	}
	if enc[0] != code {
		return mismatch()
	}
	return append(b, enc[1:]...), nil
}
