package rule

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Value constructors for tests.
func vStr(s string) Value    { return Value{Kind: KindString, S: s} }
func vSym(s string) Value    { return Value{Kind: KindSymbol, S: s} }
func vLong(i int64) Value    { return Value{Kind: KindLong, N: uint64(i)} }
func vInt32(i int32) Value   { return Value{Kind: KindInt, N: uint64(int64(i))} }
func vDbl(f float64) Value   { return Value{Kind: KindDouble, N: math.Float64bits(f)} }
func vFloat(f float32) Value { return Value{Kind: KindFloat, N: math.Float64bits(float64(f))} }
func vBoolean(b bool) Value {
	if b {
		return Value{Kind: KindBool, N: 1}
	}
	return Value{Kind: KindBool}
}
func vTS(ms int64) Value { return Value{Kind: KindTimestamp, N: uint64(ms)} }

var uuidRaw = string([]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7})

// fixture is the message most tests evaluate against.
func fixture() *Properties {
	return &Properties{
		MessageID: "m1", CorrelationID: "corr-7", To: "dest", ReplyTo: "back",
		Subject: "invoice-2024", ContentType: "application/json", PartitionKey: "pk",
		SequenceNumber: 42, EnqueuedTime: 1_700_000_000_000, Size: 321, TimeToLive: 60_000,
		App: []Property{
			{"color", vStr("red")},
			{"quantity", vInt32(12)},
			{"price", vDbl(9.5)},
			{"flag", vBoolean(true)},
			{"off", vBoolean(false)},
			{"nothing", Value{Kind: KindNull}},
			{"sym", vSym("abc")},
			{"when", vTS(1_600_000_000_000)},
			{"id", Value{Kind: KindUUID, S: uuidRaw}},
			{"bin", Value{Kind: KindBinary, S: "\x00\x01"}},
			{"ch", Value{Kind: KindChar, N: 'A'}},
			{"dec", Value{Kind: KindDecimal64, S: "\x00\x00\x00\x00\x00\x00\x00\x01"}},
			{"my prop", vStr("spaced")},
			{"Region", vStr("eu")},
			{"region", vStr("us")},
			{"pct", vStr("50%_off")},
			{"uni", vStr("héllo wörld")},
			{"big", Value{Kind: KindUlong, N: math.MaxUint64}},
			{"zero", vLong(0)},
			{"f32", vFloat(1.5)},
		},
	}
}

// tri evaluates a predicate: "T", "F", "U" (unknown) or "E" (evaluation error).
func tri(t *testing.T, expr string, params []Property, p *Properties) string {
	t.Helper()
	ps, err := newParser(expr, params, "filter")
	if err != nil {
		t.Fatalf("%s: compile: %v", expr, err)
	}
	root, err := ps.parseFilter()
	if err != nil {
		t.Fatalf("%s: compile: %v", expr, err)
	}
	v, err := root.n.eval(p)
	if err != nil {
		if !errors.Is(err, ErrEvaluation) {
			t.Fatalf("%s: error %v is not ErrEvaluation", expr, err)
		}
		return "E"
	}
	// The Filter must agree: it matches only on TRUE.
	f, ferr := CompileSQLFilter(expr, params)
	if ferr != nil {
		t.Fatalf("%s: CompileSQLFilter: %v", expr, ferr)
	}
	m, merr := f.Match(p)
	switch v.k {
	case vBool:
		if merr != nil || m != (v.i == 1) {
			t.Fatalf("%s: Match = %v, %v; eval = %v", expr, m, merr, v)
		}
		if v.i == 1 {
			return "T"
		}
		return "F"
	case vNull:
		if m || merr != nil {
			t.Fatalf("%s: unknown but Match = %v, %v", expr, m, merr)
		}
		return "U"
	}
	t.Fatalf("%s: predicate evaluated to %v", expr, v)
	return ""
}

// value evaluates an expression (not necessarily a predicate).
func value(t *testing.T, expr string, p *Properties) (val, error) {
	t.Helper()
	ps, err := newParser(expr, nil, "filter")
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var root cnode
	func() {
		defer ps.recover(&err)
		root = ps.parseOr()
		if ps.peek().kind != tEOF {
			ps.failSyntax(ps.peek().pos, "trailing")
		}
	}()
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return root.n.eval(p)
}

