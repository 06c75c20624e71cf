package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Chunked bodies (docs/fsm.md, "Chunked bodies"). A body too large for one raft entry
// without stalling the partition arrives as BodyChunk commands, each in an entry of its
// own, then one EnqueueUploaded that names the upload and consumes its chunks. Between
// the chunks, other proposals of the partition take their turn in the log.
//
// While pending, an upload's bytes count toward MaxSizeBytes (a chunk that would exceed
// the quota or MaxMessageSizeBytes is refused and drops its upload), and the upload is
// neither receivable nor counted in Stats. The final command takes the upload whatever
// its own outcome: if it is refused (quota, entity disabled, duplicate, an incomplete
// upload), the chunks are gone too, so a message is stored with its whole body or not
// at all. An upload that is never completed (the leader changed mid-upload, the sender
// went away) is dropped by the first entry applied at or after its Deadline, which the
// leader chose and wrote in the chunk (P1): every replica drops it at the same point of
// the log.

// ErrUploadIncomplete is returned by EnqueueUploaded when an upload it names is missing
// (never started here, refused, or dropped at its deadline) or lacks a chunk. The sender
// may send the message again.
var ErrUploadIncomplete = errors.New("fsm: chunked body incomplete or expired")

// MaxUploadChunks bounds the chunks of one upload; MaxUploadBytes its total size (one
// snapshot record holds a whole upload).
const (
	MaxUploadChunks = 1 << 14
	MaxUploadBytes  = maxRecord - 1<<20
)

// BodyChunk holds bytes [Index*chunk size, ...) of the body of a message to be sent with
// EnqueueUploaded under the same Upload id, which the leader chose to be unique. The
// upload is dropped by the first entry applied at or after Deadline (fsm time) unless
// completed before; a later chunk may move the deadline later. A chunk repeated with an
// Index already held changes nothing.
type BodyChunk struct {
	Upload   string
	Index    uint32
	Deadline int64
	Data     []byte
}

// UploadRef names the chunked body of one message: chunks 0..Chunks-1 of Upload,
// concatenated. An empty Upload means the message carries its Payload inline.
type UploadRef struct {
	Upload string
	Chunks uint32
}

// EnqueueUploaded is Enqueue (or, with Schedule set, Schedule) of Messages whose bodies
// are given by Bodies (one per message): the payload of message i is its upload's
// chunks, concatenated, when Bodies[i].Upload is set. Every named upload is consumed,
// whether the enqueue succeeds or not; an upload missing or lacking a chunk fails the
// whole command with ErrUploadIncomplete (nothing is stored). Naming an upload with
// Chunks 0 is how a sender abandons it: it is dropped and nothing is stored.
type EnqueueUploaded struct {
	Schedule bool
	Messages []*Message
	Bodies   []UploadRef
}

func (*BodyChunk) op() Op       { return OpBodyChunk }
func (*EnqueueUploaded) op() Op { return OpEnqueueUploaded }

func (*BodyChunk) activity() (activity, Target)       { return noActivity, Target{} }
func (*EnqueueUploaded) activity() (activity, Target) { return sendActivity, Target{} }

// upload is one pending chunked body. The chunk slices are never written after they are
// stored (Freeze shares them); the chunks slice itself is replaced, not written, when a
// chunk arrives.
type upload struct {
	id       string
	deadline int64
	bytes    int64 // sum of len(chunks[i]), counted in f.bytes
	chunks   [][]byte
	have     int // non-nil chunks
}

// PendingUpload describes an upload not yet completed (query).
type PendingUpload struct {
	ID       string
	Deadline int64
	Chunks   int
	Bytes    int64
}

func (f *FSM) bodyChunk(c *BodyChunk, r *Result) {
	switch {
	case c.Upload == "":
		r.Err = fmt.Errorf("%w: chunk without an upload id", ErrBadCommand)
		return
	case c.Index >= MaxUploadChunks:
		r.Err = fmt.Errorf("%w: chunk index %d >= %d", ErrBadCommand, c.Index, MaxUploadChunks)
		return
	case len(c.Data) == 0:
		r.Err = fmt.Errorf("%w: empty chunk", ErrBadCommand)
		return
	}
	u := f.uploads[c.Upload]
	if int(c.Index) < len(u.chunksOrNil()) && u.chunks[c.Index] != nil {
		return // a repeat
	}
	fail := func(err error) {
		r.Err = err
		f.dropUpload(c.Upload)
	}
	if s := f.cfg.Queue.Status; s == StatusDisabled || s == StatusSendDisabled {
		fail(ErrEntityDisabled)
		return
	}
	if c.Deadline <= f.now {
		fail(fmt.Errorf("%w: chunk deadline %d is not after %d", ErrUploadIncomplete, c.Deadline, f.now))
		return
	}
	var held int64
	if u != nil {
		held = u.bytes
	}
	n := int64(len(c.Data))
	if max := f.cfg.MaxMessageSizeBytes; max > 0 && held+n > max { // S-SEND-6
		fail(fmt.Errorf("%w: a chunked body of more than %d bytes, the limit is %d", ErrMessageTooLarge, held+n, max))
		return
	}
	if held+n > MaxUploadBytes {
		fail(fmt.Errorf("%w: a chunked body of more than %d bytes", ErrMessageTooLarge, MaxUploadBytes))
		return
	}
	if max := f.cfg.MaxSizeBytes; max > 0 && f.bytes+n > max { // S-SEND-6
		fail(fmt.Errorf("%w: %d + %d bytes exceeds %d", ErrQuotaExceeded, f.bytes, n, max))
		return
	}
	if u == nil {
		u = &upload{id: c.Upload}
		f.uploads[c.Upload] = u
	}
	chunks := u.chunks
	if int(c.Index) >= len(chunks) {
		chunks = slices.Grow(slices.Clone(chunks), int(c.Index)+1-len(chunks))[:c.Index+1]
	} else {
		chunks = slices.Clone(chunks)
	}
	chunks[c.Index] = c.Data
	u.chunks = chunks
	u.have++
	u.bytes += n
	u.deadline = max(u.deadline, c.Deadline)
	f.bytes += n
}

