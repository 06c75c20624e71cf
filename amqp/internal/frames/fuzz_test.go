package frames

import (
	"bytes"
	"io"
	"testing"
)

// chunkReader returns the input in chunks whose sizes come from the fuzzer.
type chunkReader struct {
	data   []byte
	chunks []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.chunks) > 0 {
		n = int(c.chunks[0]) + 1
		c.chunks = c.chunks[1:]
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// FuzzReadFrames feeds arbitrary bytes, randomly chunked, to the frame
// reader and parser: they must never panic, and whatever parses must
// re-encode to something that parses again.
func FuzzReadFrames(f *testing.F) {
	var seed []byte
	for _, b := range allBodies() {
		seed = AppendFrame(seed, TypeAMQP, 1, b, nil)
	}
	f.Add(seed, []byte{3, 200, 7})
	f.Add(AppendFrame(nil, TypeAMQP, 0, nil, nil), []byte{0})
	f.Add([]byte{0, 0, 0, 12, 2, 0, 0, 0, 0, 0x53, 0x18, 0x45}, []byte{})
	f.Fuzz(func(t *testing.T, data, chunks []byte) {
		r := NewReader(&chunkReader{data: data, chunks: chunks}, 4096)
		for i := 0; i < 64; i++ {
			fr, err := r.ReadFrame()
			if err != nil {
				return
			}
			if len(fr.Body) == 0 {
				continue
			}
			b, err := Parse(fr.Body)
			if err != nil {
				continue
			}
			var payload []byte
			if tr, ok := b.(*Transfer); ok {
				payload = tr.Payload
			}
			enc := AppendFrame(nil, fr.Type, fr.Channel, b, payload)
			fr2, err := NewReader(bytes.NewReader(enc), 1<<30).ReadFrame()
			if err != nil {
				t.Fatalf("re-read %s: %v", b, err)
			}
			if _, err := Parse(fr2.Body); err != nil {
				t.Fatalf("re-parse %s: %v", b, err)
			}
		}
	})
}
