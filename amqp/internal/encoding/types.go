// Package encoding is the AMQP 1.0 type system codec (OASIS AMQP 1.0 part 1,
// "Types"). It is pure: no I/O, no goroutines, stdlib only.
//
// Decoded values use these Go types:
//
//	null            nil
//	boolean         bool
//	ubyte..ulong    uint8, uint16, uint32, uint64
//	byte..long      int8, int16, int32, int64
//	float, double   float32, float64
//	decimal32/64/128 Decimal32, Decimal64, Decimal128 (raw IEEE 754 bytes, carried through)
//	char            Char (raw UTF-32 code unit)
//	timestamp       Timestamp (ms since the Unix epoch)
//	uuid            UUID
//	binary          []byte (never nil once decoded, even when empty)
//	string          string
//	symbol          Symbol
//	described       *Described
//	list            List
//	map             Map (ordered key/value pairs; keys may be any type)
//	array           *Array
//
// Decoders never panic and never allocate more than a small constant factor of
// the input: every element count is checked against the bytes that remain.
package encoding

import "time"

// Type format codes, part 1 §1.6.
const (
	codeDescribed  = 0x00
	codeNull       = 0x40
	codeTrue       = 0x41
	codeFalse      = 0x42
	codeUint0      = 0x43
	codeUlong0     = 0x44
	codeList0      = 0x45
	codeUbyte      = 0x50
	codeByte       = 0x51
	codeSmallUint  = 0x52
	codeSmallUlong = 0x53
	codeSmallInt   = 0x54
	codeSmallLong  = 0x55
	codeBool       = 0x56
	codeUshort     = 0x60
	codeShort      = 0x61
	codeUint       = 0x70
	codeInt        = 0x71
	codeFloat      = 0x72
	codeChar       = 0x73
	codeDecimal32  = 0x74
	codeUlong      = 0x80
	codeLong       = 0x81
	codeDouble     = 0x82
	codeTimestamp  = 0x83
	codeDecimal64  = 0x84
	codeDecimal128 = 0x94
	codeUUID       = 0x98
	codeVbin8      = 0xa0
	codeStr8       = 0xa1
	codeSym8       = 0xa3
	codeVbin32     = 0xb0
	codeStr32      = 0xb1
	codeSym32      = 0xb3
	codeList8      = 0xc0
	codeMap8       = 0xc1
	codeList32     = 0xd0
	codeMap32      = 0xd1
	codeArray8     = 0xe0
	codeArray32    = 0xf0
)

// Exported format codes that callers building arrays need.
const (
	CodeUint      = codeUint
	CodeLong      = codeLong
	CodeUlong     = codeUlong
	CodeInt       = codeInt
	CodeTimestamp = codeTimestamp
	CodeUUID      = codeUUID
	CodeStr32     = codeStr32
	CodeSym32     = codeSym32
	CodeVbin32    = codeVbin32
	CodeBool      = codeBool
)

// Symbol is an AMQP symbol (ASCII identifier), distinct from string.
type Symbol string

// Timestamp is an AMQP timestamp: milliseconds since the Unix epoch.
type Timestamp int64

// Time converts t to a UTC time.Time.
func (t Timestamp) Time() time.Time { return time.UnixMilli(int64(t)).UTC() }

// TimestampOf converts a time to an AMQP timestamp (truncated to ms).
func TimestampOf(t time.Time) Timestamp { return Timestamp(t.UnixMilli()) }

// UUID is an RFC 4122 UUID in network byte order.
type UUID [16]byte

// Decimal32 is an IEEE 754 decimal32 carried as its raw big-endian bytes.
type Decimal32 [4]byte

// Decimal64 is an IEEE 754 decimal64 carried as its raw big-endian bytes.
type Decimal64 [8]byte

// Decimal128 is an IEEE 754 decimal128 carried as its raw big-endian bytes.
type Decimal128 [16]byte

// Char is an AMQP char: one UTF-32BE code unit, carried as is.
type Char uint32

// Described is a described type: part 1 §1.2 "descriptor value".
type Described struct {
	Descriptor any // usually uint64 or Symbol
	Value      any
}

// List is an AMQP list.
type List []any

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key   any
	Value any
}

// Map is an AMQP map kept in wire order. Keys are compared with Equal.
type Map []MapEntry

// Get returns the value for key (compared by Go equality on comparable keys).
func (m Map) Get(key any) (any, bool) {
	for _, e := range m {
		if keyEqual(e.Key, key) {
			return e.Value, true
		}
	}
	return nil, false
}

// GetString returns the value for a string or symbol key equal to name.
func (m Map) GetString(name string) (any, bool) {
	for _, e := range m {
		switch k := e.Key.(type) {
		case string:
			if k == name {
				return e.Value, true
			}
		case Symbol:
			if string(k) == name {
				return e.Value, true
			}
		}
	}
	return nil, false
}

// Set replaces the value of key, or appends it.
func (m *Map) Set(key, value any) {
	for i, e := range *m {
		if keyEqual(e.Key, key) {
			(*m)[i].Value = value
			return
		}
	}
	*m = append(*m, MapEntry{Key: key, Value: value})
}

func keyEqual(a, b any) bool {
	switch a.(type) {
	case []byte, List, Map, *Array, *Described:
		return false
	}
	switch b.(type) {
	case []byte, List, Map, *Array, *Described:
		return false
	}
	return a == b
}

// Array is an AMQP array: every element shares one constructor (part 1 §1.2).
// Code is the element format code; Descriptor is non-nil for an array of
// described values, in which case Items hold the undescribed values.
type Array struct {
	Descriptor any
	Code       byte
	Items      []any
}

// Raw is an already-encoded AMQP value, written verbatim by the encoder.
type Raw []byte