func (u *upload) chunksOrNil() [][]byte {
	if u == nil {
		return nil
	}
	return u.chunks
}

func (f *FSM) dropUpload(id string) {
	if u := f.uploads[id]; u != nil {
		f.bytes -= u.bytes
		delete(f.uploads, id)
	}
}

func (f *FSM) enqueueUploaded(c *EnqueueUploaded, r *Result) {
	if len(c.Bodies) != len(c.Messages) {
		r.Err = fmt.Errorf("%w: %d bodies for %d messages", ErrBadCommand, len(c.Bodies), len(c.Messages))
		// Take the uploads anyway: the sender gets an error and its chunks are of no use.
	}
	var bodies [][]byte
	for i, ref := range c.Bodies {
		if ref.Upload == "" {
			continue
		}
		if bodies == nil {
			bodies = make([][]byte, len(c.Bodies))
		}
		u := f.uploads[ref.Upload]
		f.dropUpload(ref.Upload) // consumed whatever comes next
		switch {
		case r.Err != nil:
		case u == nil:
			r.Err = fmt.Errorf("%w: upload %q of message %d", ErrUploadIncomplete, ref.Upload, i)
		case u.have != int(ref.Chunks) || len(u.chunks) != int(ref.Chunks):
			r.Err = fmt.Errorf("%w: upload %q of message %d has %d of %d chunks", ErrUploadIncomplete, ref.Upload, i, u.have, ref.Chunks)
		default:
			b := make([]byte, 0, u.bytes)
			for _, ch := range u.chunks {
				b = append(b, ch...)
			}
			bodies[i] = b
		}
	}
	if r.Err != nil {
		return
	}
	ms := c.Messages
	if bodies != nil {
		ms = make([]*Message, len(c.Messages))
		for i, m := range c.Messages {
			ms[i] = m
			if bodies[i] != nil && m != nil {
				cp := *m
				cp.Payload = bodies[i]
				ms[i] = &cp
			}
		}
	}
	f.enqueue(ms, r)
}

// dropExpiredUploads drops every upload whose deadline has come.
func (f *FSM) dropExpiredUploads() {
	if len(f.uploads) == 0 {
		return
	}
	var gone []string
	for id, u := range f.uploads { // a set, whatever the order
		if u.deadline <= f.now {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		f.dropUpload(id)
	}
}

// uploadDeadline is the earliest upload deadline, NeverMs if none.
func (f *FSM) uploadDeadline() int64 {
	d := NeverMs
	for _, u := range f.uploads {
		d = min(d, u.deadline)
	}
	return d
}

// PendingUploads returns the uploads not yet completed, by ID.
func (f *FSM) PendingUploads() []PendingUpload {
	out := make([]PendingUpload, 0, len(f.uploads))
	for _, id := range sortedKeys(f.uploads) {
		u := f.uploads[id]
		out = append(out, PendingUpload{ID: id, Deadline: u.deadline, Chunks: u.have, Bytes: u.bytes})
	}
	return out
}

// ---- snapshot ----

// uploadView is the pending uploads in ID order, for a snapshot: copies of the records
// that share the chunk bytes.
func (f *FSM) uploadView() []upload {
	out := make([]upload, 0, len(f.uploads))
	for _, id := range sortedKeys(f.uploads) {
		out = append(out, *f.uploads[id])
	}
	return out
}

// appendUpload encodes one upload record of snapshot version 4.
func appendUpload(b []byte, u *upload) []byte {
	b = binenc.AppendString(b, u.id)
	b = binary.AppendVarint(b, u.deadline)
	b = binenc.AppendUvarint(b, uint64(len(u.chunks)))
	for _, ch := range u.chunks {
		b = binenc.AppendBool(b, ch != nil)
		if ch != nil {
			b = binenc.AppendBytes(b, ch)
		}
	}
	return b
}

// readUpload restores one upload record of snapshot version 4; last is the previous
// record's id (records are in id order).
func (f *FSM) readUpload(d *dec, last string) (string, error) {
	u := &upload{id: d.Str(), deadline: d.Varint()}
	n := d.Count(1)
	if d.Err() == nil && n > MaxUploadChunks {
		d.Failf("upload with %d chunks", n)
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		var ch []byte
		if d.Bool() {
			ch = d.Bytes()
			if d.Err() == nil && ch == nil {
				d.Failf("empty chunk")
			}
			u.have++
			u.bytes += int64(len(ch))
		}
		u.chunks = append(u.chunks, ch)
	}
	if err := d.end(); err != nil {
		return "", err
	}
	switch {
	case u.id == "" || u.id <= last:
		return "", fmt.Errorf("upload %q out of order", u.id)
	case u.have == 0 || u.chunks[len(u.chunks)-1] == nil:
		return "", fmt.Errorf("upload %q malformed", u.id)
	}
	f.uploads[u.id] = u
	f.bytes += u.bytes
	return u.id, nil
}