func TestSQLFilterSemantics(t *testing.T) { // S-TOP-1
	cases := []struct{ expr, want string }{
		// constants; what the SDKs send for TrueFilter / FalseFilter
		{"1=1", "T"}, {"1=0", "F"}, {"TRUE", "T"}, {"FALSE", "F"}, {"NULL = NULL", "U"},
		// comparison operators on numbers, with integer/double promotion
		{"quantity = 12", "T"}, {"quantity <> 12", "F"}, {"quantity != 12", "F"},
		{"quantity > 11", "T"}, {"quantity >= 12", "T"}, {"quantity < 12", "F"}, {"quantity <= 12", "T"},
		{"quantity = 12.0", "T"}, {"price > 9", "T"}, {"price = 9.5", "T"}, {"price < 9.5E0", "F"},
		{"price * 2 = 19", "T"}, {"quantity / 5 = 2", "T"}, {"quantity / 5.0 = 2.4", "T"},
		{"quantity % 5 = 2", "T"}, {"-quantity = -12", "T"}, {"+quantity = 12", "T"}, {"- -quantity = 12", "T"},
		{"quantity + 1 * 2 = 14", "T"}, {"(quantity + 1) * 2 = 26", "T"}, {"quantity - 2 - 3 = 7", "T"},
		{"f32 = 1.5", "T"}, {"big > 1e19", "T"}, {"big = 18446744073709551615.0", "T"},
		{"zero = 0", "T"}, {".5 = 0.5", "T"}, {"5. = 5", "T"}, {"101.5E5 = 10150000", "T"},
		{"-9223372036854775808 < 0", "T"},
		// char is integral (C#): compares as its code point
		{"ch = 65", "T"},
		// strings: ordinal, case-sensitive
		{"color = 'red'", "T"}, {"color = 'Red'", "F"}, {"color > 'blue'", "T"}, {"color < 'red2'", "T"},
		{"'it''s' = 'it' + '''s'", "T"}, {"sym = 'abc'", "T"}, {"color + '!' = 'red!'", "T"},
		// booleans
		{"flag", "T"}, {"flag = TRUE", "T"}, {"off", "F"}, {"NOT flag", "F"}, {"flag <> off", "T"},
		// timestamps compare with timestamps; arithmetic in milliseconds
		{"sys.EnqueuedTimeUtc > when", "T"}, {"sys.EnqueuedTimeUtc - when = 100000000000", "T"},
		{"when + 1000 > when", "T"}, {"sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = sys.TimeToLive", "T"},
		{"id = id", "T"}, {"bin = bin", "T"},
		// system properties: case-insensitive names, Label = Subject
		{"sys.MessageId = 'm1'", "T"}, {"SYS.messageid = 'm1'", "T"}, {"sys.Label = 'invoice-2024'", "T"},
		{"sys.subject = sys.LABEL", "T"}, {"sys.CorrelationId = 'corr-7'", "T"}, {"sys.To = 'dest'", "T"},
		{"sys.ReplyTo = 'back'", "T"}, {"sys.ContentType = 'application/json'", "T"},
		{"sys.PartitionKey = 'pk'", "T"}, {"sys.SequenceNumber = 42", "T"}, {"sys.Size = 321", "T"},
		{"sys.TimeToLive = 60000", "T"}, {"sys.EnqueuedTime = sys.EnqueuedTimeUtc", "T"},
		{"sys.SessionId IS NULL", "T"}, {"sys.SessionId = 'x'", "U"}, {"sys.ReplyToSessionId IS NULL", "T"},
		{"sys.ScheduledEnqueueTimeUtc IS NULL", "T"}, {"EXISTS(sys.SessionId)", "F"}, {"EXISTS(sys.To)", "T"},
		// application properties: user. scope, case-insensitive names, exact match preferred
		{"user.color = 'red'", "T"}, {"COLOR = 'red'", "T"}, {"USER.Color = 'red'", "T"},
		{"Region = 'eu'", "T"}, {"region = 'us'", "T"}, {"REGION = 'eu'", "T"},
		{"[my prop] = 'spaced'", "T"}, {"\"my prop\" = 'spaced'", "T"}, {"user.[my prop] = 'spaced'", "T"},
		{"[MY PROP] = 'spaced'", "T"},
		// functions
		{"property('color') = 'red'", "T"}, {"p('sys.Label') = 'invoice-2024'", "T"},
		{"property('user.color') = 'red'", "T"}, {"property('col' + 'or') = 'red'", "T"},
		{"property(color) IS NULL", "T"}, {"newid() = newid()", "F"}, {"newid() IS NOT NULL", "T"},
		// missing properties are unknown; NULL propagates through arithmetic and comparison
		{"missing = 1", "U"}, {"missing <> 1", "U"}, {"missing + 1 = 2", "U"}, {"-missing = 1", "U"},
		{"nothing = 1", "U"}, {"missing = missing", "U"}, {"NOT missing = 1", "U"},
		{"dec = 1", "U"}, // decimals are carried through but compare as unknown
		// IS [NOT] NULL and EXISTS
		{"missing IS NULL", "T"}, {"nothing IS NULL", "T"}, {"color IS NULL", "F"}, {"color IS NOT NULL", "T"},
		{"missing IS NOT NULL", "F"}, {"EXISTS(color)", "T"}, {"EXISTS(nothing)", "T"}, {"EXISTS(missing)", "F"},
		{"EXISTS([my prop])", "T"}, {"EXISTS(COLOR)", "T"}, {"NOT EXISTS(missing)", "T"},
		// three-valued AND
		{"TRUE AND TRUE", "T"}, {"TRUE AND FALSE", "F"}, {"TRUE AND missing = 1", "U"},
		{"FALSE AND TRUE", "F"}, {"FALSE AND FALSE", "F"}, {"FALSE AND missing = 1", "F"},
		{"missing = 1 AND TRUE", "U"}, {"missing = 1 AND FALSE", "F"}, {"missing = 1 AND missing = 2", "U"},
		// three-valued OR
		{"TRUE OR TRUE", "T"}, {"TRUE OR FALSE", "T"}, {"TRUE OR missing = 1", "T"},
		{"FALSE OR TRUE", "T"}, {"FALSE OR FALSE", "F"}, {"FALSE OR missing = 1", "U"},
		{"missing = 1 OR TRUE", "T"}, {"missing = 1 OR FALSE", "U"}, {"missing = 1 OR missing = 2", "U"},
		// NOT
		{"NOT TRUE", "F"}, {"NOT FALSE", "T"}, {"NOT NOT TRUE", "T"}, {"NOT (missing = 1)", "U"},
		// precedence: NOT > AND > OR
		{"TRUE OR FALSE AND FALSE", "T"}, {"(TRUE OR FALSE) AND FALSE", "F"}, {"NOT FALSE AND FALSE", "F"},
		// short-circuit: the erroring right side is never evaluated
		{"FALSE AND 'a' + 1 = 1", "F"}, {"TRUE OR 1/0 = 1", "T"},
		// IN / NOT IN
		{"color IN ('red', 'blue')", "T"}, {"color IN ('blue')", "F"}, {"color NOT IN ('blue')", "T"},
		{"color NOT IN ('red')", "F"}, {"missing IN ('a')", "U"}, {"missing NOT IN ('a')", "U"},
		{"color IN ('blue', NULL)", "U"}, {"color IN ('red', NULL)", "T"}, {"color NOT IN ('blue', NULL)", "U"},
		{"quantity IN (1, 12.0)", "T"}, {"flag IN (FALSE, TRUE)", "T"}, {"off NOT IN (TRUE)", "T"},
		{"(quantity > 1) IN (TRUE)", "T"}, {"sys.To IN ('x', 'dest')", "T"}, {"color in ('RED')", "F"},
		// LIKE
		{"sys.Label LIKE 'inv%'", "T"}, {"sys.Label LIKE '%2024'", "T"}, {"sys.Label LIKE '%ice%'", "T"},
		{"sys.Label LIKE 'invoice-2024'", "T"}, {"sys.Label LIKE 'Invoice%'", "F"}, {"sys.Label LIKE '%'", "T"},
		{"sys.Label LIKE 'invoice-____'", "T"}, {"sys.Label LIKE 'invoice-___'", "F"}, {"sys.Label LIKE 'i%e%4'", "T"},
		{"sys.Label LIKE 'i%x%4'", "F"}, {"sys.Label LIKE '_nvoice%'", "T"}, {"sys.Label LIKE '%%2024'", "T"},
		{"sys.Label NOT LIKE 'inv%'", "F"}, {"color LIKE ''", "F"}, {"'' LIKE '%'", "T"}, {"'' LIKE '_'", "F"},
		{"pct LIKE '50\\%\\_off' ESCAPE '\\'", "T"}, {"pct LIKE '50!%%' ESCAPE '!'", "T"},
		{"'50x' LIKE '50!%' ESCAPE '!'", "F"}, {"'a%' LIKE '%!%' ESCAPE '!'", "T"},
		{"pct LIKE '%\\_%' ESCAPE '\\'", "T"}, {"color LIKE '%\\_%' ESCAPE '\\'", "F"},
		{"uni LIKE 'h_llo w_rld'", "T"}, {"uni LIKE 'h__llo%'", "F"}, {"uni LIKE '%ö%'", "T"},
		{"'a.b*c' LIKE 'a.b*c'", "T"}, {"'[x]' LIKE '[x]'", "T"}, {"'abcabcabd' LIKE '%abc%abd'", "T"},
		{"'aaa' LIKE 'a%a%a%a'", "F"}, {"'aaaa' LIKE 'a%a%a%a'", "T"},
		{"missing LIKE 'a%'", "U"}, {"color LIKE missing", "U"}, {"color LIKE 'r%' ESCAPE missing", "U"},
		{"color LIKE property('pat')", "U"}, {"color LIKE 'r' + '%'", "T"}, {"color LIKE color", "T"},
		// keywords are case-insensitive
		{"color = 'red' and quantity > 10 Or false", "T"}, {"missing is null", "T"}, {"color not in ('x')", "T"},
		{"exists(color)", "T"}, {"sys.label like 'inv%' escape '!'", "T"}, {"not true", "F"},
		// evaluation errors (C# binding: no implicit conversion between string and number)
		{"'a' + 1 = 1", "E"}, {"color = 1", "E"}, {"quantity = '12'", "E"}, {"flag = 1", "E"},
		{"flag > off", "E"}, {"color IN (1, 2)", "E"}, {"quantity LIKE '1%'", "E"}, {"1/0 = 1", "E"},
		{"quantity / 0 = 1", "E"}, {"price / 0 = 1", "E"}, {"quantity % 0 = 1", "E"}, {"-color = 1", "E"},
		{"color - 'a' = 'r'", "E"}, {"when = 5", "E"}, {"when + when = when", "E"}, {"id = 'x'", "E"},
		{"id > id", "E"}, {"color AND TRUE", "E"}, {"NOT color", "E"}, {"property(quantity) = 1", "E"},
		{"property('sys.No' + sym) = 1", "E"}, {"color LIKE 5 + quantity", "E"}, {"sys.SessionId = 1", "U"},
		{"(-9223372036854775807 - 1) / -1 = 0", "E"}, {"color LIKE 'x' ESCAPE color", "E"},
		{"sys.EnqueuedTimeUtc > '2020-01-01'", "E"},
	}
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			if got := tri(t, c.expr, nil, fixture()); got != c.want {
				t.Fatalf("%s = %s, want %s", c.expr, got, c.want)
			}
		})
	}
}

