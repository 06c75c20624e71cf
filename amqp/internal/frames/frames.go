// Package frames is the AMQP 1.0 framing layer (part 2 "Transport" and part 5
// "Security"): protocol headers, the 8-byte frame header, every performative,
// delivery states and SASL frames. It is pure (no I/O beyond an io.Reader
// wrapper) and stdlib-only apart from amqp/internal/encoding.
package frames

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

// Protocol headers (part 2 §2.2, part 5 §5.2.1, §5.3.1).
var (
	ProtoAMQP = [8]byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
	ProtoTLS  = [8]byte{'A', 'M', 'Q', 'P', 2, 1, 0, 0}
	ProtoSASL = [8]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
)

// Frame types (part 2 §2.3.1: 0x00 AMQP, part 5 §5.3.2: 0x01 SASL).
const (
	TypeAMQP uint8 = 0
	TypeSASL uint8 = 1
)

// HeaderSize is the fixed frame header size: SIZE(4) DOFF(1) TYPE(1) CHANNEL(2).
const HeaderSize = 8

// MinMaxFrameSize is the smallest max-frame-size a peer may impose (part 2 §2.7.1).
const MinMaxFrameSize = 512

// Errors from the frame layer.
var (
	ErrFrameTooLarge = errors.New("frames: frame exceeds max-frame-size")
	ErrMalformed     = errors.New("frames: malformed frame")
	ErrUnknown       = errors.New("frames: unknown performative")
)

// Descriptor codes (part 2 §2.7, §2.8, part 3 §3.4, part 5 §5.3.3).
const (
	CodeOpen        = 0x10
	CodeBegin       = 0x11
	CodeAttach      = 0x12
	CodeFlow        = 0x13
	CodeTransfer    = 0x14
	CodeDisposition = 0x15
	CodeDetach      = 0x16
	CodeEnd         = 0x17
	CodeClose       = 0x18
	CodeError       = 0x1d
	CodeReceived    = 0x23
	CodeAccepted    = 0x24
	CodeRejected    = 0x25
	CodeReleased    = 0x26
	CodeModified    = 0x27
	CodeSource      = 0x28
	CodeTarget      = 0x29

	// Transactions (part 4 §4.5).
	CodeCoordinator        = 0x30
	CodeDeclare            = 0x31
	CodeDischarge          = 0x32
	CodeDeclared           = 0x33
	CodeTransactionalState = 0x34

	CodeSASLMechanisms = 0x40
	CodeSASLInit       = 0x41
	CodeSASLChallenge  = 0x42
	CodeSASLResponse   = 0x43
	CodeSASLOutcome    = 0x44
)

// Role of a link endpoint: part 2 §2.8.1 `<type name="role" class="restricted" source="boolean">`.
type Role bool

// Roles.
const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

func (r Role) String() string {
	if r {
		return "receiver"
	}
	return "sender"
}

// Settlement modes: part 2 §2.8.2 sender-settle-mode, §2.8.3 receiver-settle-mode.
const (
	SndUnsettled uint8 = 0
	SndSettled   uint8 = 1
	SndMixed     uint8 = 2
	RcvFirst     uint8 = 0
	RcvSecond    uint8 = 1
)

// FrameHeader is part 2 §2.3.1: SIZE, DOFF (in 4-byte words), TYPE, channel.
type FrameHeader struct {
	Size       uint32
	DataOffset uint8
	Type       uint8
	Channel    uint16
}

// ParseHeader reads the 8-byte frame header and validates SIZE and DOFF.
func ParseHeader(b []byte) (FrameHeader, error) {
	if len(b) < HeaderSize {
		return FrameHeader{}, ErrMalformed
	}
	h := FrameHeader{
		Size:       binary.BigEndian.Uint32(b),
		DataOffset: b[4],
		Type:       b[5],
		Channel:    binary.BigEndian.Uint16(b[6:]),
	}
	if h.DataOffset < 2 || uint32(h.DataOffset)*4 > h.Size {
		return h, fmt.Errorf("%w: doff %d size %d", ErrMalformed, h.DataOffset, h.Size)
	}
	return h, nil
}

// Body is a performative or SASL frame body.
type Body interface {
	// Append appends the described-list encoding of the body.
	Append(b []byte) []byte
	fmt.Stringer
}

// AppendFrame appends a complete frame (header, body, payload). Use a nil
// body for an empty (heartbeat) frame.
func AppendFrame(b []byte, typ uint8, channel uint16, body Body, payload []byte) []byte {
	off := len(b)
	b = append(b, 0, 0, 0, 0, 2, typ, byte(channel>>8), byte(channel))
	if body != nil {
		b = body.Append(b)
	}
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[off:], uint32(len(b)-off))
	return b
}

