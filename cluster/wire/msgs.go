package wire

import (
	"fmt"
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Method names a call a node serves its peers. Append only.
type Method uint8

// Methods.
const (
	MethodCall        Method = iota + 1 // Call → Reply: one operation on a partition group led here
	MethodMulti                         // Multi → MultiReply: independent calls, run concurrently
	MethodWaitChange                    // Wait → Empty: returns when the partition may have changed
	MethodMetaApply                     // MetaApply → MetaApplied: a metadata command, on the metadata leader
	MethodGroupStatus                   // GroupIDs → GroupStatus
	MethodTransfer                      // Transfer → Done: hand a group's leadership to To
	MethodHandOver                      // Transfer → Done: hand over every group led here (drain)
	MethodRemoveNode                    // Transfer → Done: remove node To (on the metadata leader)
	MethodDigests                       // Empty → Digests
	MethodMetaDigest                    // Empty → MetaDigest
	MethodCancel                        // CancelCall → Cancelled: cancel a long-poll whose caller gave up
	MethodBackup                        // Backup → BackupReply: one step of a partition's backup or restore (backup.go)

	methodEnd
)

var methodNames = [...]string{"", "Call", "Multi", "WaitChange", "MetaApply", "GroupStatus", "Transfer", "HandOver",
	"RemoveNode", "Digests", "MetaDigest", "Cancel", "Backup"}

// String is the method's name, as version 1 (net/rpc) named it.
func (m Method) String() string {
	if m > 0 && m < methodEnd {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// Message is what travels as the body of a call or of its reply. Errors inside it
// travel through ec.
type Message interface {
	AppendTo(b []byte, ec ErrorCodec) []byte
	DecodeFrom(d *Decoder, ec ErrorCodec)
}

// Call is one operation on one partition group.
type Call struct {
	Group   uint32
	Timeout time.Duration // what is left of the caller's deadline; 0: none
	// ID names a long-polling call (a receive or accept) so that its caller can cancel
	// it when it gives up (MethodCancel); 0 for other calls.
	ID  uint64
	Req Request
}

func (c *Call) AppendTo(b []byte, _ ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(c.Group))
	b = binenc.AppendVarint(b, int64(c.Timeout))
	b = binenc.AppendUvarint(b, c.ID)
	return AppendRequest(b, c.Req)
}

func (c *Call) DecodeFrom(d *Decoder, _ ErrorCodec) {
	c.Group, c.Timeout, c.ID = d.Uvarint32("uint32"), d.duration(), d.Uvarint()
	c.Req = DecodeRequest(d)
}

// Reply is a Call's outcome.
type Reply struct {
	Result
	Err error
}

func (r *Reply) AppendTo(b []byte, ec ErrorCodec) []byte {
	b = appendError(b, ec.ToWire(r.Err))
	return AppendResult(b, &r.Result, ec)
}

func (r *Reply) DecodeFrom(d *Decoder, ec ErrorCodec) {
	if e := d.error(); e != nil {
		r.Err = ec.FromWire(e)
	}
	r.Result = DecodeResult(d, ec)
}

// Multi is a batch of independent calls (forwarded sends to one peer).
type Multi struct{ Calls []Call }

func (m *Multi) AppendTo(b []byte, ec ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(len(m.Calls)))
	for i := range m.Calls {
		b = m.Calls[i].AppendTo(b, ec)
	}
	return b
}

func (m *Multi) DecodeFrom(d *Decoder, ec ErrorCodec) {
	m.Calls = make([]Call, d.Count(4))
	for i := range m.Calls {
		m.Calls[i].DecodeFrom(d, ec)
	}
}

// MultiReply holds a Multi's outcomes, in order.
type MultiReply struct{ Replies []Reply }

func (m *MultiReply) AppendTo(b []byte, ec ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(len(m.Replies)))
	for i := range m.Replies {
		b = m.Replies[i].AppendTo(b, ec)
	}
	return b
}

func (m *MultiReply) DecodeFrom(d *Decoder, ec ErrorCodec) {
	m.Replies = make([]Reply, d.Count(2))
	for i := range m.Replies {
		m.Replies[i].DecodeFrom(d, ec)
	}
}