// A SessionId set to "" (stored as BlankSessionID) is the empty string to a filter, not
// NULL as a message without SessionId is; an action can set it and read it back.
func TestSQLBlankSessionID(t *testing.T) {
	blank := fixture()
	blank.SessionID = BlankSessionID
	for _, c := range []struct {
		expr string
		p    *Properties
		want string
	}{
		{"sys.SessionId = ''", blank, "T"}, {"sys.SessionId IS NULL", blank, "F"},
		{"sys.SessionId IS NOT NULL", blank, "T"}, {"EXISTS(sys.SessionId)", blank, "T"},
		{"sys.SessionId LIKE ''", blank, "T"}, {"sys.SessionId LIKE '_%'", blank, "F"},
		{"sys.SessionId + 'x' = 'x'", blank, "T"}, {"sys.SessionId IN ('', 'a')", blank, "T"},
		{"sys.SessionId = ''", fixture(), "U"}, {"sys.SessionId IS NULL", fixture(), "T"},
	} {
		if got := tri(t, c.expr, nil, c.p); got != c.want {
			t.Errorf("%s on SessionId %q = %s, want %s", c.expr, c.p.SessionID, got, c.want)
		}
	}
	a, err := CompileSQLAction("SET sys.SessionId = ''; SET user.s = sys.SessionId", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := fixture()
	if err := a.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get("s"); p.SessionID != BlankSessionID || got.Kind != KindString || got.S != "" {
		t.Fatalf("after SET: SessionID %q, user.s %+v", p.SessionID, got)
	}
}

func TestSQLArithmeticKinds(t *testing.T) {
	cases := []struct {
		expr string
		want val
	}{
		{"1 + 2", val{k: vInt, i: 3}},
		{"7 / 2", val{k: vInt, i: 3}},
		{"-7 / 2", val{k: vInt, i: -3}},
		{"-7 % 3", val{k: vInt, i: -1}},
		{"7 / 2.0", val{k: vDouble, f: 3.5}},
		{"1.5 + 1", val{k: vDouble, f: 2.5}},
		{"7.5 % 2", val{k: vDouble, f: 1.5}},
		{"9223372036854775807 + 1", val{k: vInt, i: math.MinInt64}}, // wraps like C# unchecked
		{"'a' + 'b'", val{k: vString, s: "ab"}},
		{"quantity * 2", val{k: vInt, i: 24}},
		{"sys.SequenceNumber + 1", val{k: vInt, i: 43}},
		{"when + 5", val{k: vTime, i: 1_600_000_000_005}},
		{"5 + when", val{k: vTime, i: 1_600_000_000_005}},
		{"when - 5", val{k: vTime, i: 1_599_999_999_995}},
		{"NULL + 1", nullVal},
		{"missing * 2", nullVal},
	}
	for _, c := range cases {
		got, err := value(t, c.expr, fixture())
		if err != nil || got != c.want {
			t.Errorf("%s = %+v, %v; want %+v", c.expr, got, err, c.want)
		}
	}
}

// Every numeric width of rule.Kind compares by value, and signed kinds read correctly
// whether N holds the narrow or the sign-extended bit pattern.
func TestSQLNumericKinds(t *testing.T) {
	cases := []struct {
		v    Value
		want string // a predicate on x that must be TRUE
	}{
		{Value{Kind: KindUbyte, N: 200}, "x = 200"},
		{Value{Kind: KindUshort, N: 60000}, "x = 60000"},
		{Value{Kind: KindUint, N: 4_000_000_000}, "x = 4000000000"},
		{Value{Kind: KindUlong, N: 1 << 40}, "x = 1099511627776"},
		{Value{Kind: KindUlong, N: math.MaxUint64}, "x > 9223372036854775807"},
		{Value{Kind: KindByte, N: 0xFB}, "x = -5"},
		{Value{Kind: KindByte, N: uint64(math.MaxUint64 - 4)}, "x = -5"},
		{Value{Kind: KindShort, N: 0xFFFE}, "x = -2"},
		{Value{Kind: KindInt, N: 0xFFFFFFFF}, "x = -1"},
		{Value{Kind: KindInt, N: uint64(math.MaxUint64)}, "x = -1"},
		{vLong(-1 << 62), "x = -4611686018427387904"},
		{vFloat(0.25), "x = 0.25"},
		{vDbl(-2.5), "x = -2.5"},
		{vDbl(math.NaN()), "x <> x"},
		{Value{Kind: KindChar, N: 'é'}, "x = 233"},
		{Value{Kind: KindBool, N: 1}, "x = TRUE"},
		{vTS(-5), "x < x + 1"},
		{vStr("s"), "x = 's'"},
		{vSym("s"), "x = 's'"},
		{Value{Kind: KindNull}, "x IS NULL"},
		{Value{Kind: KindDecimal32, S: "\x00\x00\x00\x01"}, "x IS NULL"},
		{Value{Kind: KindDecimal128, S: strings.Repeat("\x00", 16)}, "EXISTS(x)"},
	}
	for _, c := range cases {
		p := &Properties{App: []Property{{"x", c.v}}}
		if got := tri(t, c.want, nil, p); got != "T" {
			t.Errorf("%v: %s = %s, want T", c.v, c.want, got)
		}
	}
	// NaN: every comparison but <> is false.
	p := &Properties{App: []Property{{"x", vDbl(math.NaN())}}}
	for _, e := range []string{"x = x", "x < 1", "x >= 1", "x = 1.0"} {
		if got := tri(t, e, nil, p); got != "F" {
			t.Errorf("NaN: %s = %s, want F", e, got)
		}
	}
}

func TestSQLParameters(t *testing.T) {
	params := []Property{
		{"@color", vStr("red")},
		{"min", vInt32(10)},
		{"@Ratio", vDbl(0.5)},
		{"@since", vTS(1_650_000_000_000)},
		{"@nul", Value{Kind: KindNull}},
	}
	cases := []struct{ expr, want string }{
		{"color = @color", "T"}, {"quantity > @min", "T"}, {"quantity * @ratio = 6", "T"},
		{"@COLOR = 'red'", "T"}, {"sys.EnqueuedTimeUtc > @since", "T"}, {"when > @since", "F"},
		{"color = @nul", "U"}, {"@nul IS NULL", "T"},
	}
	for _, c := range cases {
		if got := tri(t, c.expr, params, fixture()); got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, got, c.want)
		}
	}
	_, err := CompileSQLFilter("color = @undefined", params)
	var se *SQLError
	if !errors.As(err, &se) || se.Pos != 9 || !strings.Contains(se.Reason, "@undefined is not defined") {
		t.Fatalf("undefined parameter: %v", err)
	}
}

