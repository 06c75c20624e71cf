package rule

import "fmt"

// Kind is the type of a property value. The kinds mirror the AMQP 1.0 simple types that
// Service Bus allows in application properties, so that a value survives a round trip
// through the broker with its type intact.
type Kind uint8

// Value kinds. Append only: the fsm's snapshot format stores them.
const (
	KindNull Kind = iota
	KindBool
	KindUbyte
	KindUshort
	KindUint
	KindUlong
	KindByte
	KindShort
	KindInt
	KindLong
	KindFloat
	KindDouble
	KindChar      // N holds the code point
	KindTimestamp // N holds Unix milliseconds (int64 bits)
	KindUUID      // S holds the 16 raw bytes
	KindString
	KindBinary
	KindSymbol
	KindDecimal32  // S holds the raw 4 bytes; carried through, compared as unknown
	KindDecimal64  // S holds the raw 8 bytes
	KindDecimal128 // S holds the raw 16 bytes
	kindCount
)

var kindNames = [...]string{"null", "bool", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int",
	"long", "float", "double", "char", "timestamp", "uuid", "string", "binary", "symbol",
	"decimal32", "decimal64", "decimal128"}

func (k Kind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k < kindCount }

// Value is one typed property value. Integers of every width are held in N as their
// two's-complement (signed kinds) or plain (unsigned kinds) bit pattern, floats as
// math.Float64bits (a float32 is widened), booleans as 0 or 1. Strings, symbols, binary,
// UUIDs and decimals are held in S.
type Value struct {
	Kind Kind
	N    uint64
	S    string
}

// Property is one named application property. Order is the order of the message's
// application-properties map on the wire; lookups are by exact name, except where a
// filter's rules say otherwise.
type Property struct {
	Key   string
	Value Value
}

// BlankSessionID is how the broker stores a SessionId that is set but empty: group-id
// "" on the wire, which Service Bus treats as a session of its own, while "" in
// Properties means "no session". A SQL filter sees it as the empty string, not NULL:
// an equality with the empty string matches, IS NULL does not. amqp stores the same
// value (amqp.BlankSessionID; cmd/internal/bridge tests that they agree).
const BlankSessionID = "\x00"

// Properties is everything a filter can see of a message, and everything an action may
// change: the system properties (sys.*) and the application properties (user.*).
// The fsm embeds it in each stored message, so keep it lean.
type Properties struct {
	MessageID        string
	CorrelationID    string
	To               string
	ReplyTo          string
	Subject          string // "Label" in the older SDKs and in SQL (sys.Label)
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	PartitionKey     string

	TimeToLive           int64 // milliseconds; 0 = not set by the sender
	ScheduledEnqueueTime int64 // Unix ms; 0 = not scheduled
	SequenceNumber       int64 // stamped by the fsm before filters run
	EnqueuedTime         int64 // Unix ms, stamped by the fsm before filters run
	Size                 int64 // size of the encoded message in bytes

	App []Property
}

// Get returns the application property named key.
func (p *Properties) Get(key string) (Value, bool) {
	for i := range p.App {
		if p.App[i].Key == key {
			return p.App[i].Value, true
		}
	}
	return Value{}, false
}

// Set sets (or adds) the application property named key. It copies the App slice
// first when it would otherwise write into storage shared with another message.
func (p *Properties) Set(key string, v Value) {
	for i := range p.App {
		if p.App[i].Key == key {
			app := make([]Property, len(p.App))
			copy(app, p.App)
			app[i].Value = v
			p.App = app
			return
		}
	}
	app := make([]Property, len(p.App), len(p.App)+1)
	copy(app, p.App)
	p.App = append(app, Property{Key: key, Value: v})
}

// Remove deletes the application property named key, if present, without writing into
// storage shared with another message.
func (p *Properties) Remove(key string) {
	for i := range p.App {
		if p.App[i].Key == key {
			app := make([]Property, 0, len(p.App)-1)
			app = append(app, p.App[:i]...)
			p.App = append(app, p.App[i+1:]...)
			return
		}
	}
}

// Filter decides whether a message enters a subscription. Match must be deterministic
// and must not modify p. An error means the filter could not be evaluated for this
// message (S-TOP-1; see EnableDeadLetteringOnFilterEvaluationExceptions).
type Filter interface {
	Match(p *Properties) (bool, error)
}