// Parse decodes an AMQP or SASL frame body (the bytes after the extended
// header). For a transfer, the bytes after the performative are its payload.
func Parse(body []byte) (Body, error) {
	code, sym, val, n, err := encoding.SplitDescribed(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if sym != "" {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, sym)
	}
	rv, err := newReader(val)
	r := &rv
	if err != nil {
		return nil, err
	}
	var out Body
	switch code {
	case CodeOpen:
		out = parseOpen(r)
	case CodeBegin:
		out = parseBegin(r)
	case CodeAttach:
		out = parseAttach(r)
	case CodeFlow:
		out = parseFlow(r)
	case CodeTransfer:
		t := parseTransfer(r)
		t.Payload = body[n:]
		out = t
	case CodeDisposition:
		out = parseDisposition(r)
	case CodeDetach:
		d := &Detach{}
		d.Handle = r.uint32(true)
		d.Closed = r.bool()
		d.Error = r.errorField()
		out = d
	case CodeEnd:
		out = &End{Error: r.errorField()}
	case CodeClose:
		out = &Close{Error: r.errorField()}
	case CodeSASLMechanisms:
		out = &SASLMechanisms{Mechanisms: r.symbols()}
	case CodeSASLInit:
		s := &SASLInit{}
		s.Mechanism = encoding.Symbol(r.string())
		s.InitialResponse = r.binary()
		s.Hostname = r.string()
		out = s
	case CodeSASLChallenge:
		out = &SASLChallenge{Challenge: r.binary()}
	case CodeSASLResponse:
		out = &SASLResponse{Response: r.binary()}
	case CodeSASLOutcome:
		s := &SASLOutcome{}
		s.Code = uint8(r.uint32(true))
		s.AdditionalData = r.binary()
		out = s
	default:
		return nil, fmt.Errorf("%w: 0x%x", ErrUnknown, code)
	}
	if code != CodeTransfer && n != len(body) {
		return nil, fmt.Errorf("%w: %d trailing bytes after %s", ErrMalformed, len(body)-n, out)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, out, r.err)
	}
	return out, nil
}