func TestSQLConstantFolding(t *testing.T) {
	for expr, want := range map[string]bool{"1=1": true, "1=0": false, "1 + 1 = 2 AND NOT FALSE": true,
		"NULL = 1": false, "'a' LIKE 'a%'": true, " 1 = 1 ": true} {
		f, err := CompileSQLFilter(expr, nil)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if c, ok := f.(constFilter); !ok || bool(c) != want {
			t.Errorf("%s compiled to %#v, want constFilter(%v)", expr, f, want)
		}
	}
	// A constant that fails is left for run time (and fails there), so it is an
	// evaluation error, not a compile error.
	f, err := CompileSQLFilter("1/0 = 1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Match(fixture()); !errors.Is(err, ErrEvaluation) {
		t.Fatalf("1/0 = 1: %v", err)
	}
}

func TestSQLFilterErrorsAreEvalErrors(t *testing.T) {
	f, err := CompileSQLFilter("color + 1 = 2", nil)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := f.Match(fixture())
	var ee *EvalError
	if ok || !errors.As(err, &ee) || ee.Pos != 7 || !strings.Contains(ee.Reason, "string and long") {
		t.Fatalf("Match = %v, %v", ok, err)
	}
	// A bare non-boolean property as the whole filter is an evaluation error.
	f, _ = CompileSQLFilter("color", nil)
	if _, err := f.Match(fixture()); !errors.Is(err, ErrEvaluation) {
		t.Fatalf("bare string property: %v", err)
	}
	// A plain non-match is (false, nil).
	f, _ = CompileSQLFilter("color = 'blue'", nil)
	if ok, err := f.Match(fixture()); ok || err != nil {
		t.Fatalf("non-match = %v, %v", ok, err)
	}
}

