package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
)

// The field encoding of version 2: unsigned integers are uvarints, signed ones varints,
// strings and byte slices a uvarint length then the bytes, booleans one byte, lock
// tokens their 16 bytes. Values of fsm types that the fsm's own codec already writes
// (messages, receives, settlements, session-state changes, two-phase-commit commands)
// travel as an fsm entry (fsm.AppendEntry) behind a 4-byte length: the fsm keeps that
// encoding stable across releases (style P3), and the wire does not define it twice.

// ErrBadMessage marks input the decoder cannot read: truncated, malformed, an unknown
// operation or field. Decoders return it and never panic.
var ErrBadMessage = errors.New("wire: bad message")

// Decoder reads fields from b, consuming it. The first error sticks; later reads return
// zero values, so callers check Err once.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder reads b. Decoded byte slices and strings do not alias b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met, wrapping ErrBadMessage.
func (d *Decoder) Err() error { return d.err }

// Done reports an error when bytes are left over (a message must be read whole).
func (d *Decoder) Done() error {
	if d.err == nil && len(d.b) != 0 {
		d.failf("%d trailing bytes", len(d.b))
	}
	return d.err
}

func (d *Decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *Decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.failf("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *Decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.failf("bad boolean")
	return false
}

func (d *Decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.failf("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) uint32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.failf("uint32 out of range")
		return 0
	}
	return uint32(v)
}

func (d *Decoder) duration() time.Duration { return time.Duration(d.varint()) }

// count reads a collection's length, refusing one that the rest of the input cannot
// hold at min bytes per element (so a forged length cannot make the decoder allocate).
func (d *Decoder) count(min int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if min < 1 {
		min = 1
	}
	if v > uint64(len(d.b)/min) {
		d.failf("length %d exceeds the input", v)
		return 0
	}
	return int(v)
}

func (d *Decoder) raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.failf("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *Decoder) string() string { return string(d.raw(d.count(1))) }

// bytes returns a copy; nil stays nil (a presence flag precedes).
func (d *Decoder) bytes() []byte {
	if !d.bool() {
		return nil
	}
	r := d.raw(d.count(1))
	if r == nil {
		return nil
	}
	return append([]byte{}, r...)
}

func (d *Decoder) target() fsm.Target {
	return fsm.Target{Sub: d.string(), DLQ: d.bool()}
}

func (d *Decoder) int64s() []int64 {
	if !d.bool() {
		return nil
	}
	n := d.count(1)
	out := make([]int64, n)
	for i := range out {
		out[i] = d.varint()
	}
	return out
}

func (d *Decoder) uint32s() []uint32 {
	if !d.bool() {
		return nil
	}
	n := d.count(1)
	out := make([]uint32, n)
	for i := range out {
		out[i] = d.uint32()
	}
	return out
}

func (d *Decoder) strings() []string {
	if !d.bool() {
		return nil
	}
	n := d.count(1)
	out := make([]string, n)
	for i := range out {
		out[i] = d.string()
	}
	return out
}

func (d *Decoder) tokens() []fsm.LockToken {
	if !d.bool() {
		return nil
	}
	n := d.count(len(fsm.LockToken{}))
	out := make([]fsm.LockToken, n)
	for i := range out {
		copy(out[i][:], d.raw(len(fsm.LockToken{})))
	}
	return out
}

// entry reads an fsm entry written by appendEntry and returns its commands.
func (d *Decoder) entry() []fsm.Command {
	if d.err != nil {
		return nil
	}
	if len(d.b) < 4 {
		d.failf("truncated")
		return nil
	}
	n := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	raw := d.raw(int(min(n, 1<<31-1)))
	if d.err != nil {
		return nil
	}
	e, err := fsm.DecodeEntry(raw)
	if err != nil {
		d.failf("%v", err)
		return nil
	}
	return e.Cmds
}

// command reads an entry holding one command of type T.
func command[T fsm.Command](d *Decoder) T {
	var zero T
	cmds := d.entry()
	if d.err != nil {
		return zero
	}
	if len(cmds) != 1 {
		d.failf("%d commands where one was expected", len(cmds))
		return zero
	}
	c, ok := cmds[0].(T)
	if !ok {
		d.failf("command %T where %T was expected", cmds[0], zero)
		return zero
	}
	return c
}

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func appendVarint(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = appendBool(b, p != nil)
	if p == nil {
		return b
	}
	b = appendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendTarget(b []byte, t fsm.Target) []byte {
	b = appendString(b, t.Sub)
	return appendBool(b, t.DLQ)
}

func appendInt64s(b []byte, s []int64) []byte {
	b = appendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = appendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = appendVarint(b, v)
	}
	return b
}

func appendUint32s(b []byte, s []uint32) []byte {
	b = appendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = appendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = appendUvarint(b, uint64(v))
	}
	return b
}

func appendStrings(b []byte, s []string) []byte {
	b = appendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = appendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = appendString(b, v)
	}
	return b
}

func appendTokens(b []byte, ts []fsm.LockToken) []byte {
	b = appendBool(b, ts != nil)
	if ts == nil {
		return b
	}
	b = appendUvarint(b, uint64(len(ts)))
	for i := range ts {
		b = append(b, ts[i][:]...)
	}
	return b
}

// appendEntry writes cmds as an fsm entry behind its 4-byte length.
func appendEntry(b []byte, cmds ...fsm.Command) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fsm.AppendEntry(b, &fsm.Entry{Cmds: cmds})
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// appendMessages writes msgs as an fsm Enqueue entry. A body the partition moved out of
// memory (fsm.Spilled) is read back: the peer gets the bytes.
func appendMessages(b []byte, msgs []*fsm.Message) []byte {
	for i, m := range msgs {
		if m != nil && m.Spilled != nil && m.Payload == nil {
			cp := make([]*fsm.Message, len(msgs))
			copy(cp, msgs)
			for j := i; j < len(cp); j++ {
				if m := cp[j]; m != nil && m.Spilled != nil && m.Payload == nil {
					c := *m
					c.Payload, _ = m.Spilled.Read() // an unreadable body travels empty, as gob sent it
					c.Spilled = nil
					cp[j] = &c
				}
			}
			msgs = cp
			break
		}
	}
	b = appendBool(b, msgs != nil)
	if msgs == nil {
		return b
	}
	return appendEntry(b, &fsm.Enqueue{Messages: msgs})
}

func (d *Decoder) messages() []*fsm.Message {
	if !d.bool() {
		return nil
	}
	c := command[*fsm.Enqueue](d)
	if c == nil {
		return nil
	}
	if c.Messages == nil {
		return []*fsm.Message{}
	}
	return c.Messages
}
