package encoding

import (
	"bytes"
	"testing"
)

// FuzzDecode: any input either fails cleanly or decodes to a value whose
// re-encoding decodes to an equal encoding (decode(encode(v)) == v).
func FuzzDecode(f *testing.F) {
	for _, seed := range [][]byte{
		{0x40}, {0x45}, {0xa1, 0x01, 'a'}, {0xc0, 0x03, 0x01, 0x52, 0x05},
		{0x00, 0x53, 0x75, 0xa0, 0x00}, {0xf0, 0, 0, 0, 6, 0, 0, 0, 1, 0x71, 0, 0, 0, 1},
		{0xe0, 0x02, 0x03, 0x43}, {0x74, 1, 2, 3, 4}, {0x73, 0, 0, 0, 0x41},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sz, serr := Size(b)
		v, n, err := Decode(b)
		if err != nil {
			return
		}
		if serr != nil || sz != n {
			t.Fatalf("Size=%d,%v but Decode n=%d", sz, serr, n)
		}
		enc, err := Append(nil, v)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", v, err)
		}
		v2, n2, err := Decode(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("decode of re-encoding: %v", err)
		}
		enc2, err := Append(nil, v2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("not a fixed point:\n%x\n%x", enc, enc2)
		}
	})
}