func TestSQLCompileErrors(t *testing.T) {
	long := "a = '" + strings.Repeat("x", MaxSQLLength) + "'"
	deep := strings.Repeat("(", MaxSQLDepth+1) + "1=1" + strings.Repeat(")", MaxSQLDepth+1)
	wide := "a = " + strings.Repeat("1+", (MaxSQLNodes-3)/2+1) + "1"
	cases := []struct {
		expr   string
		pos    int
		reason string
		limit  string
	}{
		{"", 1, "empty filter expression", ""},
		{"   ", 1, "empty filter expression", ""},
		{"(a = 1", 7, "expected ')' but found end of expression", ""},
		{"(a = 1 AND b = 2", 17, "expected ')' but found end of expression", ""},
		{"a = 1 AND (b = 2 c = 3)", 18, "expected ')' but found 'c'", ""},
		{"a = (1 + 2 b", 12, "expected ')' but found 'b'", ""},
		{"a = (1 AND b = 2", 6, "AND needs a boolean predicate", ""},
		{"a IN ('x' AND b)", 11, "expected ',' or ')' in IN list but found 'AND'", ""},
		{"a = 1)", 6, "unexpected ')'", ""},
		{"a = 'abc", 5, "unterminated string constant", ""},
		{"[abc = 1", 1, "unterminated delimited identifier", ""},
		{"\"abc = 1", 1, "unterminated quoted identifier", ""},
		{"[] = 1", 1, "empty identifier", ""},
		{"a = 1 AND", 10, "expected an expression but found end of expression", ""},
		{"a == 1", 4, "expected an expression but found '='", ""},
		{"a = 1 = 2", 7, "unexpected '='", ""},
		{"a ! b", 3, "unexpected character '!'", ""},
		{"a = #", 5, "unexpected character '#'", ""},
		{"a = 12abc", 7, "malformed number", ""},
		{"a = 1e", 7, "exponent has no digits", ""},
		{"a = 99999999999999999999", 5, "out of range for long", ""},
		{"a = 1e999", 5, "out of range for double", ""},
		{"a = -9223372036854775809", 5, "out of range for long", ""},
		{"a NOT b", 7, "expected LIKE or IN after NOT", ""},
		{"a IS 1", 6, "expected NULL but found '1'", ""},
		{"a IN ()", 7, "IN list must not be empty", ""},
		{"a IN (1 2)", 9, "expected ',' or ')' in IN list", ""},
		{"a IN 1", 6, "expected '(' after IN", ""},
		{"EXISTS a", 8, "expected '(' after EXISTS", ""},
		{"EXISTS(1)", 8, "expected a property name but found '1'", ""},
		{"sys.Nope = 1", 5, "unknown system property sys.Nope", ""},
		{"sys.DeliveryCount = 1", 5, "unknown system property sys.DeliveryCount", ""},
		{"foo.bar = 1", 1, "unknown scope \"foo\"", ""},
		{"sys. = 1", 6, "expected a property name after 'sys.'", ""},
		{"user.AND = 1", 6, "expected a property name after 'user.'", ""},
		{"frob(1) = 1", 1, "unknown function frob()", ""},
		{"newid(1) = 1", 7, "expected ')' (newid takes no arguments)", ""},
		{"property(1) = 1", 10, "argument of property() is long, not a string", ""},
		{"property('sys.Nope') = 1", 10, "unknown system property sys.Nope", ""},
		{"a = @", 5, "'@' must be followed by a parameter name", ""},
		{"1", 1, "a filter needs a boolean predicate", ""},
		{"'x'", 1, "a filter needs a boolean predicate", ""},
		{"a + 1", 3, "a filter needs a boolean predicate", ""},
		{"1 AND a = 1", 1, "AND needs a boolean predicate", ""},
		{"a = 1 OR 2", 10, "OR needs a boolean predicate", ""},
		{"NOT 5", 5, "NOT needs a boolean predicate", ""},
		{"(a = 1) + 1 = 2", 1, "operator + cannot be applied to a boolean", ""},
		{"TRUE LIKE 'x'", 1, "operator LIKE cannot be applied to a boolean", ""},
		{"a LIKE 'x' ESCAPE 'ab'", 8, "ESCAPE must be exactly one character", ""},
		{"a LIKE 'x!' ESCAPE '!'", 8, "ends with the escape character", ""},
		{"a LIKE 5", 8, "LIKE pattern is long, not a string", ""},
		{"a = 1 AND AND", 11, "expected an expression but found 'AND'", ""},
		{"SET a = 1", 1, "expected an expression but found 'SET'", ""},
		{long, MaxSQLLength + 1, "the limit is 1024 (MaxSQLLength)", "MaxSQLLength"},
		{deep, MaxSQLDepth + 1, "more than 32 levels deep (MaxSQLDepth)", "MaxSQLDepth"},
		{strings.Repeat("NOT ", MaxSQLDepth+1) + "TRUE", 4*MaxSQLDepth + 1, "(MaxSQLDepth)", "MaxSQLDepth"},
		{wide, 0, "(MaxSQLNodes)", "MaxSQLNodes"},
	}
	for _, c := range cases {
		name := c.expr
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			_, err := CompileSQLFilter(c.expr, nil)
			var se *SQLError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SQLError", err)
			}
			if !errors.Is(err, ErrInvalidSQL) {
				t.Errorf("not ErrInvalidSQL")
			}
			if errors.Is(err, ErrSQLLimit) != (c.limit != "") || se.Limit != c.limit {
				t.Errorf("limit = %q, want %q", se.Limit, c.limit)
			}
			if c.pos != 0 && se.Pos != c.pos {
				t.Errorf("pos = %d, want %d (%v)", se.Pos, c.pos, err)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not contain %q", err, c.reason)
			}
		})
	}
}

