package amqp

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

// Message section descriptors (part 3 §3.2).
const (
	secHeader        = 0x70
	secDeliveryAnn   = 0x71
	secMessageAnn    = 0x72
	secProperties    = 0x73
	secAppProperties = 0x74
	secData          = 0x75
	secSequence      = 0x76
	secValue         = 0x77
	secFooter        = 0x78
)

// Batch message format: the body's data sections are complete messages
// (protocol.md §5, message_batch.go).
const batchMessageFormat = 0x80013700

// sections are the raw spans of an encoded message. Each non-nil field is the
// complete section encoding (descriptor included). rest holds the body
// sections, footer and anything unknown, passed through untouched; dataSections
// lists the values of its data sections (which splitSections has checked), for
// the one caller that needs them, so that a message costs no slice of them.
type sections struct {
	header, deliveryAnn, messageAnn, properties, appProps []byte
	rest                                                  []byte
	value                                                 []byte // raw amqp-value, if any
}

func splitSections(b []byte) (sections, error) {
	var s sections
	restStart := -1
	off := 0
	for off < len(b) {
		code, _, val, n, err := encoding.SplitDescribed(b[off:])
		if err != nil {
			return s, fmt.Errorf("%w: message section at %d: %v", ErrBadRequest, off, err)
		}
		raw := b[off : off+n]
		switch {
		case restStart < 0 && code == secHeader:
			s.header = raw
		case restStart < 0 && code == secDeliveryAnn:
			s.deliveryAnn = raw
		case restStart < 0 && code == secMessageAnn:
			s.messageAnn = raw
		case restStart < 0 && code == secProperties:
			s.properties = raw
		case restStart < 0 && code == secAppProperties:
			s.appProps = raw
		default:
			if restStart < 0 {
				restStart = off
			}
			switch code {
			case secData:
				if _, err := encoding.ReadBytes(val); err != nil {
					return s, fmt.Errorf("%w: data section: %v", ErrBadRequest, err)
				}
			case secValue:
				s.value = val
			}
		}
		off += n
	}
	if restStart >= 0 {
		s.rest = b[restStart:]
	}
	return s, nil
}

// dataSections returns the values of the data sections in rest, a sections.rest
// that splitSections accepted.
func dataSections(rest []byte) ([][]byte, error) {
	var bodies [][]byte
	for off := 0; off < len(rest); {
		code, _, val, n, err := encoding.SplitDescribed(rest[off:])
		if err != nil {
			return nil, fmt.Errorf("%w: message section at %d: %v", ErrBadRequest, off, err)
		}
		if code == secData {
			p, err := encoding.ReadBytes(val)
			if err != nil {
				return nil, fmt.Errorf("%w: data section: %v", ErrBadRequest, err)
			}
			bodies = append(bodies, p)
		}
		off += n
	}
	return bodies, nil
}

