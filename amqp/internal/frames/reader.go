package frames

import (
	"bufio"
	"fmt"
	"io"
)

// Frame is one frame read from the wire. Body is owned by the caller. An empty Body is a
// heartbeat (part 2 §2.4.5).
type Frame struct {
	Type    uint8
	Channel uint16
	Body    []byte
}

// Reader reads protocol headers and frames, enforcing a maximum frame size
// before reading (and allocating) the frame body.
type Reader struct {
	r *bufio.Reader
	// MaxFrameSize bounds SIZE; frames above it fail with ErrFrameTooLarge.
	MaxFrameSize uint32
	// hb holds each frame header as it is read: a local array would escape to the
	// heap through io.ReadFull, one allocation per frame.
	hb [HeaderSize]byte
}

// NewReader wraps r.
func NewReader(r io.Reader, maxFrameSize uint32) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64*1024), MaxFrameSize: maxFrameSize}
}

// ReadProtoHeader reads an 8-byte protocol header.
func (r *Reader) ReadProtoHeader() ([8]byte, error) {
	var h [8]byte
	_, err := io.ReadFull(r.r, h[:])
	return h, err
}

// ReadFrame reads the next frame.
func (r *Reader) ReadFrame() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := ParseHeader(r.hb[:])
	if err != nil {
		return Frame{}, err
	}
	if h.Size > r.MaxFrameSize {
		return Frame{}, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, h.Size, r.MaxFrameSize)
	}
	rest := int(h.Size) - HeaderSize
	// A fresh buffer per frame: the parsed frame (payload, tags) may be
	// handed to another goroutine, so it must not alias a reused buffer.
	b := make([]byte, rest)
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	ext := int(h.DataOffset)*4 - HeaderSize
	return Frame{Type: h.Type, Channel: h.Channel, Body: b[ext:]}, nil
}

// Buffered is the number of bytes read from the connection but not yet consumed.
func (r *Reader) Buffered() int { return r.r.Buffered() }
