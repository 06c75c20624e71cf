package wire

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/internal/binenc"
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

// Decoder reads fields (binenc's encoding) from its input, consuming it. The first
// error sticks and wraps ErrBadMessage; later reads return zero values, so callers check
// Err once.
type Decoder struct{ binenc.Decoder }

// NewDecoder reads b. Decoded byte slices and strings do not alias b.
func NewDecoder(b []byte) *Decoder { return &Decoder{binenc.NewDecoder(b, ErrBadMessage)} }

// Done reports an error when bytes are left over (a message must be read whole).
func (d *Decoder) Done() error {
	if d.Err() == nil && len(d.Rest()) != 0 {
		d.Failf("%d trailing bytes", len(d.Rest()))
	}
	return d.Err()
}

func (d *Decoder) duration() time.Duration { return time.Duration(d.Varint()) }

// bytes returns a copy; nil stays nil (a presence flag precedes).
func (d *Decoder) bytes() []byte {
	if !d.Bool() {
		return nil
	}
	r := d.Raw(d.Count(1))
	if r == nil {
		return nil
	}
	return append([]byte{}, r...)
}

func (d *Decoder) target() fsm.Target {
	return fsm.Target{Sub: d.Str(), DLQ: d.Bool()}
}

func (d *Decoder) int64s() []int64 {
	if !d.Bool() {
		return nil
	}
	n := d.Count(1)
	out := make([]int64, n)
	for i := range out {
		out[i] = d.Varint()
	}
	return out
}

func (d *Decoder) uint32s() []uint32 {
	if !d.Bool() {
		return nil
	}
	n := d.Count(1)
	out := make([]uint32, n)
	for i := range out {
		out[i] = d.Uvarint32("uint32")
	}
	return out
}

func (d *Decoder) strings() []string {
	if !d.Bool() {
		return nil
	}
	n := d.Count(1)
	out := make([]string, n)
	for i := range out {
		out[i] = d.Str()
	}
	return out
}

func (d *Decoder) tokens() []fsm.LockToken {
	if !d.Bool() {
		return nil
	}
	n := d.Count(len(fsm.LockToken{}))
	out := make([]fsm.LockToken, n)
	for i := range out {
		copy(out[i][:], d.Raw(len(fsm.LockToken{})))
	}
	return out
}

// entry reads an fsm entry written by appendEntry and returns its commands.
func (d *Decoder) entry() []fsm.Command {
	n := d.Uint32()
	raw := d.Raw(int(min(n, 1<<31-1)))
	if d.Err() != nil {
		return nil
	}
	e, err := fsm.DecodeEntry(raw)
	if err != nil {
		d.Failf("%v", err)
		return nil
	}
	return e.Cmds
}

// command reads an entry holding one command of type T.
func command[T fsm.Command](d *Decoder) T {
	var zero T
	cmds := d.entry()
	if d.Err() != nil {
		return zero
	}
	if len(cmds) != 1 {
		d.Failf("%d commands where one was expected", len(cmds))
		return zero
	}
	c, ok := cmds[0].(T)
	if !ok {
		d.Failf("command %T where %T was expected", cmds[0], zero)
		return zero
	}
	return c
}

func appendBytes(b, p []byte) []byte {
	b = binenc.AppendBool(b, p != nil)
	if p == nil {
		return b
	}
	b = binenc.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendTarget(b []byte, t fsm.Target) []byte {
	b = binenc.AppendString(b, t.Sub)
	return binenc.AppendBool(b, t.DLQ)
}

func appendInt64s(b []byte, s []int64) []byte {
	b = binenc.AppendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = binenc.AppendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = binenc.AppendVarint(b, v)
	}
	return b
}

func appendUint32s(b []byte, s []uint32) []byte {
	b = binenc.AppendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = binenc.AppendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = binenc.AppendUvarint(b, uint64(v))
	}
	return b
}

func appendStrings(b []byte, s []string) []byte {
	b = binenc.AppendBool(b, s != nil)
	if s == nil {
		return b
	}
	b = binenc.AppendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = binenc.AppendString(b, v)
	}
	return b
}

func appendTokens(b []byte, ts []fsm.LockToken) []byte {
	b = binenc.AppendBool(b, ts != nil)
	if ts == nil {
		return b
	}
	b = binenc.AppendUvarint(b, uint64(len(ts)))
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
	b = binenc.AppendBool(b, msgs != nil)
	if msgs == nil {
		return b
	}
	return appendEntry(b, &fsm.Enqueue{Messages: msgs})
}

func (d *Decoder) messages() []*fsm.Message {
	if !d.Bool() {
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
