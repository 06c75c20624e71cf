package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// entryVersion is the first byte of every encoded Entry. A release that changes the
// layout of an existing command bumps it and keeps decoding the older versions (P3).
const entryVersion = 1

// AppendEntry appends the binary encoding of e to dst: the version byte, the time, the
// command count, then each command as its opcode and fields. Integers are varints,
// strings and byte slices are length-prefixed.
func AppendEntry(dst []byte, e *Entry) []byte {
	b := append(dst, entryVersion)
	b = binary.AppendVarint(b, e.Now)
	b = appendUvarint(b, uint64(len(e.Cmds)))
	for _, c := range e.Cmds {
		b = appendCommand(b, c)
	}
	return b
}

// DecodeEntry decodes an Entry written by AppendEntry. Bad, unknown or truncated input
// yields an error wrapping ErrBadCommand; it never panics, and it allocates no more than
// a small multiple of len(b). Decoded messages do not alias b.
func DecodeEntry(b []byte) (*Entry, error) {
	return decodeEntry(&dec{b: b})
}

// DecodeEntryPacked is DecodeEntry except that the payloads of decoded messages are
// copied into s's shared chunks rather than each into an allocation of its own: a stored
// 1 KiB body then costs 1 KiB, not the 1152 B size class of its own copy, and it does
// not keep the raft entry it came from (with its encoding overhead) reachable. A chunk is
// freed once the last payload in it is gone. s belongs to the caller's goroutine.
func DecodeEntryPacked(b []byte, s *Slab) (*Entry, error) {
	return decodeEntry(&dec{b: b, slab: s})
}

