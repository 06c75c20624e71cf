package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/fsm/rule"
	"github.com/quorumbus/quorumbus/internal/binenc"
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
	b = binenc.AppendUvarint(b, uint64(len(e.Cmds)))
	for _, c := range e.Cmds {
		b = appendCommand(b, c)
	}
	return b
}

// DecodeEntry decodes an Entry written by AppendEntry. Bad, unknown or truncated input
// yields an error wrapping ErrBadCommand; it never panics, and it allocates no more than
// a small multiple of len(b). Decoded messages do not alias b.
func DecodeEntry(b []byte) (*Entry, error) {
	return decodeEntry(newDec(b, nil))
}

// DecodeEntryPacked is DecodeEntry except that the payloads of decoded messages are
// copied into s's shared chunks rather than each into an allocation of its own: a stored
// 1 KiB body then costs 1 KiB, not the 1152 B size class of its own copy, and it does
// not keep the raft entry it came from (with its encoding overhead) reachable. A chunk is
// freed once the last payload in it is gone. s belongs to the caller's goroutine.
func DecodeEntryPacked(b []byte, s *Slab) (*Entry, error) {
	return decodeEntry(newDec(b, s))
}

func decodeEntry(d *dec) (*Entry, error) {
	if v := d.Byte(); d.Err() == nil && v != entryVersion {
		return nil, fmt.Errorf("%w: entry version %d", ErrBadCommand, v)
	}
	e := &Entry{Now: d.Varint()}
	n := d.Count(1)
	if n > 0 {
		e.Cmds = make([]Command, 0, n)
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		c := d.command()
		if d.Err() == nil {
			e.Cmds = append(e.Cmds, c)
		}
	}
	if d.Err() == nil && len(d.Rest()) != 0 {
		d.Failf("%d trailing bytes", len(d.Rest()))
	}
	if d.Err() != nil {
		return nil, d.Err()
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
		b = binenc.AppendString(b, c.SessionID)
		b = binenc.AppendString(b, c.Owner)
		b = binary.BigEndian.AppendUint32(b, c.Salt)
	case *ReceiveDeferred:
		b = appendTarget(b, c.Target)
		b = append(b, byte(c.Mode))
		b = appendSeqs(b, c.SeqNos)
		b = binenc.AppendString(b, c.SessionID)
		b = binenc.AppendString(b, c.Owner)
		b = binary.BigEndian.AppendUint32(b, c.Salt)
	case *Settle:
		b = appendTarget(b, c.Target)
		b = appendTokens(b, c.Tokens)
		b = append(b, byte(c.Disposition))
		b = appendProps(b, c.Properties)
		b = binenc.AppendString(b, c.Reason)
		b = binenc.AppendString(b, c.Description)
		b = binenc.AppendString(b, c.SessionID)
		b = binenc.AppendString(b, c.Owner)
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
		b = binenc.AppendBytes(b, c.State)
	case *CancelScheduled:
		b = appendSeqs(b, c.SeqNos)
	case *Tick:
	case *UpdateEntity:
		b = appendConfig(b, &c.Config)
	case *Purge:
		b = appendTarget(b, c.Target)
	case *Touch:
		b = appendTarget(b, c.Target)
	case *DeleteMessages:
		b = appendTarget(b, c.Target)
		b = binary.AppendVarint(b, int64(c.Max))
		b = binary.AppendVarint(b, c.Before)
		b = binenc.AppendString(b, c.SessionID)
		b = binary.AppendVarint(b, c.From)
	case *Txn:
		b = binenc.AppendUvarint(b, uint64(len(c.Cmds)))
		for _, sc := range c.Cmds {
			b = appendCommand(b, sc)
		}
	case *TxnPrepare:
		b = binenc.AppendString(b, c.ID)
		b = binenc.AppendUvarint(b, uint64(c.Coordinator))
		b = binary.AppendVarint(b, c.Deadline)
		b = binenc.AppendUvarint(b, uint64(len(c.Cmds)))
		for _, sc := range c.Cmds {
			b = appendCommand(b, sc)
		}
	case *TxnDecide:
		b = binenc.AppendString(b, c.ID)
		b = binenc.AppendBool(b, c.Commit)
		b = binary.AppendVarint(b, c.Deadline)
		b = binenc.AppendUvarint(b, uint64(len(c.Participants)))
		for _, g := range c.Participants {
			b = binenc.AppendUvarint(b, uint64(g))
		}
	case *TxnCommit:
		b = binenc.AppendString(b, c.ID)
	case *TxnAbort:
		b = binenc.AppendString(b, c.ID)
	case *TxnForget:
		b = binenc.AppendString(b, c.ID)
	case *BodyChunk:
		b = binenc.AppendString(b, c.Upload)
		b = binenc.AppendUvarint(b, uint64(c.Index))
		b = binary.AppendVarint(b, c.Deadline)
		b = binenc.AppendBytes(b, c.Data)
	case *EnqueueUploaded:
		b = binenc.AppendBool(b, c.Schedule)
		b = appendMessages(b, c.Messages)
		b = binenc.AppendUvarint(b, uint64(len(c.Bodies)))
		for _, r := range c.Bodies {
			b = binenc.AppendString(b, r.Upload)
			b = binenc.AppendUvarint(b, uint64(r.Chunks))
		}
	default:
		panic(fmt.Sprintf("fsm: AppendEntry: unknown command %T", c))
	}
	return b
}