func TestSQLErrorMessageFormat(t *testing.T) {
	_, err := CompileSQLFilter("(a = 1 AND b = 2", nil)
	want := "rule: SQL syntax error at position 17: expected ')' but found end of expression"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	_, err = CompileSQLFilter("a IN ('x' AND b = 2)", nil)
	want = "rule: SQL syntax error at position 11: expected ',' or ')' in IN list but found 'AND'"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	_, err = CompileSQLFilter("sys.Nope = 1", nil)
	want = "rule: SQL error at position 5: unknown system property sys.Nope"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
}

// Positions count characters, not bytes.
func TestSQLErrorPositionIsInCharacters(t *testing.T) {
	_, err := CompileSQLFilter("[héllo] = 'wörld' AND (", nil)
	var se *SQLError
	if !errors.As(err, &se) || se.Pos != 24 {
		t.Fatalf("err = %v", err)
	}
	// The length limit counts characters too.
	if _, err := CompileSQLFilter("a = '"+strings.Repeat("é", MaxSQLLength-6)+"'", nil); err != nil {
		t.Fatalf("1023 characters rejected: %v", err)
	}
}

func TestSQLMaxNodesBoundary(t *testing.T) {
	// Just under the node limit compiles.
	// a, k+1 constants, k additions and the comparison: 2k+3 nodes.
	k := (MaxSQLNodes - 3) / 2
	expr := "a = " + strings.Repeat("1+", k) + "1"
	if _, err := CompileSQLFilter(expr, nil); err != nil {
		t.Fatalf("%d nodes rejected: %v", 2*k+3, err)
	}
	expr = "a = " + strings.Repeat("1+", k+1) + "1"
	if _, err := CompileSQLFilter(expr, nil); !errors.Is(err, ErrSQLLimit) {
		t.Fatalf("%d nodes accepted: %v", 2*k+5, err)
	}
	deep := strings.Repeat("(", MaxSQLDepth) + "1=1" + strings.Repeat(")", MaxSQLDepth)
	if _, err := CompileSQLFilter(deep, nil); err != nil {
		t.Fatalf("depth %d rejected: %v", MaxSQLDepth, err)
	}
}