func decodeEntry(d *dec) (*Entry, error) {
	if v := d.byte(); d.err == nil && v != entryVersion {
		return nil, fmt.Errorf("%w: entry version %d", ErrBadCommand, v)
	}
	e := &Entry{Now: d.varint()}
	n := d.count(1)
	if n > 0 {
		e.Cmds = make([]Command, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		c := d.command()
		if d.err == nil {
			e.Cmds = append(e.Cmds, c)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.failf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

func appendCommand(b []byte, c Command) []byte {
	b = append(b, byte(c.op()))
	switch c := c.(type) {
	case *Enqueue:
		b = appendMessages(b, c.Messages)
	case *Schedule:
		b = appendMessages(b, c.Messages)
	case *Receive:
		b = appendTarget(b, c.Target)
		b = append(b, byte(c.Mode))
		b = binary.AppendVarint(b, int64(c.Max))
		b = appendString(b, c.SessionID)
		b = appendString(b, c.Owner)
		b = binary.BigEndian.AppendUint32(b, c.Salt)
	case *ReceiveDeferred:
		b = appendTarget(b, c.Target)
		b = append(b, byte(c.Mode))
		b = appendSeqs(b, c.SeqNos)
		b = appendString(b, c.SessionID)
		b = appendString(b, c.Owner)
		b = binary.BigEndian.AppendUint32(b, c.Salt)
	case *Settle:
		b = appendTarget(b, c.Target)
		b = appendTokens(b, c.Tokens)
		b = append(b, byte(c.Disposition))
		b = appendProps(b, c.Properties)
		b = appendString(b, c.Reason)
		b = appendString(b, c.Description)
		b = appendString(b, c.SessionID)
		b = appendString(b, c.Owner)
	case *RenewLock:
		b = appendTarget(b, c.Target)
		b = appendTokens(b, c.Tokens)
	case *AcceptSession:
		b = appendSessionCmd(b, c.Target, c.SessionID, c.Owner)
	case *ReleaseSession:
		b = appendSessionCmd(b, c.Target, c.SessionID, c.Owner)
	case *RenewSession:
		b = appendSessionCmd(b, c.Target, c.SessionID, c.Owner)
	case *SetSessionState:
		b = appendSessionCmd(b, c.Target, c.SessionID, c.Owner)
		b = appendBytes(b, c.State)
	case *CancelScheduled:
		b = appendSeqs(b, c.SeqNos)
	case *Tick:
	case *UpdateEntity:
		b = appendConfig(b, &c.Config)
	case *Purge:
		b = appendTarget(b, c.Target)
	case *Touch:
		b = appendTarget(b, c.Target)
	case *Txn:
		b = appendUvarint(b, uint64(len(c.Cmds)))
		for _, sc := range c.Cmds {
			b = appendCommand(b, sc)
		}
	case *TxnPrepare:
		b = appendString(b, c.ID)
		b = appendUvarint(b, uint64(c.Coordinator))
		b = binary.AppendVarint(b, c.Deadline)
		b = appendUvarint(b, uint64(len(c.Cmds)))
		for _, sc := range c.Cmds {
			b = appendCommand(b, sc)
		}
	case *TxnDecide:
		b = appendString(b, c.ID)
		b = appendBool(b, c.Commit)
		b = binary.AppendVarint(b, c.Deadline)
		b = appendUvarint(b, uint64(len(c.Participants)))
		for _, g := range c.Participants {
			b = appendUvarint(b, uint64(g))
		}
	case *TxnCommit:
		b = appendString(b, c.ID)
	case *TxnAbort:
		b = appendString(b, c.ID)
	case *TxnForget:
		b = appendString(b, c.ID)
	case *BodyChunk:
		b = appendString(b, c.Upload)
		b = appendUvarint(b, uint64(c.Index))
		b = binary.AppendVarint(b, c.Deadline)
		b = appendBytes(b, c.Data)
	case *EnqueueUploaded:
		b = appendBool(b, c.Schedule)
		b = appendMessages(b, c.Messages)
		b = appendUvarint(b, uint64(len(c.Bodies)))
		for _, r := range c.Bodies {
			b = appendString(b, r.Upload)
			b = appendUvarint(b, uint64(r.Chunks))
		}
	default:
		panic(fmt.Sprintf("fsm: AppendEntry: unknown command %T", c))
	}
	return b
}

func (d *dec) command() Command {
	op := Op(d.byte())
	if d.err != nil {
		return nil
	}
	switch op {
	case OpEnqueue:
		return &Enqueue{Messages: d.messages()}
	case OpSchedule:
		return &Schedule{Messages: d.messages()}
	case OpReceive:
		c := &Receive{Target: d.target(), Mode: d.mode()}
		c.Max = int32(d.varint())
		c.SessionID, c.Owner = d.string(), d.string()
		c.Salt = d.uint32()
		return c
	case OpReceiveDeferred:
		c := &ReceiveDeferred{Target: d.target(), Mode: d.mode(), SeqNos: d.seqs()}
		c.SessionID, c.Owner = d.string(), d.string()
		c.Salt = d.uint32()
		return c
	case OpSettle:
		c := &Settle{Target: d.target(), Tokens: d.tokens()}
		c.Disposition = Disposition(d.byte())
		if d.err == nil && (c.Disposition < Complete || c.Disposition > Release) {
			d.failf("disposition %d", c.Disposition)
		}
		c.Properties = d.props()
		c.Reason, c.Description, c.SessionID, c.Owner = d.string(), d.string(), d.string(), d.string()
		return c
	case OpRenewLock:
		return &RenewLock{Target: d.target(), Tokens: d.tokens()}
	case OpAcceptSession:
		c := &AcceptSession{Target: d.target()}
		c.SessionID, c.Owner = d.string(), d.string()
		return c
	case OpReleaseSession:
		c := &ReleaseSession{Target: d.target()}
		c.SessionID, c.Owner = d.string(), d.string()
		return c
	case OpRenewSession:
		c := &RenewSession{Target: d.target()}
		c.SessionID, c.Owner = d.string(), d.string()
		return c
	case OpSetSessionState:
		c := &SetSessionState{Target: d.target()}
		c.SessionID, c.Owner = d.string(), d.string()
		c.State = d.bytes()
		return c
	case OpCancelScheduled:
		return &CancelScheduled{SeqNos: d.seqs()}
	case OpTick:
		return &Tick{}
	case OpUpdateEntity:
		c := &UpdateEntity{}
		d.config(&c.Config)
		return c
	case OpPurge:
		return &Purge{Target: d.target()}
	case OpTouch:
		return &Touch{Target: d.target()}
	case OpTxn:
		if d.depth > 0 {
			d.failf("nested transaction")
			return nil
		}
		return &Txn{Cmds: d.nested()}
	case OpTxnPrepare:
		if d.depth > 0 {
			d.failf("nested transaction")
			return nil
		}
		c := &TxnPrepare{ID: d.string(), Coordinator: d.uint32v(), Deadline: d.varint()}
		c.Cmds = d.nested()
		return c
	case OpTxnDecide:
		c := &TxnDecide{ID: d.string(), Commit: d.bool(), Deadline: d.varint()}
		n := d.count(1)
		for i := 0; i < n && d.err == nil; i++ {
			c.Participants = append(c.Participants, d.uint32v())
		}
		return c
	case OpTxnCommit:
		return &TxnCommit{ID: d.string()}
	case OpTxnAbort:
		return &TxnAbort{ID: d.string()}
	case OpTxnForget:
		return &TxnForget{ID: d.string()}
	case OpBodyChunk:
		return &BodyChunk{Upload: d.string(), Index: d.uint32v(), Deadline: d.varint(), Data: d.bytes()}
	case OpEnqueueUploaded:
		c := &EnqueueUploaded{Schedule: d.bool(), Messages: d.messages()}
		n := d.count(2)
		for i := 0; i < n && d.err == nil; i++ {
			c.Bodies = append(c.Bodies, UploadRef{Upload: d.string(), Chunks: d.uint32v()})
		}
		return c
	}
	d.failf("unknown opcode %d", op)
	return nil
}

// nested decodes the counted list of commands inside a transaction.
func (d *dec) nested() []Command {
	n := d.count(1)
	cmds := make([]Command, 0, n)
	d.depth++
	for i := 0; i < n && d.err == nil; i++ {
		if sc := d.command(); d.err == nil {
			cmds = append(cmds, sc)
		}
	}
	d.depth--
	return cmds
}

// ---- field encoders ----

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = appendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendTarget(b []byte, t Target) []byte {
	b = appendString(b, t.Sub)
	return appendBool(b, t.DLQ)
}

func appendSessionCmd(b []byte, t Target, id, owner string) []byte {
	b = appendTarget(b, t)
	b = appendString(b, id)
	return appendString(b, owner)
}

func appendSeqs(b []byte, s []int64) []byte {
	b = appendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func appendTokens(b []byte, ts []LockToken) []byte {
	b = appendUvarint(b, uint64(len(ts)))
	for i := range ts {
		b = append(b, ts[i][:]...)
	}
	return b
}

func appendValue(b []byte, v rule.Value) []byte {
	b = append(b, byte(v.Kind))
	b = appendUvarint(b, v.N)
	return appendString(b, v.S)
}

func appendProps(b []byte, ps []rule.Property) []byte {
	b = appendUvarint(b, uint64(len(ps)))
	for i := range ps {
		b = appendString(b, ps[i].Key)
		b = appendValue(b, ps[i].Value)
	}
	return b
}

func appendMessages(b []byte, ms []*Message) []byte {
	b = appendUvarint(b, uint64(len(ms)))
	for _, m := range ms {
		if m == nil {
			m = &Message{}
		}
		b = appendMessage(b, m)
	}
	return b
}

func appendProperties(b []byte, p *rule.Properties) []byte {
	for _, s := range [...]string{p.MessageID, p.CorrelationID, p.To, p.ReplyTo, p.Subject, p.SessionID,
		p.ReplyToSessionID, p.ContentType, p.PartitionKey} {
		b = appendString(b, s)
	}
	for _, v := range [...]int64{p.TimeToLive, p.ScheduledEnqueueTime, p.SequenceNumber, p.EnqueuedTime, p.Size} {
		b = binary.AppendVarint(b, v)
	}
	return appendProps(b, p.App)
}

func appendMessage(b []byte, m *Message) []byte {
	b = appendProperties(b, &m.Properties)
	b = appendBytes(b, m.Payload)
	b = binary.AppendVarint(b, m.ExpiresAt)
	b = binary.AppendVarint(b, int64(m.DeliveryCount))
	b = append(b, byte(m.State))
	b = append(b, m.LockToken[:]...)
	b = binary.AppendVarint(b, m.LockedUntil)
	if m.DeadLetter != nil {
		b = append(b, 1)
		b = appendString(b, m.DeadLetter.Reason)
		b = appendString(b, m.DeadLetter.Description)
		b = appendString(b, m.DeadLetter.Source)
	} else {
		b = append(b, 0)
	}
	return appendBool(b, m.Modified)
}

func appendQueueConfig(b []byte, q *QueueConfig) []byte {
	b = binary.AppendVarint(b, q.LockDurationMs)
	b = binary.AppendVarint(b, int64(q.MaxDeliveryCount))
	b = binary.AppendVarint(b, q.DefaultTTLMs)
	var fl byte
	if q.DeadLetterOnExpiration {
		fl |= 1
	}
	if q.DeadLetterOnFilterErrors {
		fl |= 2
	}
	if q.RequiresSession {
		fl |= 4
	}
	return append(b, fl, byte(q.Status))
}

func appendSpec(b []byte, s *rule.Spec) []byte {
	b = appendString(b, s.Name)
	b = append(b, byte(s.Filter.Kind))
	b = appendString(b, s.Filter.SQL)
	b = appendProps(b, s.Filter.Parameters)
	c := &s.Filter.Correlation
	for _, v := range [...]string{c.CorrelationID, c.MessageID, c.To, c.ReplyTo, c.Subject, c.SessionID,
		c.ReplyToSessionID, c.ContentType} {
		b = appendString(b, v)
	}
	b = appendProps(b, c.Properties)
	b = appendString(b, s.Action.SQL)
	return appendProps(b, s.Action.Parameters)
}

func appendConfig(b []byte, c *Config) []byte {
	b = append(b, byte(c.Kind))
	b = binary.BigEndian.AppendUint32(b, c.GroupID)
	b = appendQueueConfig(b, &c.Queue)
	b = appendBool(b, c.RequiresDuplicateDetection)
	b = binary.AppendVarint(b, c.DuplicateWindowMs)
	b = binary.AppendVarint(b, c.MaxSizeBytes)
	b = binary.AppendVarint(b, c.MaxMessageSizeBytes)
	b = appendUvarint(b, uint64(len(c.Subscriptions)))
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		b = appendString(b, s.Name)
		b = appendQueueConfig(b, &s.Queue)
		b = appendUvarint(b, uint64(len(s.Rules)))
		for j := range s.Rules {
			b = appendSpec(b, &s.Rules[j])
		}
	}
	return b
}

// ---- decoder ----

// dec reads fields from b, consuming it. The first error sticks; later reads return zero
// values, so callers check d.err once.
type dec struct {
	b     []byte
	err   error
	depth int // > 0 inside a Txn, which may not nest
	// slab, when set, receives copies of payloads (DecodeEntryPacked, snapshot restore).
	slab *Slab
}

// Slab packs copies of small payloads into shared 64 KiB chunks (DecodeEntryPacked). Its
// zero value is ready to use; it is not safe for concurrent use. A payload larger than
// 4 KiB gets an allocation of its own, where size-class rounding costs little.
type Slab struct{ chunk []byte }

const slabChunk = 64 << 10

func (s *Slab) copy(b []byte) []byte {
	if len(b) > slabChunk/16 {
		return append([]byte(nil), b...)
	}
	if cap(s.chunk)-len(s.chunk) < len(b) {
		s.chunk = make([]byte, 0, slabChunk)
	}
	i := len(s.chunk)
	s.chunk = append(s.chunk, b...)
	return s.chunk[i:len(s.chunk):len(s.chunk)]
}

func (d *dec) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrBadCommand}, args...)...)
	}
}