func (d *dec) command() Command {
	op := Op(d.Byte())
	if d.Err() != nil {
		return nil
	}
	switch op {
	case OpEnqueue:
		return &Enqueue{Messages: d.messages()}
	case OpSchedule:
		return &Schedule{Messages: d.messages()}
	case OpReceive:
		c := &Receive{Target: d.target(), Mode: d.mode()}
		c.Max = int32(d.Varint())
		c.SessionID, c.Owner = d.Str(), d.Str()
		c.Salt = d.Uint32()
		return c
	case OpReceiveDeferred:
		c := &ReceiveDeferred{Target: d.target(), Mode: d.mode(), SeqNos: d.seqs()}
		c.SessionID, c.Owner = d.Str(), d.Str()
		c.Salt = d.Uint32()
		return c
	case OpSettle:
		c := &Settle{Target: d.target(), Tokens: d.tokens()}
		c.Disposition = Disposition(d.Byte())
		if d.Err() == nil && (c.Disposition < Complete || c.Disposition > Release) {
			d.Failf("disposition %d", c.Disposition)
		}
		c.Properties = d.props()
		c.Reason, c.Description, c.SessionID, c.Owner = d.Str(), d.Str(), d.Str(), d.Str()
		return c
	case OpRenewLock:
		return &RenewLock{Target: d.target(), Tokens: d.tokens()}
	case OpAcceptSession:
		c := &AcceptSession{Target: d.target()}
		c.SessionID, c.Owner = d.Str(), d.Str()
		return c
	case OpReleaseSession:
		c := &ReleaseSession{Target: d.target()}
		c.SessionID, c.Owner = d.Str(), d.Str()
		return c
	case OpRenewSession:
		c := &RenewSession{Target: d.target()}
		c.SessionID, c.Owner = d.Str(), d.Str()
		return c
	case OpSetSessionState:
		c := &SetSessionState{Target: d.target()}
		c.SessionID, c.Owner = d.Str(), d.Str()
		c.State = d.Bytes()
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
	case OpDeleteMessages:
		c := &DeleteMessages{Target: d.target()}
		c.Max = int32(d.Varint())
		c.Before = d.Varint()
		c.SessionID = d.Str()
		c.From = d.Varint()
		return c
	case OpTxn:
		if d.depth > 0 {
			d.Failf("nested transaction")
			return nil
		}
		return &Txn{Cmds: d.nested()}
	case OpTxnPrepare:
		if d.depth > 0 {
			d.Failf("nested transaction")
			return nil
		}
		c := &TxnPrepare{ID: d.Str(), Coordinator: d.Uvarint32("group id"), Deadline: d.Varint()}
		c.Cmds = d.nested()
		return c
	case OpTxnDecide:
		c := &TxnDecide{ID: d.Str(), Commit: d.Bool(), Deadline: d.Varint()}
		n := d.Count(1)
		for i := 0; i < n && d.Err() == nil; i++ {
			c.Participants = append(c.Participants, d.Uvarint32("group id"))
		}
		return c
	case OpTxnCommit:
		return &TxnCommit{ID: d.Str()}
	case OpTxnAbort:
		return &TxnAbort{ID: d.Str()}
	case OpTxnForget:
		return &TxnForget{ID: d.Str()}
	case OpBodyChunk:
		return &BodyChunk{Upload: d.Str(), Index: d.Uvarint32("group id"), Deadline: d.Varint(), Data: d.Bytes()}
	case OpEnqueueUploaded:
		c := &EnqueueUploaded{Schedule: d.Bool(), Messages: d.messages()}
		n := d.Count(2)
		for i := 0; i < n && d.Err() == nil; i++ {
			c.Bodies = append(c.Bodies, UploadRef{Upload: d.Str(), Chunks: d.Uvarint32("group id")})
		}
		return c
	}
	d.Failf("unknown opcode %d", op)
	return nil
}