func TestCompileRuleSpecs(t *testing.T) { // S-TOP-1
	p := fixture()
	for _, c := range []struct {
		spec Spec
		want bool
	}{
		{Spec{Name: DefaultRuleName, Filter: FilterSpec{Kind: FilterTrue}}, true},
		{Spec{Filter: FilterSpec{Kind: FilterFalse}}, false},
		{Spec{Filter: FilterSpec{Kind: FilterSQL, SQL: "1=1"}}, true},
		{Spec{Filter: FilterSpec{Kind: FilterSQL, SQL: "1=0"}}, false},
		{Spec{Filter: FilterSpec{Kind: FilterSQL, SQL: "sys.Label LIKE @p",
			Parameters: []Property{{"@p", vStr("inv%")}}}}, true},
		{Spec{Filter: FilterSpec{Kind: FilterCorrelation, Correlation: Correlation{CorrelationID: "corr-7",
			Properties: []Property{{"quantity", vLong(12)}, {"color", vStr("red")}}}}}, true},
		{Spec{Filter: FilterSpec{Kind: FilterCorrelation, Correlation: Correlation{Subject: "other"}}}, false},
		{Spec{Filter: FilterSpec{Kind: FilterCorrelation, Correlation: Correlation{
			Properties: []Property{{"quantity", vStr("12")}}}}}, false},
	} {
		r, err := Compile(c.spec)
		if err != nil {
			t.Fatalf("%+v: %v", c.spec, err)
		}
		if got, err := r.Filter.Match(p); err != nil || got != c.want {
			t.Errorf("%+v: Match = %v, %v; want %v", c.spec.Filter, got, err, c.want)
		}
	}
	if _, err := Compile(Spec{Filter: FilterSpec{Kind: FilterSQL, SQL: "a ="}}); !errors.Is(err, ErrInvalidSQL) {
		t.Fatalf("bad SQL filter: %v", err)
	}
	if _, err := Compile(Spec{Filter: FilterSpec{Kind: FilterTrue}, Action: ActionSpec{SQL: "SET"}}); !errors.Is(err, ErrInvalidSQL) {
		t.Fatalf("bad SQL action: %v", err)
	}
}