func (d *dec) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.failf("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) bool() bool {
	v := d.byte()
	if v > 1 {
		d.failf("bad bool %d", v)
	}
	return v == 1
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
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

func (d *dec) uint32() uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 4 {
		d.failf("truncated")
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

// count reads an element count and checks that that many elements of at least min bytes
// each fit in what is left, so a corrupt count cannot make us allocate.
// uint32v reads a uvarint that must fit in 32 bits (a partition group id).
func (d *dec) uint32v() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.failf("group id %d out of range", v)
		return 0
	}
	return uint32(v)
}

func (d *dec) count(min int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)/min) {
		d.failf("count %d exceeds input", v)
		return 0
	}
	return int(v)
}

func (d *dec) raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.failf("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) string() string {
	n := d.count(1)
	return string(d.raw(n))
}

// bytes returns a copy, nil for an empty field.
func (d *dec) bytes() []byte {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	r := d.raw(n)
	if r == nil {
		return nil
	}
	return append([]byte(nil), r...)
}

// payload is bytes, or with a slab a copy packed into the slab (capacity capped, so an
// append never writes into a neighbour).
func (d *dec) payload() []byte {
	if d.slab == nil {
		return d.bytes()
	}
	n := d.count(1)
	if n == 0 {
		return nil
	}
	r := d.raw(n)
	if r == nil {
		return nil
	}
	return d.slab.copy(r)
}