// Wait asks the leader of Group to return when the partition may have a message for
// Receive (or, with Accept, an available session of Receive.Target), at most Timeout.
type Wait struct {
	Group   uint32
	Receive fsm.Receive
	Accept  bool
	Timeout time.Duration
}

func (w *Wait) AppendTo(b []byte, _ ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(w.Group))
	b = appendEntry(b, &w.Receive)
	b = binenc.AppendBool(b, w.Accept)
	return binenc.AppendVarint(b, int64(w.Timeout))
}

func (w *Wait) DecodeFrom(d *Decoder, _ ErrorCodec) {
	w.Group = d.Uvarint32("uint32")
	if c := command[*fsm.Receive](d); c != nil {
		w.Receive = *c
	}
	w.Accept, w.Timeout = d.Bool(), d.duration()
}

// Empty is a body with nothing in it.
type Empty struct{}

func (Empty) AppendTo(b []byte, _ ErrorCodec) []byte { return b }
func (Empty) DecodeFrom(*Decoder, ErrorCodec)        {}

// MetaApply forwards a metadata command to the metadata leader.
type MetaApply struct {
	Entry   []byte // meta.EncodeEntry of the command (Now 0: the leader stamps it)
	Timeout time.Duration
}

func (m *MetaApply) AppendTo(b []byte, _ ErrorCodec) []byte {
	return binenc.AppendVarint(appendBytes(b, m.Entry), int64(m.Timeout))
}

func (m *MetaApply) DecodeFrom(d *Decoder, _ ErrorCodec) {
	m.Entry, m.Timeout = d.bytes(), d.duration()
}

// MetaApplied is its outcome and the index at which it committed, for read-your-writes.
type MetaApplied struct {
	Err   error
	Index uint64
}

func (m *MetaApplied) AppendTo(b []byte, ec ErrorCodec) []byte {
	return binenc.AppendUvarint(appendError(b, ec.ToWire(m.Err)), m.Index)
}

func (m *MetaApplied) DecodeFrom(d *Decoder, ec ErrorCodec) {
	if e := d.error(); e != nil {
		m.Err = ec.FromWire(e)
	}
	m.Index = d.Uvarint()
}

// GroupIDs names partition groups (none: all those hosted by the callee).
type GroupIDs struct{ IDs []uint32 }

func (g *GroupIDs) AppendTo(b []byte, _ ErrorCodec) []byte { return appendUint32s(b, g.IDs) }
func (g *GroupIDs) DecodeFrom(d *Decoder, _ ErrorCodec)    { g.IDs = d.uint32s() }

// GroupInfo is what a node knows of one partition group it hosts.
type GroupInfo struct {
	Group     uint32
	Leader    string
	IsLeader  bool
	LastIndex uint64
	Applied   uint64
	Servers   []Server
}

// Server is one member of a group's Raft configuration.
type Server struct {
	ID    string
	Voter bool
}

// GroupStatus is what a node knows of the groups it was asked about.
type GroupStatus struct{ Groups []GroupInfo }

func (g *GroupStatus) AppendTo(b []byte, _ ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(len(g.Groups)))
	for i := range g.Groups {
		gi := &g.Groups[i]
		b = binenc.AppendUvarint(b, uint64(gi.Group))
		b = binenc.AppendString(b, gi.Leader)
		b = binenc.AppendBool(b, gi.IsLeader)
		b = binenc.AppendUvarint(b, gi.LastIndex)
		b = binenc.AppendUvarint(b, gi.Applied)
		b = binenc.AppendUvarint(b, uint64(len(gi.Servers)))
		for _, s := range gi.Servers {
			b = binenc.AppendBool(binenc.AppendString(b, s.ID), s.Voter)
		}
	}
	return b
}