func TestEqualAcrossWidths(t *testing.T) {
	cases := []struct {
		a, b Value
		want bool
	}{
		{vLong(12), vInt32(12), true},
		{vLong(12), vDbl(12), true},
		{Value{Kind: KindByte, N: 0xFF}, vLong(-1), true},
		{Value{Kind: KindUbyte, N: 0xFF}, vLong(-1), false},
		{vLong(1<<53 + 1), Value{Kind: KindUlong, N: 1<<53 + 1}, true},
		{vLong(1<<53 + 1), vLong(1 << 53), false}, // exact, not via float64
		{vStr("12"), vLong(12), false},
		{vStr("a"), vSym("a"), false},
		{vStr("a"), vStr("a"), true},
		{Value{Kind: KindChar, N: 65}, vLong(65), false},
	}
	for _, c := range cases {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("Equal(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestLikeMatchesNaiveMatcher(t *testing.T) {
	// Compare the compiled matcher with a naive recursive one over all short
	// patterns and strings on a small alphabet.
	alpha := []string{"a", "b", "%", "_"}
	var pats []string
	var gen func(string, int)
	gen = func(s string, n int) {
		pats = append(pats, s)
		if n == 0 {
			return
		}
		for _, c := range alpha {
			gen(s+c, n-1)
		}
	}
	gen("", 5)
	strs := []string{"", "a", "b", "ab", "ba", "aa", "aab", "abab", "bbba", "ababa", "aaaaab"}
	for _, pat := range pats {
		cp, reason := compileLike(pat, -1)
		if reason != "" {
			t.Fatal(reason)
		}
		for _, s := range strs {
			if got, want := cp.match(s), naiveLike([]rune(pat), []rune(s)); got != want {
				t.Fatalf("%q LIKE %q = %v, want %v", s, pat, got, want)
			}
		}
	}
}

func naiveLike(p, s []rune) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	switch p[0] {
	case '%':
		for i := 0; i <= len(s); i++ {
			if naiveLike(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '_':
		return len(s) > 0 && naiveLike(p[1:], s[1:])
	}
	return len(s) > 0 && s[0] == p[0] && naiveLike(p[1:], s[1:])
}

func TestSQLFilterDoesNotModifyProperties(t *testing.T) {
	p := fixture()
	before := fixture()
	f, err := CompileSQLFilter("color = 'red' AND property('x') IS NULL AND newid() IS NOT NULL AND sys.Label LIKE 'i%'", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Match(p); err != nil {
		t.Fatal(err)
	}
	if !equalProps(p, before) {
		t.Fatalf("Match modified the message")
	}
}

func equalProps(a, b *Properties) bool {
	x, y := *a, *b
	x.App, y.App = nil, nil
	if !reflect.DeepEqual(x, y) || len(a.App) != len(b.App) {
		return false
	}
	for i := range a.App {
		if a.App[i] != b.App[i] {
			return false
		}
	}
	return true
}

// The examples of the Service Bus documentation ("Set subscription filters", "SQL
// filter syntax") compile and give the documented result.
func TestDocumentedExamples(t *testing.T) { // S-TOP-1
	p := &Properties{Subject: "the bus", To: "Store6", CorrelationID: "abc-1", MessageID: "xxxx",
		App: []Property{
			{"StoreId", vStr("Store8")},
			{"MessageProperty", vInt32(3)},
			{"MessageProperty2", vInt32(3)},
			{"SuperHero", vStr("SuperMan Returns")},
			{"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName", vStr("account")},
			{"tag", vStr("topic")},
			{"source", vStr("orders")},
		}}
	for _, c := range []struct{ expr, want string }{
		{"sys.label LIKE '%bus%'", "T"},
		{"sys.messageid = 'xxxx'", "T"},
		{"sys.correlationid like 'abc-%'", "T"},
		{"MessageProperty = 'A'", "E"}, // MessageProperty holds an int here
		{"user.SuperHero like 'SuperMan%'", "T"},
		{"\"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName\" = 'account'", "T"},
		{"MessageProperty = 1", "F"},
		{"MessageProperty > 1", "T"},
		{"MessageProperty > 2.08", "T"},
		{"MessageProperty = 1 AND MessageProperty2 = 3", "F"},
		{"MessageProperty = 1 OR MessageProperty2 = 3", "T"},
		{"StoreId IN('Store1', 'Store2', 'Store3')", "F"},
		{"sys.To IN ('Store5','Store6','Store7') OR StoreId = 'Store8'", "T"},
		{"sys.To NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8') OR " +
			"StoreId NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8')", "F"},
		{"sys.Label LIKE '%bus%' OR user.tag IN ('queue', 'topic', 'subscription')", "T"},
		{"source = @stringParam", "T"},
		{"color='blue' AND quantity=10", "U"},
	} {
		got := tri(t, c.expr, []Property{{"@stringParam", vStr("orders")}}, p)
		if got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, got, c.want)
		}
	}
}