func (d *dec) target() Target {
	return Target{Sub: d.string(), DLQ: d.bool()}
}

func (d *dec) mode() ReceiveMode {
	m := ReceiveMode(d.byte())
	if m > ReceiveAndDelete {
		d.failf("receive mode %d", m)
	}
	return m
}

func (d *dec) seqs() []int64 {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	s := make([]int64, n)
	for i := range s {
		s[i] = d.varint()
	}
	return s
}

func (d *dec) tokens() []LockToken {
	n := d.count(16)
	if n == 0 {
		return nil
	}
	ts := make([]LockToken, n)
	for i := range ts {
		copy(ts[i][:], d.raw(16))
	}
	return ts
}

func (d *dec) value() rule.Value {
	v := rule.Value{Kind: rule.Kind(d.byte())}
	if d.err == nil && !v.Kind.Valid() {
		d.failf("value kind %d", v.Kind)
	}
	v.N = d.uvarint()
	v.S = d.string()
	return v
}

func (d *dec) props() []rule.Property {
	n := d.count(4)
	if n == 0 {
		return nil
	}
	ps := make([]rule.Property, n)
	for i := range ps {
		ps[i].Key = d.string()
		ps[i].Value = d.value()
	}
	return ps
}

func (d *dec) properties(p *rule.Properties) {
	p.MessageID, p.CorrelationID, p.To = d.string(), d.string(), d.string()
	p.ReplyTo, p.Subject, p.SessionID = d.string(), d.string(), d.string()
	p.ReplyToSessionID, p.ContentType, p.PartitionKey = d.string(), d.string(), d.string()
	p.TimeToLive, p.ScheduledEnqueueTime, p.SequenceNumber = d.varint(), d.varint(), d.varint()
	p.EnqueuedTime, p.Size = d.varint(), d.varint()
	p.App = d.props()
}

