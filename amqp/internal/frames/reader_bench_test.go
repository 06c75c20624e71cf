package frames

import (
	"encoding/binary"
	"testing"
)

// loop is an endless stream repeating one frame.
type loop struct {
	b   []byte
	off int
}

func (l *loop) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

// BenchmarkReadFrame: reading one 1 KiB frame, as the connection's reader does for
// every transfer (the frame body is the one allocation it needs).
//
//	go test -run '^$' -bench ReadFrame -benchmem ./amqp/internal/frames/
func BenchmarkReadFrame(b *testing.B) {
	frame := make([]byte, HeaderSize+1024)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)))
	frame[4] = 2 // data offset: no extended header
	r := NewReader(&loop{b: frame}, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		f, err := r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Body) != 1024 {
			b.Fatalf("body of %d bytes", len(f.Body))
		}
	}
}