// Action modifies the copy of a message that enters one subscription. It must be
// deterministic and must not write into storage it shares with other copies (use
// Properties.Set and Remove).
type Action interface {
	Apply(p *Properties) error
}

// FilterKind names the four kinds of Service Bus rule filter.
type FilterKind uint8

// Filter kinds. Append only.
const (
	FilterTrue FilterKind = iota
	FilterFalse
	FilterSQL
	FilterCorrelation
)

func (k FilterKind) String() string {
	switch k {
	case FilterTrue:
		return "TrueFilter"
	case FilterFalse:
		return "FalseFilter"
	case FilterSQL:
		return "SqlFilter"
	case FilterCorrelation:
		return "CorrelationFilter"
	}
	return fmt.Sprintf("FilterKind(%d)", uint8(k))
}

// Correlation is a correlation filter: every field that is set must equal the message's
// (case-sensitive, as Service Bus compares them), and every listed application
// property must be present with an equal value.
type Correlation struct {
	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Subject          string
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	Properties       []Property
}

// FilterSpec is a filter as it is declared (admin API, Config.json) and replicated.
type FilterSpec struct {
	Kind        FilterKind
	SQL         string     // FilterSQL
	Parameters  []Property // FilterSQL: values for @name parameters
	Correlation Correlation
}

// ActionSpec is a rule action as declared. An empty SQL means no action.
type ActionSpec struct {
	SQL        string
	Parameters []Property
}

// Spec is a subscription rule as declared: a name, a filter and an optional action.
type Spec struct {
	Name   string
	Filter FilterSpec
	Action ActionSpec
}

// DefaultRuleName is the name of the rule every new subscription starts with.
const DefaultRuleName = "$Default"

// Rule is a compiled Spec, ready to evaluate.
type Rule struct {
	Name   string
	Filter Filter
	Action Action // nil when the rule has no action
}

// Compile validates a Spec and prepares it for evaluation. Errors describe what is wrong
// and where, so the admin API can return them as a 400.
func Compile(s Spec) (*Rule, error) {
	r := &Rule{Name: s.Name}
	switch s.Filter.Kind {
	case FilterTrue:
		r.Filter = constFilter(true)
	case FilterFalse:
		r.Filter = constFilter(false)
	case FilterCorrelation:
		c := s.Filter.Correlation
		r.Filter = &c
	case FilterSQL:
		f, err := CompileSQLFilter(s.Filter.SQL, s.Filter.Parameters)
		if err != nil {
			return nil, err
		}
		r.Filter = f
	default:
		return nil, fmt.Errorf("rule %q: unknown filter kind %d", s.Name, s.Filter.Kind)
	}
	if s.Action.SQL != "" {
		a, err := CompileSQLAction(s.Action.SQL, s.Action.Parameters)
		if err != nil {
			return nil, err
		}
		r.Action = a
	}
	return r, nil
}

type constFilter bool

func (c constFilter) Match(*Properties) (bool, error) { return bool(c), nil }

// Match implements Filter for a correlation filter.
func (c *Correlation) Match(p *Properties) (bool, error) {
	if (c.CorrelationID != "" && c.CorrelationID != p.CorrelationID) ||
		(c.MessageID != "" && c.MessageID != p.MessageID) ||
		(c.To != "" && c.To != p.To) ||
		(c.ReplyTo != "" && c.ReplyTo != p.ReplyTo) ||
		(c.Subject != "" && c.Subject != p.Subject) ||
		(c.SessionID != "" && c.SessionID != p.SessionID) ||
		(c.ReplyToSessionID != "" && c.ReplyToSessionID != p.ReplyToSessionID) ||
		(c.ContentType != "" && c.ContentType != p.ContentType) {
		return false, nil
	}
	for _, want := range c.Properties {
		got, ok := p.Get(want.Key)
		if !ok || !Equal(got, want.Value) {
			return false, nil
		}
	}
	return true, nil
}

// Equal reports whether two values are equal for a correlation filter: numbers compare
// by numeric value across widths (exactly between integers, as doubles otherwise),
// everything else by kind and content.
func Equal(a, b Value) bool {
	if a.Kind == b.Kind && a.N == b.N && a.S == b.S {
		return true
	}
	if !numericKind(a.Kind) || !numericKind(b.Kind) {
		return false
	}
	x, y := fromValue(a), fromValue(b)
	if x.k == vInt && y.k == vInt {
		return x.i == y.i
	}
	return num(x) == num(y)
}