func (d *dec) message(m *Message) {
	d.properties(&m.Properties)
	m.Payload = d.payload()
	m.ExpiresAt = d.varint()
	m.DeliveryCount = int32(d.varint())
	m.State = MessageState(d.byte())
	if d.err == nil && m.State > StateScheduled {
		d.failf("message state %d", m.State)
	}
	copy(m.LockToken[:], d.raw(16))
	m.LockedUntil = d.varint()
	if d.bool() {
		m.DeadLetter = &DeadLetterInfo{Reason: d.string(), Description: d.string(), Source: d.string()}
	}
	m.Modified = d.bool()
}

// minMessageBytes is the smallest encoding of a Message, for count checks.
const minMessageBytes = 9 + 5 + 1 + 1 + 3 + 16 + 1 + 2

func (d *dec) messages() []*Message {
	n := d.count(minMessageBytes)
	if n == 0 {
		return nil
	}
	// One allocation for the command's messages, not one each: they come and go
	// together (the fsm keeps none of them, only what it copies out).
	block := make([]Message, n)
	ms := make([]*Message, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		d.message(&block[i])
		ms = append(ms, &block[i])
	}
	return ms
}

func (d *dec) queueConfig(q *QueueConfig) {
	q.LockDurationMs = d.varint()
	q.MaxDeliveryCount = int32(d.varint())
	q.DefaultTTLMs = d.varint()
	fl := d.byte()
	if fl > 7 {
		d.failf("queue flags %#x", fl)
	}
	q.DeadLetterOnExpiration = fl&1 != 0
	q.DeadLetterOnFilterErrors = fl&2 != 0
	q.RequiresSession = fl&4 != 0
	q.Status = Status(d.byte())
	if d.err == nil && q.Status > StatusReceiveDisabled {
		d.failf("status %d", q.Status)
	}
}

func (d *dec) spec(s *rule.Spec) {
	s.Name = d.string()
	s.Filter.Kind = rule.FilterKind(d.byte())
	if d.err == nil && s.Filter.Kind > rule.FilterCorrelation {
		d.failf("filter kind %d", s.Filter.Kind)
	}
	s.Filter.SQL = d.string()
	s.Filter.Parameters = d.props()
	c := &s.Filter.Correlation
	c.CorrelationID, c.MessageID, c.To, c.ReplyTo = d.string(), d.string(), d.string(), d.string()
	c.Subject, c.SessionID, c.ReplyToSessionID, c.ContentType = d.string(), d.string(), d.string(), d.string()
	c.Properties = d.props()
	s.Action.SQL = d.string()
	s.Action.Parameters = d.props()
}

func (d *dec) config(c *Config) {
	c.Kind = EntityKind(d.byte())
	if d.err == nil && c.Kind > KindTopic { // 0 is allowed: UpdateEntity keeps the kind
		d.failf("entity kind %d", c.Kind)
	}
	c.GroupID = d.uint32()
	d.queueConfig(&c.Queue)
	c.RequiresDuplicateDetection = d.bool()
	c.DuplicateWindowMs = d.varint()
	c.MaxSizeBytes = d.varint()
	c.MaxMessageSizeBytes = d.varint()
	n := d.count(7)
	if n == 0 {
		return
	}
	c.Subscriptions = make([]SubscriptionConfig, n)
	for i := 0; i < n && d.err == nil; i++ {
		s := &c.Subscriptions[i]
		s.Name = d.string()
		d.queueConfig(&s.Queue)
		m := d.count(15)
		if m > 0 {
			s.Rules = make([]rule.Spec, m)
			for j := 0; j < m && d.err == nil; j++ {
				d.spec(&s.Rules[j])
			}
		}
	}
}