// nested decodes the counted list of commands inside a transaction.
func (d *dec) nested() []Command {
	n := d.Count(1)
	cmds := make([]Command, 0, n)
	d.depth++
	for i := 0; i < n && d.Err() == nil; i++ {
		if sc := d.command(); d.Err() == nil {
			cmds = append(cmds, sc)
		}
	}
	d.depth--
	return cmds
}

// ---- field encoders ----

func appendTarget(b []byte, t Target) []byte {
	b = binenc.AppendString(b, t.Sub)
	return binenc.AppendBool(b, t.DLQ)
}

func appendSessionCmd(b []byte, t Target, id, owner string) []byte {
	b = appendTarget(b, t)
	b = binenc.AppendString(b, id)
	return binenc.AppendString(b, owner)
}

func appendSeqs(b []byte, s []int64) []byte {
	b = binenc.AppendUvarint(b, uint64(len(s)))
	for _, v := range s {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func appendTokens(b []byte, ts []LockToken) []byte {
	b = binenc.AppendUvarint(b, uint64(len(ts)))
	for i := range ts {
		b = append(b, ts[i][:]...)
	}
	return b
}

func appendValue(b []byte, v rule.Value) []byte {
	b = append(b, byte(v.Kind))
	b = binenc.AppendUvarint(b, v.N)
	return binenc.AppendString(b, v.S)
}

func appendProps(b []byte, ps []rule.Property) []byte {
	b = binenc.AppendUvarint(b, uint64(len(ps)))
	for i := range ps {
		b = binenc.AppendString(b, ps[i].Key)
		b = appendValue(b, ps[i].Value)
	}
	return b
}

func appendMessages(b []byte, ms []*Message) []byte {
	b = binenc.AppendUvarint(b, uint64(len(ms)))
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
		b = binenc.AppendString(b, s)
	}
	for _, v := range [...]int64{p.TimeToLive, p.ScheduledEnqueueTime, p.SequenceNumber, p.EnqueuedTime, p.Size} {
		b = binary.AppendVarint(b, v)
	}
	return appendProps(b, p.App)
}

func appendMessage(b []byte, m *Message) []byte {
	b = appendProperties(b, &m.Properties)
	b = binenc.AppendBytes(b, m.Payload)
	b = binary.AppendVarint(b, m.ExpiresAt)
	b = binary.AppendVarint(b, int64(m.DeliveryCount))
	b = append(b, byte(m.State))
	b = append(b, m.LockToken[:]...)
	b = binary.AppendVarint(b, m.LockedUntil)
	if m.DeadLetter != nil {
		b = append(b, 1)
		b = binenc.AppendString(b, m.DeadLetter.Reason)
		b = binenc.AppendString(b, m.DeadLetter.Description)
		b = binenc.AppendString(b, m.DeadLetter.Source)
	} else {
		b = append(b, 0)
	}
	return binenc.AppendBool(b, m.Modified)
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
	b = binenc.AppendString(b, s.Name)
	b = append(b, byte(s.Filter.Kind))
	b = binenc.AppendString(b, s.Filter.SQL)
	b = appendProps(b, s.Filter.Parameters)
	c := &s.Filter.Correlation
	for _, v := range [...]string{c.CorrelationID, c.MessageID, c.To, c.ReplyTo, c.Subject, c.SessionID,
		c.ReplyToSessionID, c.ContentType} {
		b = binenc.AppendString(b, v)
	}
	b = appendProps(b, c.Properties)
	b = binenc.AppendString(b, s.Action.SQL)
	return appendProps(b, s.Action.Parameters)
}

func appendConfig(b []byte, c *Config) []byte {
	b = append(b, byte(c.Kind))
	b = binary.BigEndian.AppendUint32(b, c.GroupID)
	b = appendQueueConfig(b, &c.Queue)
	b = binenc.AppendBool(b, c.RequiresDuplicateDetection)
	b = binary.AppendVarint(b, c.DuplicateWindowMs)
	b = binary.AppendVarint(b, c.MaxSizeBytes)
	b = binary.AppendVarint(b, c.MaxMessageSizeBytes)
	b = binenc.AppendUvarint(b, uint64(len(c.Subscriptions)))
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		b = binenc.AppendString(b, s.Name)
		b = appendQueueConfig(b, &s.Queue)
		b = binenc.AppendUvarint(b, uint64(len(s.Rules)))
		for j := range s.Rules {
			b = appendSpec(b, &s.Rules[j])
		}
	}
	return b
}