// parseMessage parses a client's encoded message into a Message. Delivery
// annotations stay in Raw: Service Bus hands a client's delivery annotations to the
// receiver, next to its own x-opt-lock-token.
func parseMessage(b []byte) (*Message, sections, error) {
	s, err := splitSections(b)
	if err != nil {
		return nil, s, err
	}
	m := &Message{Raw: b}
	if s.header != nil {
		f, err := sectionFields(s.header)
		if err != nil {
			return nil, s, err
		}
		f.Next() // durable
		f.Next() // priority
		if raw, _ := f.Next(); !encoding.IsNull(raw) {
			ttl, err := encoding.ReadUint(raw)
			if err != nil {
				return nil, s, fmt.Errorf("%w: header.ttl: %v", ErrBadRequest, err)
			}
			m.TimeToLive = time.Duration(ttl) * time.Millisecond
		}
	}
	if s.properties != nil {
		f, err := sectionFields(s.properties)
		if err != nil {
			return nil, s, err
		}
		var vals [13][]byte
		for i := range vals {
			raw, err := f.Next()
			if err != nil {
				return nil, s, fmt.Errorf("%w: properties: %v", ErrBadRequest, err)
			}
			vals[i] = raw
		}
		str := func(raw []byte) string {
			if encoding.IsNull(raw) || (raw[0]&0x0f) != 0x01 && (raw[0]&0x0f) != 0x03 { // str8/32, sym8/32
				return ""
			}
			v, _ := encoding.ReadString(raw)
			return v
		}
		m.MessageID = str(vals[0])
		m.To = str(vals[2])
		m.Subject = str(vals[3])
		m.ReplyTo = str(vals[4])
		m.CorrelationID = str(vals[5])
		m.ContentType = str(vals[6])
		m.SessionID = str(vals[10])
		if m.SessionID == "" && !encoding.IsNull(vals[10]) && (vals[10][0]&0x0f) == 0x01 {
			m.SessionID = BlankSessionID // group-id "": a session of its own
		}
		m.ReplyToSessionID = str(vals[12])
	}
	if s.messageAnn != nil {
		ma, err := sectionMap(s.messageAnn)
		if err != nil {
			return nil, s, err
		}
		for _, e := range ma {
			k, ok := e.Key.(Symbol)
			if !ok {
				continue
			}
			switch k {
			case "x-opt-partition-key":
				m.PartitionKey, _ = e.Value.(string)
			case "x-opt-via-partition-key":
				m.ViaPartitionKey, _ = e.Value.(string)
			case "x-opt-scheduled-enqueue-time":
				switch t := e.Value.(type) {
				case Timestamp:
					m.ScheduledEnqueueTime = t.Time()
				case int64:
					m.ScheduledEnqueueTime = time.UnixMilli(t).UTC()
				}
			}
		}
	}
	if s.appProps != nil {
		ap, err := sectionMap(s.appProps)
		if err != nil {
			return nil, s, err
		}
		m.ApplicationProperties = make([]Property, 0, len(ap))
		for _, e := range ap {
			k, ok := e.Key.(string)
			if !ok {
				if sym, isSym := e.Key.(Symbol); isSym {
					k = string(sym)
				} else {
					return nil, s, fmt.Errorf("%w: application-properties key of type %T", ErrBadRequest, e.Key)
				}
			}
			m.ApplicationProperties = append(m.ApplicationProperties, Property{Key: k, Value: e.Value})
		}
	}
	return m, s, nil
}