// Open is part 2 §2.7.1:
//
//	<type name="open" class="composite" source="list" provides="frame">
//	  <field name="container-id" type="string" mandatory="true"/>
//	  <field name="hostname" type="string"/>
//	  <field name="max-frame-size" type="uint" default="4294967295"/>
//	  <field name="channel-max" type="ushort" default="65535"/>
//	  <field name="idle-time-out" type="milliseconds"/>
//	  <field name="outgoing-locales" type="ietf-language-tag" multiple="true"/>
//	  <field name="incoming-locales" type="ietf-language-tag" multiple="true"/>
//	  <field name="offered-capabilities" type="symbol" multiple="true"/>
//	  <field name="desired-capabilities" type="symbol" multiple="true"/>
//	  <field name="properties" type="fields"/>
//	</type>
type Open struct {
	ContainerID         string
	Hostname            string
	MaxFrameSize        uint32 // 0 on decode is replaced by the default
	ChannelMax          uint16
	IdleTimeout         time.Duration
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

func parseOpen(r *reader) *Open {
	o := &Open{MaxFrameSize: 4294967295, ChannelMax: 65535}
	o.ContainerID = r.string()
	o.Hostname = r.string()
	if v, ok := r.optUint32(); ok {
		o.MaxFrameSize = v
	}
	if v, ok := r.optUint32(); ok {
		o.ChannelMax = uint16(min(v, 65535))
	}
	if v, ok := r.optUint32(); ok {
		o.IdleTimeout = time.Duration(v) * time.Millisecond
	}
	r.skip(2)
	o.OfferedCapabilities = r.symbols()
	o.DesiredCapabilities = r.symbols()
	o.Properties = r.mapField()
	return o
}

// Append implements Body.
func (o *Open) Append(b []byte) []byte {
	w := start(b, CodeOpen)
	w.str(o.ContainerID, true)
	w.str(o.Hostname, o.Hostname != "")
	w.uint(o.MaxFrameSize, true)
	w.ushort(o.ChannelMax, true)
	w.uint(uint32(o.IdleTimeout/time.Millisecond), o.IdleTimeout > 0)
	w.null()
	w.null()
	w.symbols(o.OfferedCapabilities)
	w.symbols(o.DesiredCapabilities)
	w.mapv(o.Properties)
	return w.end()
}

func (o *Open) String() string {
	return fmt.Sprintf("open{container-id=%q hostname=%q max-frame-size=%d channel-max=%d idle=%v}",
		o.ContainerID, o.Hostname, o.MaxFrameSize, o.ChannelMax, o.IdleTimeout)
}

// Begin is part 2 §2.7.2:
//
//	<field name="remote-channel" type="ushort"/>
//	<field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
//	<field name="incoming-window" type="uint" mandatory="true"/>
//	<field name="outgoing-window" type="uint" mandatory="true"/>
//	<field name="handle-max" type="handle" default="4294967295"/>
//	<field name="offered-capabilities" .../> <field name="desired-capabilities" .../>
//	<field name="properties" type="fields"/>
type Begin struct {
	RemoteChannel       *uint16
	NextOutgoingID      uint32
	IncomingWindow      uint32
	OutgoingWindow      uint32
	HandleMax           uint32
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

func parseBegin(r *reader) *Begin {
	b := &Begin{HandleMax: 4294967295}
	if v, ok := r.optUint32(); ok {
		c := uint16(min(v, 65535))
		b.RemoteChannel = &c
	}
	b.NextOutgoingID = r.uint32(true)
	b.IncomingWindow = r.uint32(true)
	b.OutgoingWindow = r.uint32(true)
	if v, ok := r.optUint32(); ok {
		b.HandleMax = v
	}
	b.OfferedCapabilities = r.symbols()
	b.DesiredCapabilities = r.symbols()
	b.Properties = r.mapField()
	return b
}

// Append implements Body.
func (bg *Begin) Append(b []byte) []byte {
	w := start(b, CodeBegin)
	if bg.RemoteChannel != nil {
		w.ushort(*bg.RemoteChannel, true)
	} else {
		w.null()
	}
	w.uint(bg.NextOutgoingID, true)
	w.uint(bg.IncomingWindow, true)
	w.uint(bg.OutgoingWindow, true)
	w.uint(bg.HandleMax, true)
	w.symbols(bg.OfferedCapabilities)
	w.symbols(bg.DesiredCapabilities)
	w.mapv(bg.Properties)
	return w.end()
}

func (bg *Begin) String() string {
	rc := "nil"
	if bg.RemoteChannel != nil {
		rc = fmt.Sprint(*bg.RemoteChannel)
	}
	return fmt.Sprintf("begin{remote-channel=%s next-outgoing-id=%d incoming-window=%d outgoing-window=%d handle-max=%d}",
		rc, bg.NextOutgoingID, bg.IncomingWindow, bg.OutgoingWindow, bg.HandleMax)
}

// Source is part 3 §3.5.3:
//
//	<field name="address" type="*" requires="address"/>
//	<field name="durable" type="terminus-durability" default="none"/>
//	<field name="expiry-policy" type="terminus-expiry-policy" default="session-end"/>
//	<field name="timeout" type="seconds" default="0"/>
//	<field name="dynamic" type="boolean" default="false"/>
//	<field name="dynamic-node-properties" type="node-properties"/>
//	<field name="distribution-mode" type="symbol" requires="distribution-mode"/>
//	<field name="filter" type="filter-set"/>
//	<field name="default-outcome" type="*" requires="outcome"/>
//	<field name="outcomes" type="symbol" multiple="true"/>
//	<field name="capabilities" type="symbol" multiple="true"/>
type Source struct {
	Address               string
	Durable               uint32
	ExpiryPolicy          encoding.Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	DistributionMode      encoding.Symbol
	Filter                encoding.Map
	DefaultOutcome        any
	Outcomes              []encoding.Symbol
	Capabilities          []encoding.Symbol
}

// Target is part 3 §3.5.4 (address, durable, expiry-policy, timeout, dynamic,
// dynamic-node-properties, capabilities).
//
// Coordinator is set when the terminus is a transaction coordinator (part 4 §4.5.1,
// amqp:coordinator:list, whose one field, capabilities, goes in Capabilities) rather
// than a target; the other fields are then unused.
type Target struct {
	Coordinator           bool
	Address               string
	Durable               uint32
	ExpiryPolicy          encoding.Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	Capabilities          []encoding.Symbol
}

// Attach is part 2 §2.7.3:
//
//	<field name="name" type="string" mandatory="true"/>
//	<field name="handle" type="handle" mandatory="true"/>
//	<field name="role" type="role" mandatory="true"/>
//	<field name="snd-settle-mode" type="sender-settle-mode" default="mixed"/>
//	<field name="rcv-settle-mode" type="receiver-settle-mode" default="first"/>
//	<field name="source" type="*" requires="source"/>
//	<field name="target" type="*" requires="target"/>
//	<field name="unsettled" type="map"/>
//	<field name="incomplete-unsettled" type="boolean" default="false"/>
//	<field name="initial-delivery-count" type="sequence-no"/>
//	<field name="max-message-size" type="ulong"/>
//	<field name="offered-capabilities" .../> <field name="desired-capabilities" .../>
//	<field name="properties" type="fields"/>
//
// SndSettleMode and RcvSettleMode are nil when absent so that a reply can
// echo exactly what the peer sent.
type Attach struct {
	Name                 string
	Handle               uint32
	Role                 Role
	SndSettleMode        *uint8
	RcvSettleMode        *uint8
	Source               *Source
	Target               *Target
	Unsettled            encoding.Map
	IncompleteUnsettled  bool
	InitialDeliveryCount *uint32
	MaxMessageSize       uint64
	OfferedCapabilities  []encoding.Symbol
	DesiredCapabilities  []encoding.Symbol
	Properties           encoding.Map
}

func parseAttach(r *reader) *Attach {
	a := &Attach{}
	a.Name = r.string()
	a.Handle = r.uint32(true)
	a.Role = Role(r.bool())
	if v, ok := r.optUint32(); ok {
		m := uint8(v)
		a.SndSettleMode = &m
	}
	if v, ok := r.optUint32(); ok {
		m := uint8(v)
		a.RcvSettleMode = &m
	}
	a.Source = r.source()
	a.Target = r.target()
	a.Unsettled = r.mapField()
	a.IncompleteUnsettled = r.bool()
	if v, ok := r.optUint32(); ok {
		a.InitialDeliveryCount = &v
	}
	if raw := r.next(); !encoding.IsNull(raw) {
		v, err := encoding.ReadUlong(raw)
		r.setErr(err)
		a.MaxMessageSize = v
	}
	a.OfferedCapabilities = r.symbols()
	a.DesiredCapabilities = r.symbols()
	a.Properties = r.mapField()
	return a
}

// Append implements Body.
func (a *Attach) Append(b []byte) []byte {
	w := start(b, CodeAttach)
	w.str(a.Name, true)
	w.uint(a.Handle, true)
	w.bool(bool(a.Role), true)
	if a.SndSettleMode != nil {
		w.ubyte(*a.SndSettleMode)
	} else {
		w.null()
	}
	if a.RcvSettleMode != nil {
		w.ubyte(*a.RcvSettleMode)
	} else {
		w.null()
	}
	if s := a.Source; s != nil {
		sw := start(w.b, CodeSource)
		sw.str(s.Address, s.Address != "")
		sw.uint(s.Durable, s.Durable != 0)
		sw.sym(s.ExpiryPolicy)
		sw.uint(s.Timeout, s.Timeout != 0)
		sw.bool(s.Dynamic, s.Dynamic)
		sw.mapv(s.DynamicNodeProperties)
		sw.sym(s.DistributionMode)
		sw.mapv(s.Filter)
		sw.value(s.DefaultOutcome)
		sw.symbols(s.Outcomes)
		sw.symbols(s.Capabilities)
		w.b = sw.end()
		w.mark()
	} else {
		w.null()
	}
	if t := a.Target; t != nil && t.Coordinator {
		tw := start(w.b, CodeCoordinator)
		tw.symbols(t.Capabilities)
		w.b = tw.end()
		w.mark()
	} else if t != nil {
		tw := start(w.b, CodeTarget)
		tw.str(t.Address, t.Address != "")
		tw.uint(t.Durable, t.Durable != 0)
		tw.sym(t.ExpiryPolicy)
		tw.uint(t.Timeout, t.Timeout != 0)
		tw.bool(t.Dynamic, t.Dynamic)
		tw.mapv(t.DynamicNodeProperties)
		tw.symbols(t.Capabilities)
		w.b = tw.end()
		w.mark()
	} else {
		w.null()
	}
	w.mapv(a.Unsettled)
	w.bool(a.IncompleteUnsettled, a.IncompleteUnsettled)
	if a.InitialDeliveryCount != nil {
		w.uint(*a.InitialDeliveryCount, true)
	} else {
		w.null()
	}
	w.ulong(a.MaxMessageSize, a.MaxMessageSize != 0)
	w.symbols(a.OfferedCapabilities)
	w.symbols(a.DesiredCapabilities)
	w.mapv(a.Properties)
	return w.end()
}

func (a *Attach) String() string {
	src, tgt := "nil", "nil"
	if a.Source != nil {
		src = fmt.Sprintf("%q filter=%v", a.Source.Address, a.Source.Filter)
	}
	if a.Target != nil {
		tgt = fmt.Sprintf("%q", a.Target.Address)
	}
	return fmt.Sprintf("attach{name=%q handle=%d role=%s snd=%v rcv=%v source=%s target=%s max-message-size=%d properties=%v}",
		a.Name, a.Handle, a.Role, deref(a.SndSettleMode), deref(a.RcvSettleMode), src, tgt, a.MaxMessageSize, a.Properties)
}

func deref[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// Flow is part 2 §2.7.4:
//
//	<field name="next-incoming-id" type="transfer-number"/>
//	<field name="incoming-window" type="uint" mandatory="true"/>
//	<field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
//	<field name="outgoing-window" type="uint" mandatory="true"/>
//	<field name="handle" type="handle"/>
//	<field name="delivery-count" type="sequence-no"/>
//	<field name="link-credit" type="uint"/>
//	<field name="available" type="uint"/>
//	<field name="drain" type="boolean" default="false"/>
//	<field name="echo" type="boolean" default="false"/>
//	<field name="properties" type="fields"/>
type Flow struct {
	NextIncomingID *uint32
	IncomingWindow uint32
	NextOutgoingID uint32
	OutgoingWindow uint32
	Handle         *uint32
	DeliveryCount  *uint32
	LinkCredit     *uint32
	Available      *uint32
	Drain          bool
	Echo           bool
	Properties     encoding.Map
}

func parseFlow(r *reader) *Flow {
	f := &Flow{}
	if v, ok := r.optUint32(); ok {
		f.NextIncomingID = &v
	}
	f.IncomingWindow = r.uint32(true)
	f.NextOutgoingID = r.uint32(true)
	f.OutgoingWindow = r.uint32(true)
	if v, ok := r.optUint32(); ok {
		f.Handle = &v
	}
	if v, ok := r.optUint32(); ok {
		f.DeliveryCount = &v
	}
	if v, ok := r.optUint32(); ok {
		f.LinkCredit = &v
	}
	if v, ok := r.optUint32(); ok {
		f.Available = &v
	}
	f.Drain = r.bool()
	f.Echo = r.bool()
	f.Properties = r.mapField()
	return f
}

// Append implements Body.
func (f *Flow) Append(b []byte) []byte {
	w := start(b, CodeFlow)
	w.optUint(f.NextIncomingID)
	w.uint(f.IncomingWindow, true)
	w.uint(f.NextOutgoingID, true)
	w.uint(f.OutgoingWindow, true)
	w.optUint(f.Handle)
	w.optUint(f.DeliveryCount)
	w.optUint(f.LinkCredit)
	w.optUint(f.Available)
	w.bool(f.Drain, f.Drain)
	w.bool(f.Echo, f.Echo)
	w.mapv(f.Properties)
	return w.end()
}

func (f *Flow) String() string {
	return fmt.Sprintf("flow{next-incoming-id=%v incoming-window=%d next-outgoing-id=%d outgoing-window=%d handle=%v delivery-count=%v link-credit=%v drain=%v echo=%v}",
		deref(f.NextIncomingID), f.IncomingWindow, f.NextOutgoingID, f.OutgoingWindow, deref(f.Handle),
		deref(f.DeliveryCount), deref(f.LinkCredit), f.Drain, f.Echo)
}

// Transfer is part 2 §2.7.5:
//
//	<field name="handle" type="handle" mandatory="true"/>
//	<field name="delivery-id" type="delivery-number"/>
//	<field name="delivery-tag" type="delivery-tag"/>
//	<field name="message-format" type="message-format"/>
//	<field name="settled" type="boolean"/>
//	<field name="more" type="boolean" default="false"/>
//	<field name="rcv-settle-mode" type="receiver-settle-mode"/>
//	<field name="state" type="*" requires="delivery-state"/>
//	<field name="resume" type="boolean" default="false"/>
//	<field name="aborted" type="boolean" default="false"/>
//	<field name="batchable" type="boolean" default="false"/>
//
// Payload aliases the frame buffer on decode.
type Transfer struct {
	Handle        uint32
	DeliveryID    *uint32
	DeliveryTag   []byte
	MessageFormat *uint32
	Settled       bool
	SettledSet    bool
	More          bool
	RcvSettleMode *uint8
	State         DeliveryState
	Resume        bool
	Aborted       bool
	Batchable     bool
	Payload       []byte
}

func parseTransfer(r *reader) *Transfer {
	t := &Transfer{}
	t.Handle = r.uint32(true)
	if v, ok := r.optUint32(); ok {
		t.DeliveryID = &v
	}
	if raw := r.next(); !encoding.IsNull(raw) {
		p, err := encoding.ReadBytes(raw)
		r.setErr(err)
		t.DeliveryTag = p
	}
	if v, ok := r.optUint32(); ok {
		t.MessageFormat = &v
	}
	if raw := r.next(); !encoding.IsNull(raw) {
		v, err := encoding.ReadBool(raw)
		r.setErr(err)
		t.Settled, t.SettledSet = v, true
	}
	t.More = r.bool()
	if v, ok := r.optUint32(); ok {
		m := uint8(v)
		t.RcvSettleMode = &m
	}
	t.State = r.state()
	t.Resume = r.bool()
	t.Aborted = r.bool()
	t.Batchable = r.bool()
	return t
}

// Append implements Body (the payload is not included; see AppendFrame).
func (t *Transfer) Append(b []byte) []byte {
	w := start(b, CodeTransfer)
	w.uint(t.Handle, true)
	w.optUint(t.DeliveryID)
	if t.DeliveryTag != nil {
		w.b = encoding.AppendBinary(w.b, t.DeliveryTag)
		w.mark()
	} else {
		w.null()
	}
	w.optUint(t.MessageFormat)
	w.bool(t.Settled, t.SettledSet || t.Settled)
	w.bool(t.More, t.More)
	if t.RcvSettleMode != nil {
		w.ubyte(*t.RcvSettleMode)
	} else {
		w.null()
	}
	w.state(t.State)
	w.bool(t.Resume, t.Resume)
	w.bool(t.Aborted, t.Aborted)
	w.bool(t.Batchable, t.Batchable)
	return w.end()
}

func (t *Transfer) String() string {
	return fmt.Sprintf("transfer{handle=%d delivery-id=%v tag=%x format=%v settled=%v more=%v aborted=%v state=%v payload=%d}",
		t.Handle, deref(t.DeliveryID), t.DeliveryTag, deref(t.MessageFormat), t.Settled, t.More, t.Aborted, t.State, len(t.Payload))
}

// Disposition is part 2 §2.7.6:
//
//	<field name="role" type="role" mandatory="true"/>
//	<field name="first" type="delivery-number" mandatory="true"/>
//	<field name="last" type="delivery-number"/>
//	<field name="settled" type="boolean" default="false"/>
//	<field name="state" type="*" requires="delivery-state"/>
//	<field name="batchable" type="boolean" default="false"/>
type Disposition struct {
	Role      Role
	First     uint32
	Last      *uint32
	Settled   bool
	State     DeliveryState
	Batchable bool
}

func parseDisposition(r *reader) *Disposition {
	d := &Disposition{}
	d.Role = Role(r.bool())
	d.First = r.uint32(true)
	if v, ok := r.optUint32(); ok {
		d.Last = &v
	}
	d.Settled = r.bool()
	d.State = r.state()
	d.Batchable = r.bool()
	return d
}

// Append implements Body.
func (d *Disposition) Append(b []byte) []byte {
	w := start(b, CodeDisposition)
	w.bool(bool(d.Role), true)
	w.uint(d.First, true)
	w.optUint(d.Last)
	w.bool(d.Settled, d.Settled)
	w.state(d.State)
	w.bool(d.Batchable, d.Batchable)
	return w.end()
}

func (d *Disposition) String() string {
	return fmt.Sprintf("disposition{role=%s first=%d last=%v settled=%v state=%v}", d.Role, d.First, deref(d.Last), d.Settled, d.State)
}

// Detach is part 2 §2.7.7: handle (mandatory), closed (default false), error.
type Detach struct {
	Handle uint32
	Closed bool
	Error  *Error
}

// Append implements Body.
func (d *Detach) Append(b []byte) []byte {
	w := start(b, CodeDetach)
	w.uint(d.Handle, true)
	w.bool(d.Closed, d.Closed)
	w.errorv(d.Error)
	return w.end()
}

func (d *Detach) String() string {
	return fmt.Sprintf("detach{handle=%d closed=%v error=%v}", d.Handle, d.Closed, d.Error)
}

// End is part 2 §2.7.8: error.
type End struct{ Error *Error }

// Append implements Body.
func (e *End) Append(b []byte) []byte {
	w := start(b, CodeEnd)
	w.errorv(e.Error)
	return w.end()
}

func (e *End) String() string { return fmt.Sprintf("end{error=%v}", e.Error) }

// Close is part 2 §2.7.9: error.
type Close struct{ Error *Error }

// Append implements Body.
func (c *Close) Append(b []byte) []byte {
	w := start(b, CodeClose)
	w.errorv(c.Error)
	return w.end()
}

func (c *Close) String() string { return fmt.Sprintf("close{error=%v}", c.Error) }

// Error is part 2 §2.8.14:
//
//	<field name="condition" type="symbol" requires="error-condition" mandatory="true"/>
//	<field name="description" type="string"/>
//	<field name="info" type="fields"/>
type Error struct {
	Condition   encoding.Symbol
	Description string
	Info        encoding.Map
}

func (e *Error) Error() string { return string(e.Condition) + ": " + e.Description }

func (e *Error) String() string {
	if e == nil {
		return "nil"
	}
	return fmt.Sprintf("%s %q", e.Condition, e.Description)
}

func appendError(b []byte, e *Error) []byte {
	w := start(b, CodeError)
	w.sym(e.Condition)
	w.str(e.Description, e.Description != "")
	w.mapv(e.Info)
	return w.end()
}

// DeliveryState is a delivery state or outcome (part 3 §3.4).
type DeliveryState interface{ stateCode() uint64 }

// Accepted is part 3 §3.4.2 (no fields).
type Accepted struct{}

// Rejected is part 3 §3.4.3: <field name="error" type="error"/>.
type Rejected struct{ Error *Error }

// Released is part 3 §3.4.4 (no fields).
type Released struct{}

// Modified is part 3 §3.4.5:
//
//	<field name="delivery-failed" type="boolean"/>
//	<field name="undeliverable-here" type="boolean"/>
//	<field name="message-annotations" type="fields"/>
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations encoding.Map
}

// Received is part 3 §3.4.1: section-number (uint), section-offset (ulong).
type Received struct {
	SectionNumber uint32
	SectionOffset uint64
}

// Declared is part 4 §4.5.4: the outcome of a declare, <field name="txn-id"
// type="*" requires="txn-id" mandatory="true"/> (a binary).
type Declared struct{ TxnID []byte }

// TransactionalState is part 4 §4.5.5: <field name="txn-id" mandatory="true"/>,
// <field name="outcome" type="*" requires="outcome"/>.
type TransactionalState struct {
	TxnID   []byte
	Outcome DeliveryState
}

// UnknownState is any other described delivery state (e.g. transactional),
// kept so it can be reported.
type UnknownState struct {
	Descriptor any
	Value      any
}

func (Accepted) stateCode() uint64        { return CodeAccepted }
func (*Rejected) stateCode() uint64       { return CodeRejected }
func (Released) stateCode() uint64        { return CodeReleased }
func (*Modified) stateCode() uint64       { return CodeModified }
func (*Received) stateCode() uint64       { return CodeReceived }
func (u *UnknownState) stateCode() uint64 { return 0 }
func (*Declared) stateCode() uint64       { return CodeDeclared }
func (*TransactionalState) stateCode() uint64 {
	return CodeTransactionalState
}

// parseState decodes a delivery state from its raw encoding.
func parseState(raw []byte) (DeliveryState, error) {
	code, sym, val, _, err := encoding.SplitDescribed(raw)
	if err != nil {
		return nil, err
	}
	if sym != "" {
		v, _, err := encoding.Decode(val)
		return &UnknownState{Descriptor: sym, Value: v}, err
	}
	rv, err := newReader(val)
	r := &rv
	if err != nil {
		return nil, err
	}
	var st DeliveryState
	switch code {
	case CodeAccepted:
		st = Accepted{}
	case CodeReleased:
		st = Released{}
	case CodeRejected:
		st = &Rejected{Error: r.errorField()}
	case CodeModified:
		m := &Modified{}
		m.DeliveryFailed = r.bool()
		m.UndeliverableHere = r.bool()
		m.MessageAnnotations = r.mapField()
		st = m
	case CodeReceived:
		rc := &Received{}
		rc.SectionNumber = r.uint32(true)
		if raw := r.next(); !encoding.IsNull(raw) {
			v, err := encoding.ReadUlong(raw)
			r.setErr(err)
			rc.SectionOffset = v
		}
		st = rc
	case CodeDeclared:
		st = &Declared{TxnID: r.binary()}
	case CodeTransactionalState:
		ts := &TransactionalState{TxnID: r.binary()}
		if raw := r.next(); !encoding.IsNull(raw) {
			code, _, _, _, err := encoding.SplitDescribed(raw)
			if err == nil && code == CodeTransactionalState {
				err = fmt.Errorf("nested transactional-state")
			}
			if err == nil {
				ts.Outcome, err = parseState(raw)
			}
			r.setErr(err)
		}
		st = ts
	default:
		v, _, err := encoding.Decode(val)
		return &UnknownState{Descriptor: code, Value: v}, err
	}
	return st, r.err
}

// StateOf reads a delivery state held as a decoded value, as in an attach's unsettled
// map; it returns nil for null or anything that is not a delivery state.
func StateOf(v any) DeliveryState {
	if v == nil {
		return nil
	}
	raw, err := encoding.Append(nil, v)
	if err != nil {
		return nil
	}
	st, err := parseState(raw)
	if err != nil {
		return nil
	}
	return st
}

// AppendState appends the encoding of a delivery state.
func AppendState(b []byte, s DeliveryState) []byte {
	switch st := s.(type) {
	case nil:
		return encoding.AppendNull(b)
	case Accepted, *Accepted:
		return append(encoding.AppendDescriptor(b, CodeAccepted), 0x45)
	case Released, *Released:
		return append(encoding.AppendDescriptor(b, CodeReleased), 0x45)
	case *Rejected:
		w := start(b, CodeRejected)
		w.errorv(st.Error)
		return w.end()
	case *Modified:
		w := start(b, CodeModified)
		w.bool(st.DeliveryFailed, st.DeliveryFailed)
		w.bool(st.UndeliverableHere, st.UndeliverableHere)
		w.mapv(st.MessageAnnotations)
		return w.end()
	case *Received:
		w := start(b, CodeReceived)
		w.uint(st.SectionNumber, true)
		w.ulong(st.SectionOffset, true)
		return w.end()
	case *Declared:
		w := start(b, CodeDeclared)
		w.binary(st.TxnID)
		return w.end()
	case *TransactionalState:
		w := start(b, CodeTransactionalState)
		w.binary(st.TxnID)
		w.state(st.Outcome)
		return w.end()
	case *UnknownState:
		out, _ := encoding.Append(b, &encoding.Described{Descriptor: st.Descriptor, Value: st.Value})
		return out
	}
	return encoding.AppendNull(b)
}

// SASLMechanisms is part 5 §5.3.3.1: sasl-server-mechanisms (symbol, multiple, mandatory).
type SASLMechanisms struct{ Mechanisms []encoding.Symbol }

// Append implements Body.
func (s *SASLMechanisms) Append(b []byte) []byte {
	w := start(b, CodeSASLMechanisms)
	w.b, _ = encoding.Append(w.b, s.Mechanisms)
	w.mark()
	return w.end()
}

func (s *SASLMechanisms) String() string { return fmt.Sprintf("sasl-mechanisms%v", s.Mechanisms) }

// SASLInit is part 5 §5.3.3.2: mechanism (symbol, mandatory),
// initial-response (binary), hostname (string).
type SASLInit struct {
	Mechanism       encoding.Symbol
	InitialResponse []byte
	Hostname        string
}

// Append implements Body.
func (s *SASLInit) Append(b []byte) []byte {
	w := start(b, CodeSASLInit)
	w.sym(s.Mechanism)
	if s.InitialResponse != nil {
		w.b = encoding.AppendBinary(w.b, s.InitialResponse)
		w.mark()
	} else {
		w.null()
	}
	w.str(s.Hostname, s.Hostname != "")
	return w.end()
}

func (s *SASLInit) String() string { return fmt.Sprintf("sasl-init{mechanism=%s}", s.Mechanism) }

// SASLChallenge is part 5 §5.3.3.3: challenge (binary, mandatory).
type SASLChallenge struct{ Challenge []byte }

// Append implements Body.
func (s *SASLChallenge) Append(b []byte) []byte {
	w := start(b, CodeSASLChallenge)
	w.b = encoding.AppendBinary(w.b, s.Challenge)
	w.mark()
	return w.end()
}

func (s *SASLChallenge) String() string { return "sasl-challenge" }

// SASLResponse is part 5 §5.3.3.4: response (binary, mandatory).
type SASLResponse struct{ Response []byte }

// Append implements Body.
func (s *SASLResponse) Append(b []byte) []byte {
	w := start(b, CodeSASLResponse)
	w.b = encoding.AppendBinary(w.b, s.Response)
	w.mark()
	return w.end()
}

func (s *SASLResponse) String() string { return "sasl-response" }

// SASL outcome codes (part 5 §5.3.3.6).
const (
	SASLOK      uint8 = 0
	SASLAuth    uint8 = 1
	SASLSys     uint8 = 2
	SASLSysPerm uint8 = 3
	SASLSysTemp uint8 = 4
)

// SASLOutcome is part 5 §5.3.3.5: code (sasl-code, mandatory), additional-data (binary).
type SASLOutcome struct {
	Code           uint8
	AdditionalData []byte
}

// Append implements Body.
func (s *SASLOutcome) Append(b []byte) []byte {
	w := start(b, CodeSASLOutcome)
	w.ubyte(s.Code)
	if s.AdditionalData != nil {
		w.b = encoding.AppendBinary(w.b, s.AdditionalData)
		w.mark()
	}
	return w.end()
}

func (*SASLMechanisms) sasl() {}
func (*SASLInit) sasl()       {}
func (*SASLChallenge) sasl()  {}
func (*SASLResponse) sasl()   {}
func (*SASLOutcome) sasl()    {}

func (s *SASLOutcome) String() string { return fmt.Sprintf("sasl-outcome{code=%d}", s.Code) }