// ---- decoder ----

// dec reads fields (binenc's encoding) from its input, consuming it. The first error
// sticks and wraps ErrBadCommand; later reads return zero values, so callers check
// d.Err() once.
type dec struct {
	binenc.Decoder
	depth int // > 0 inside a Txn, which may not nest
	// slab, when set, receives copies of payloads (DecodeEntryPacked, snapshot restore).
	slab *Slab
}

func newDec(b []byte, slab *Slab) *dec {
	return &dec{Decoder: binenc.NewDecoder(b, ErrBadCommand), slab: slab}
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

// payload is bytes, or with a slab a copy packed into the slab (capacity capped, so an
// append never writes into a neighbour).
func (d *dec) payload() []byte {
	if d.slab == nil {
		return d.Bytes()
	}
	n := d.Count(1)
	if n == 0 {
		return nil
	}
	r := d.Raw(n)
	if r == nil {
		return nil
	}
	return d.slab.copy(r)
}

func (d *dec) target() Target {
	return Target{Sub: d.Str(), DLQ: d.Bool()}
}

func (d *dec) mode() ReceiveMode {
	m := ReceiveMode(d.Byte())
	if m > ReceiveAndDelete {
		d.Failf("receive mode %d", m)
	}
	return m
}

func (d *dec) seqs() []int64 {
	n := d.Count(1)
	if n == 0 {
		return nil
	}
	s := make([]int64, n)
	for i := range s {
		s[i] = d.Varint()
	}
	return s
}

func (d *dec) tokens() []LockToken {
	n := d.Count(16)
	if n == 0 {
		return nil
	}
	ts := make([]LockToken, n)
	for i := range ts {
		copy(ts[i][:], d.Raw(16))
	}
	return ts
}

func (d *dec) value() rule.Value {
	v := rule.Value{Kind: rule.Kind(d.Byte())}
	if d.Err() == nil && !v.Kind.Valid() {
		d.Failf("value kind %d", v.Kind)
	}
	v.N = d.Uvarint()
	v.S = d.Str()
	return v
}

func (d *dec) props() []rule.Property {
	n := d.Count(4)
	if n == 0 {
		return nil
	}
	ps := make([]rule.Property, n)
	for i := range ps {
		ps[i].Key = d.Str()
		ps[i].Value = d.value()
	}
	return ps
}

func (d *dec) properties(p *rule.Properties) {
	p.MessageID, p.CorrelationID, p.To = d.Str(), d.Str(), d.Str()
	p.ReplyTo, p.Subject, p.SessionID = d.Str(), d.Str(), d.Str()
	p.ReplyToSessionID, p.ContentType, p.PartitionKey = d.Str(), d.Str(), d.Str()
	p.TimeToLive, p.ScheduledEnqueueTime, p.SequenceNumber = d.Varint(), d.Varint(), d.Varint()
	p.EnqueuedTime, p.Size = d.Varint(), d.Varint()
	p.App = d.props()
}

func (d *dec) message(m *Message) {
	d.properties(&m.Properties)
	m.Payload = d.payload()
	m.ExpiresAt = d.Varint()
	m.DeliveryCount = int32(d.Varint())
	m.State = MessageState(d.Byte())
	if d.Err() == nil && m.State > StateScheduled {
		d.Failf("message state %d", m.State)
	}
	copy(m.LockToken[:], d.Raw(16))
	m.LockedUntil = d.Varint()
	if d.Bool() {
		m.DeadLetter = &DeadLetterInfo{Reason: d.Str(), Description: d.Str(), Source: d.Str()}
	}
	m.Modified = d.Bool()
}

// minMessageBytes is the smallest encoding of a Message, for count checks.
const minMessageBytes = 9 + 5 + 1 + 1 + 3 + 16 + 1 + 2

func (d *dec) messages() []*Message {
	n := d.Count(minMessageBytes)
	if n == 0 {
		return nil
	}
	// One allocation for the command's messages, not one each: they come and go
	// together (the fsm keeps none of them, only what it copies out).
	block := make([]Message, n)
	ms := make([]*Message, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		d.message(&block[i])
		ms = append(ms, &block[i])
	}
	return ms
}

func (d *dec) queueConfig(q *QueueConfig) {
	q.LockDurationMs = d.Varint()
	q.MaxDeliveryCount = int32(d.Varint())
	q.DefaultTTLMs = d.Varint()
	fl := d.Byte()
	if fl > 7 {
		d.Failf("queue flags %#x", fl)
	}
	q.DeadLetterOnExpiration = fl&1 != 0
	q.DeadLetterOnFilterErrors = fl&2 != 0
	q.RequiresSession = fl&4 != 0
	q.Status = Status(d.Byte())
	if d.Err() == nil && q.Status > StatusReceiveDisabled {
		d.Failf("status %d", q.Status)
	}
}

func (d *dec) spec(s *rule.Spec) {
	s.Name = d.Str()
	s.Filter.Kind = rule.FilterKind(d.Byte())
	if d.Err() == nil && s.Filter.Kind > rule.FilterCorrelation {
		d.Failf("filter kind %d", s.Filter.Kind)
	}
	s.Filter.SQL = d.Str()
	s.Filter.Parameters = d.props()
	c := &s.Filter.Correlation
	c.CorrelationID, c.MessageID, c.To, c.ReplyTo = d.Str(), d.Str(), d.Str(), d.Str()
	c.Subject, c.SessionID, c.ReplyToSessionID, c.ContentType = d.Str(), d.Str(), d.Str(), d.Str()
	c.Properties = d.props()
	s.Action.SQL = d.Str()
	s.Action.Parameters = d.props()
}

func (d *dec) config(c *Config) {
	c.Kind = EntityKind(d.Byte())
	if d.Err() == nil && c.Kind > KindTopic { // 0 is allowed: UpdateEntity keeps the kind
		d.Failf("entity kind %d", c.Kind)
	}
	c.GroupID = d.Uint32()
	d.queueConfig(&c.Queue)
	c.RequiresDuplicateDetection = d.Bool()
	c.DuplicateWindowMs = d.Varint()
	c.MaxSizeBytes = d.Varint()
	c.MaxMessageSizeBytes = d.Varint()
	n := d.Count(7)
	if n == 0 {
		return
	}
	c.Subscriptions = make([]SubscriptionConfig, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		s := &c.Subscriptions[i]
		s.Name = d.Str()
		d.queueConfig(&s.Queue)
		m := d.Count(15)
		if m > 0 {
			s.Rules = make([]rule.Spec, m)
			for j := 0; j < m && d.Err() == nil; j++ {
				d.spec(&s.Rules[j])
			}
		}
	}
}