func sectionFields(raw []byte) (encoding.Fields, error) {
	_, _, val, _, err := encoding.SplitDescribed(raw)
	if err != nil {
		return encoding.Fields{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	f, err := encoding.ListFields(val)
	if err != nil {
		return f, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return f, nil
}

func sectionMap(raw []byte) (Map, error) {
	_, _, val, _, err := encoding.SplitDescribed(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	v, _, err := encoding.Decode(val)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	switch m := v.(type) {
	case nil:
		return nil, nil
	case Map:
		return m, nil
	}
	return nil, fmt.Errorf("%w: section is %T, not a map", ErrBadRequest, v)
}

// parseClientMessage parses a message a client sends (to an entity, in a batch
// or to schedule): parseMessage, then the limits of checkMessageLimits, then a
// message-id for one without.
func parseClientMessage(cfg *Config, b []byte) (*Message, error) {
	m, s, err := parseMessage(b)
	if err == nil && cfg != nil {
		err = checkMessageLimits(cfg, m, s)
	}
	if err == nil {
		err = ensureMessageID(m, s)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// splitBatch returns the inner messages of a batch envelope: each data
// section of the body is one complete encoded message.
func splitBatch(b []byte) ([]*Message, error) { return splitClientBatch(nil, b) }

// splitClientBatch is splitBatch with the limits of parseClientMessage (none
// for a nil cfg).
func splitClientBatch(cfg *Config, b []byte) ([]*Message, error) {
	s, err := splitSections(b)
	if err != nil {
		return nil, err
	}
	bodies, err := dataSections(s.rest)
	if err != nil {
		return nil, err
	}
	if len(bodies) == 0 {
		return nil, fmt.Errorf("%w: batch without data sections", ErrBadRequest)
	}
	out := make([]*Message, 0, len(bodies))
	for _, body := range bodies {
		m, err := parseClientMessage(cfg, body)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// dotnetTag returns the lock token in .NET GUID byte order, which the SDK
// converts back (message.go: lockTokenFromMessageTag).
func dotnetTag(u UUID) []byte {
	t := make([]byte, 16)
	copy(t, u[:])
	t[0], t[1], t[2], t[3] = u[3], u[2], u[1], u[0]
	t[4], t[5] = u[5], u[4]
	t[6], t[7] = u[7], u[6]
	return t
}

// brokerAnnotations are message-annotation keys the broker owns; a client's
// values for them are replaced on delivery.
var brokerAnnotations = map[Symbol]bool{
	"x-opt-sequence-number":         true,
	"x-opt-enqueued-time":           true,
	"x-opt-locked-until":            true,
	"x-opt-enqueue-sequence-number": true,
	"x-opt-message-state":           true,
	"x-opt-deadletter-source":       true,
	"x-opt-lock-token":              true,
}

// encodeDelivery builds the wire message for d: a new header, delivery- and
// message-annotations, the client's properties, application-properties
// (re-encoded only when modified or dead-lettered) and the untouched body.
// withLock adds the lock token and locked-until (peek-lock and
// receive-deferred).
// withoutBody is raw without its body sections and footer (everything from the first
// body section on): what a peek with omit-message-body answers, properties, annotations
// and sequence number only. A message that does not parse stays as it is.
func withoutBody(raw []byte) []byte {
	s, err := splitSections(raw)
	if err != nil {
		return raw
	}
	n := len(raw) - len(s.rest)
	return raw[:n:n]
}

func encodeDelivery(d *Delivery, withLock bool) ([]byte, error) {
	s, err := splitSections(d.Message.Raw)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(d.Message.Raw)+256)

	// header (part 3 §3.2.1): durable, priority, ttl, first-acquirer, delivery-count.
	var durable, priority []byte
	if s.header != nil {
		f, err := sectionFields(s.header)
		if err == nil {
			durable, _ = f.Next()
			priority, _ = f.Next()
		}
	}
	out = encoding.AppendDescriptor(out, secHeader)
	out, lo := encoding.ListStart(out)
	out = appendRawOrNull(out, durable)
	out = appendRawOrNull(out, priority)
	if ttl := effectiveTTL(d); ttl > 0 {
		out = encoding.AppendUint(out, uint32(ttl/time.Millisecond))
	} else {
		out = encoding.AppendNull(out)
	}
	out = encoding.AppendBool(out, false) // first-acquirer: Service Bus always sends false
	dc := uint32(0)
	if d.DeliveryCount > 0 {
		dc = d.DeliveryCount - 1
	}
	out = encoding.AppendUint(out, dc)
	out = encoding.ListEnd(out, lo, 5)

	// delivery-annotations: the client's entries, then the lock token.
	var da Map
	if s.deliveryAnn != nil {
		if da, err = sectionMap(s.deliveryAnn); err != nil {
			return nil, err
		}
	}
	if withLock || len(da) > 0 {
		out = encoding.AppendDescriptor(out, secDeliveryAnn)
		var mo int
		out, mo = encoding.MapStart(out)
		n := 0
		for _, e := range da {
			if k, ok := e.Key.(Symbol); ok && k == "x-opt-lock-token" {
				continue
			}
			if out, err = encoding.Append(out, e.Key); err != nil {
				return nil, err
			}
			if out, err = encoding.Append(out, e.Value); err != nil {
				return nil, err
			}
			n += 2
		}
		if withLock {
			out = encoding.AppendSymbol(out, "x-opt-lock-token")
			out = encoding.AppendUUID(out, d.LockToken)
			n += 2
		}
		out = encoding.MapEnd(out, mo, n)
	}

	// message-annotations: client entries except broker-owned keys, then ours.
	out = encoding.AppendDescriptor(out, secMessageAnn)
	out, mo := encoding.MapStart(out)
	n := 0
	if s.messageAnn != nil {
		ma, err := sectionMap(s.messageAnn)
		if err != nil {
			return nil, err
		}
		for _, e := range ma {
			if k, ok := e.Key.(Symbol); ok && brokerAnnotations[k] {
				continue
			}
			if out, err = encoding.Append(out, e.Key); err != nil {
				return nil, err
			}
			if out, err = encoding.Append(out, e.Value); err != nil {
				return nil, err
			}
			n += 2
		}
	}
	out = encoding.AppendSymbol(out, "x-opt-sequence-number")
	out = encoding.AppendLong(out, d.SequenceNumber)
	// No x-opt-enqueue-sequence-number: Service Bus sets it only on messages that moved
	// between entities, and SDK tests compare the annotations of a received message.
	out = encoding.AppendSymbol(out, "x-opt-enqueued-time")
	out = encoding.AppendTimestamp(out, encoding.TimestampOf(d.EnqueuedTime))
	n += 4
	if withLock && !d.LockedUntil.IsZero() {
		out = encoding.AppendSymbol(out, "x-opt-locked-until")
		out = encoding.AppendTimestamp(out, encoding.TimestampOf(d.LockedUntil))
		n += 2
	}
	if d.State != StateActive {
		out = encoding.AppendSymbol(out, "x-opt-message-state")
		out = encoding.AppendInt(out, int32(d.State))
		n += 2
	}
	if d.DeadLetterSource != "" {
		out = encoding.AppendSymbol(out, "x-opt-deadletter-source")
		out = encoding.AppendString(out, d.DeadLetterSource)
		n += 2
	}
	out = encoding.MapEnd(out, mo, n)

	if s.properties != nil {
		out = append(out, s.properties...)
	} else {
		out = append(encoding.AppendDescriptor(out, secProperties), 0x45)
	}

	if d.PropertiesModified || d.DeadLettered || d.DeadLetterReason != "" {
		props := d.Message.ApplicationProperties
		if d.PropertiesModified {
			props = d.Properties
		}
		out = encoding.AppendDescriptor(out, secAppProperties)
		var ao int
		out, ao = encoding.MapStart(out)
		n := 0
		for _, p := range props {
			if d.DeadLettered && (p.Key == "DeadLetterReason" || p.Key == "DeadLetterErrorDescription") {
				continue
			}
			out = encoding.AppendString(out, p.Key)
			if out, err = encoding.Append(out, p.Value); err != nil {
				return nil, err
			}
			n += 2
		}
		if d.DeadLettered || d.DeadLetterReason != "" {
			out = encoding.AppendString(out, "DeadLetterReason")
			out = encoding.AppendString(out, d.DeadLetterReason)
			out = encoding.AppendString(out, "DeadLetterErrorDescription")
			out = encoding.AppendString(out, d.DeadLetterDescription)
			n += 4
		}
		out = encoding.MapEnd(out, ao, n)
	} else if s.appProps != nil {
		out = append(out, s.appProps...)
	}
	out = append(out, s.rest...)
	return out, nil
}

func appendRawOrNull(b, raw []byte) []byte {
	if encoding.IsNull(raw) {
		return encoding.AppendNull(b)
	}
	return append(b, raw...)
}

// effectiveTTL is what the SDK needs in header.ttl so that ExpiresAt =
// EnqueuedTime + ttl (message.go: newReceivedMessage).
func effectiveTTL(d *Delivery) time.Duration {
	if !d.ExpiresAt.IsZero() && !d.EnqueuedTime.IsZero() {
		ttl := d.ExpiresAt.Sub(d.EnqueuedTime)
		if ttl > 0 && ttl/time.Millisecond <= 0xffffffff {
			return ttl
		}
		return 0
	}
	return d.Message.TimeToLive
}

// propertiesFromMap converts a properties-to-modify map (string or symbol keys).
func propertiesFromMap(m Map) []Property {
	if len(m) == 0 {
		return nil
	}
	out := make([]Property, 0, len(m))
	for _, e := range m {
		switch k := e.Key.(type) {
		case string:
			out = append(out, Property{Key: k, Value: e.Value})
		case Symbol:
			out = append(out, Property{Key: string(k), Value: e.Value})
		}
	}
	return out
}

// Reencode rebuilds m.Raw after the broker changed m's parsed fields (for
// example a subscription rule action that SETs sys.Label or application
// properties, S-TOP-1). The properties section takes MessageID, To,
// Subject, ReplyTo, CorrelationID, ContentType, SessionID and
// ReplyToSessionID (an empty string clears the field); application-properties
// takes ApplicationProperties. A field still equal to what was parsed keeps
// its original encoding (so a uuid or ulong message-id survives), and every
// other section is copied untouched.
func (m *Message) Reencode() error {
	s, err := splitSections(m.Raw)
	if err != nil {
		return err
	}
	orig, _, err := parseMessage(m.Raw)
	if err != nil {
		return err
	}
	out := make([]byte, 0, len(m.Raw)+64)
	out = append(out, s.header...)
	out = append(out, s.deliveryAnn...)
	out = append(out, s.messageAnn...)

	vals, err := propertyFields(s)
	if err != nil {
		return err
	}
	set := func(i int, newV, oldV string, sym bool) {
		if newV == oldV {
			return // unchanged: keep the original bytes (even a non-string id)
		}
		switch {
		case newV == "":
			vals[i] = nil
		case sym:
			vals[i] = encoding.AppendSymbol(nil, Symbol(newV))
		default:
			vals[i] = encoding.AppendString(nil, newV)
		}
	}
	set(0, m.MessageID, orig.MessageID, false)
	set(2, m.To, orig.To, false)
	set(3, m.Subject, orig.Subject, false)
	set(4, m.ReplyTo, orig.ReplyTo, false)
	set(5, m.CorrelationID, orig.CorrelationID, false)
	set(6, m.ContentType, orig.ContentType, true)
	set(10, m.SessionID, orig.SessionID, false)
	if m.SessionID == BlankSessionID && orig.SessionID != BlankSessionID {
		vals[10] = encoding.AppendString(nil, "") // set to the empty string (an action's SET sys.SessionId = '')
	}
	set(12, m.ReplyToSessionID, orig.ReplyToSessionID, false)
	out = appendProperties(out, vals, s.properties != nil)

	if len(m.ApplicationProperties) > 0 {
		out = encoding.AppendDescriptor(out, secAppProperties)
		var ao int
		out, ao = encoding.MapStart(out)
		for _, p := range m.ApplicationProperties {
			out = encoding.AppendString(out, p.Key)
			if out, err = encoding.Append(out, p.Value); err != nil {
				return fmt.Errorf("%w: application property %q: %v", ErrBadRequest, p.Key, err)
			}
		}
		out = encoding.MapEnd(out, ao, 2*len(m.ApplicationProperties))
	}
	out = append(out, s.rest...)
	m.Raw = out
	return nil
}

// propertyFields returns the 13 fields of the properties section (part 3 §3.2.4) as
// encoded, absent ones nil.
func propertyFields(s sections) ([13][]byte, error) {
	var vals [13][]byte
	if s.properties == nil {
		return vals, nil
	}
	f, err := sectionFields(s.properties)
	if err != nil {
		return vals, err
	}
	for i := range vals {
		if vals[i], err = f.Next(); err != nil {
			return vals, fmt.Errorf("%w: properties: %v", ErrBadRequest, err)
		}
	}
	return vals, nil
}

// appendProperties appends a properties section holding vals, without trailing nulls;
// with none left it appends an empty one only when always is set.
func appendProperties(out []byte, vals [13][]byte, always bool) []byte {
	last := -1
	for i := range vals {
		if !encoding.IsNull(vals[i]) {
			last = i
		}
	}
	if last < 0 && !always {
		return out
	}
	out = encoding.AppendDescriptor(out, secProperties)
	out, lo := encoding.ListStart(out)
	for i := 0; i <= last; i++ {
		out = appendRawOrNull(out, vals[i])
	}
	return encoding.ListEnd(out, lo, last+1)
}

// ensureMessageID gives a message sent without a message-id one, as Service Bus does
// (the SDKs show every received message with a MessageId): 32 lower-case hex digits
// from a random UUID. A message-id of any type the client set is kept. s is
// splitSections(m.Raw), which the caller has already.
func ensureMessageID(m *Message, s sections) error {
	vals, err := propertyFields(s)
	if err != nil || !encoding.IsNull(vals[0]) {
		return err
	}
	u := newUUID()
	var hexID [2 * len(u)]byte
	hex.Encode(hexID[:], u[:])
	m.MessageID = string(hexID[:])
	var enc [2 + len(hexID)]byte // str8: code, length, the digits
	vals[0] = encoding.AppendString(enc[:0], m.MessageID)
	out := make([]byte, 0, len(m.Raw)+48)
	out = append(out, s.header...)
	out = append(out, s.deliveryAnn...)
	out = append(out, s.messageAnn...)
	out = appendProperties(out, vals, true)
	out = append(out, s.appProps...)
	out = append(out, s.rest...)
	m.Raw = out
	return nil
}

// BlankSessionID stands, inside the broker, for the session whose id is the empty
// string: Service Bus treats SessionId "" as a valid session, distinct from "no
// session" (the SDK's TestSessionReceiver_blankSessionIDs), while the Backend uses ""
// for "none" and "next available". The message keeps its group-id "" on the wire;
// only the broker's view of it uses this id, and every answer maps it back.
// The Backend's rules see it as the empty string (fsm/rule.BlankSessionID has the same
// value; cmd/internal/bridge tests that they agree).
const BlankSessionID = "\x00"

// internalSessionID maps a session id a client named to the broker's.
func internalSessionID(id string) string {
	if id == "" {
		return BlankSessionID
	}
	return id
}

// wireSessionID maps the broker's session id back to what clients see.
func wireSessionID(id string) string {
	if id == BlankSessionID {
		return ""
	}
	return id
}