func (g *GroupStatus) DecodeFrom(d *Decoder, _ ErrorCodec) {
	n := d.Count(7)
	g.Groups = make([]GroupInfo, n)
	for i := range g.Groups {
		gi := &g.Groups[i]
		gi.Group, gi.Leader, gi.IsLeader, gi.LastIndex, gi.Applied = d.Uvarint32("uint32"), d.Str(), d.Bool(), d.Uvarint(), d.Uvarint()
		if m := d.Count(2); m > 0 {
			gi.Servers = make([]Server, m)
			for j := range gi.Servers {
				gi.Servers[j] = Server{ID: d.Str(), Voter: d.Bool()}
			}
		}
	}
}

// Transfer asks for a leadership transfer of Group to To (MethodTransfer), a drain
// (MethodHandOver) or the removal of node To (MethodRemoveNode).
type Transfer struct {
	Group   uint32
	To      string
	Timeout time.Duration
}

func (t *Transfer) AppendTo(b []byte, _ ErrorCodec) []byte {
	b = binenc.AppendUvarint(b, uint64(t.Group))
	b = binenc.AppendString(b, t.To)
	return binenc.AppendVarint(b, int64(t.Timeout))
}

func (t *Transfer) DecodeFrom(d *Decoder, _ ErrorCodec) {
	t.Group, t.To, t.Timeout = d.Uvarint32("uint32"), d.Str(), d.duration()
}

// Done is the outcome of an operation that returns only an error.
type Done struct{ Err error }

func (o *Done) AppendTo(b []byte, ec ErrorCodec) []byte { return appendError(b, ec.ToWire(o.Err)) }
func (o *Done) DecodeFrom(d *Decoder, ec ErrorCodec) {
	if e := d.error(); e != nil {
		o.Err = ec.FromWire(e)
	}
}

// Digests are the state digests (hex SHA-256) of the partition replicas a node hosts.
type Digests struct{ ByGroup map[uint32]string }

func (g *Digests) AppendTo(b []byte, _ ErrorCodec) []byte {
	ids := make([]uint32, 0, len(g.ByGroup))
	for id := range g.ByGroup {
		ids = append(ids, id)
	}
	slices.Sort(ids) // one encoding per value
	b = binenc.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binenc.AppendString(binenc.AppendUvarint(b, uint64(id)), g.ByGroup[id])
	}
	return b
}

func (g *Digests) DecodeFrom(d *Decoder, _ ErrorCodec) {
	n := d.Count(2)
	g.ByGroup = make(map[uint32]string, n)
	for range n {
		id := d.Uvarint32("uint32")
		g.ByGroup[id] = d.Str()
	}
}

// MetaDigest is a node's metadata state digest (hex SHA-256) and the last metadata log
// index its Raft applied.
type MetaDigest struct {
	Digest  string
	Applied uint64
}

func (m *MetaDigest) AppendTo(b []byte, _ ErrorCodec) []byte {
	return binenc.AppendUvarint(binenc.AppendString(b, m.Digest), m.Applied)
}

func (m *MetaDigest) DecodeFrom(d *Decoder, _ ErrorCodec) {
	m.Digest, m.Applied = d.Str(), d.Uvarint()
}

// CancelCall cancels the long-poll whose Call.ID is ID.
type CancelCall struct{ ID uint64 }

func (c *CancelCall) AppendTo(b []byte, _ ErrorCodec) []byte { return binenc.AppendUvarint(b, c.ID) }
func (c *CancelCall) DecodeFrom(d *Decoder, _ ErrorCodec)    { c.ID = d.Uvarint() }

// Cancelled reports whether a long-poll was found and cancelled.
type Cancelled struct{ OK bool }

func (c *Cancelled) AppendTo(b []byte, _ ErrorCodec) []byte { return binenc.AppendBool(b, c.OK) }
func (c *Cancelled) DecodeFrom(d *Decoder, _ ErrorCodec)    { c.OK = d.Bool() }

// Encode writes m as a whole body; Decode reads one, refusing trailing bytes.
func Encode(m Message, ec ErrorCodec) []byte { return m.AppendTo(nil, ec) }

// Decode reads a body written by Encode into m.
func Decode(b []byte, m Message, ec ErrorCodec) error {
	d := NewDecoder(b)
	m.DecodeFrom(d, ec)
	return d.Done()
}
