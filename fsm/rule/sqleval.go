package rule

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"
)

// vkind is the type of a value during evaluation. Every rule.Kind maps onto one of
// these (see fromValue); vNull doubles as SQL's unknown.
type vkind uint8

const (
	vNull   vkind = iota // NULL or unknown
	vBool                // i is 0 or 1
	vInt                 // i; every integer kind, and char (as its code point)
	vDouble              // f; float and double
	vString              // s; string and symbol
	vTime                // i = Unix milliseconds
	vUUID                // s = 16 raw bytes
	vBinary              // s = the bytes
)

var vkindNames = [...]string{"null", "bool", "long", "double", "string", "timestamp", "uuid", "binary"}

func (k vkind) String() string { return vkindNames[k] }

// val is one value during evaluation. It is passed by value and never boxed, so
// evaluation does not allocate.
type val struct {
	k vkind
	i int64
	f float64
	s string
}

var (
	nullVal  = val{}
	trueVal  = val{k: vBool, i: 1}
	falseVal = val{k: vBool}
)

func boolVal(b bool) val {
	if b {
		return trueVal
	}
	return falseVal
}

// fromValue converts a stored property value. Signed kinds are sign-extended from
// their own width and unsigned kinds masked to it, so both the narrow and the
// sign-extended bit patterns in Value.N read correctly. A ulong above MaxInt64 becomes
// a double. Decimals read as unknown.
func fromValue(v Value) val {
	switch v.Kind {
	case KindBool:
		return boolVal(v.N != 0)
	case KindUbyte:
		return val{k: vInt, i: int64(uint8(v.N))}
	case KindUshort:
		return val{k: vInt, i: int64(uint16(v.N))}
	case KindUint:
		return val{k: vInt, i: int64(uint32(v.N))}
	case KindUlong:
		if v.N > math.MaxInt64 {
			return val{k: vDouble, f: float64(v.N)}
		}
		return val{k: vInt, i: int64(v.N)}
	case KindByte:
		return val{k: vInt, i: int64(int8(v.N))}
	case KindShort:
		return val{k: vInt, i: int64(int16(v.N))}
	case KindInt:
		return val{k: vInt, i: int64(int32(v.N))}
	case KindLong:
		return val{k: vInt, i: int64(v.N)}
	case KindChar:
		return val{k: vInt, i: int64(uint32(v.N))}
	case KindFloat, KindDouble:
		return val{k: vDouble, f: math.Float64frombits(v.N)}
	case KindTimestamp:
		return val{k: vTime, i: int64(v.N)}
	case KindUUID:
		return val{k: vUUID, s: v.S}
	case KindString, KindSymbol:
		return val{k: vString, s: v.S}
	case KindBinary:
		return val{k: vBinary, s: v.S}
	}
	return nullVal
}

// toValue converts an evaluation result into a property value of its natural kind.
func toValue(v val) Value {
	switch v.k {
	case vBool:
		return Value{Kind: KindBool, N: uint64(v.i)}
	case vInt:
		return Value{Kind: KindLong, N: uint64(v.i)}
	case vDouble:
		return Value{Kind: KindDouble, N: math.Float64bits(v.f)}
	case vString:
		return Value{Kind: KindString, S: v.s}
	case vTime:
		return Value{Kind: KindTimestamp, N: uint64(v.i)}
	case vUUID:
		return Value{Kind: KindUUID, S: v.s}
	case vBinary:
		return Value{Kind: KindBinary, S: v.s}
	}
	return Value{Kind: KindNull}
}

// node is one compiled expression. eval must not modify p and must not allocate on
// success unless it builds a new string.
type node interface {
	eval(p *Properties) (val, error)
}

func evalErr(pos int, format string, args ...any) error {
	return &EvalError{Pos: pos, Reason: sprintf(format, args...)}
}

// truth reads v as a three-valued boolean: 1 true, 0 false, -1 unknown.
func truth(v val, pos int, op string) (int, error) {
	switch v.k {
	case vBool:
		return int(v.i), nil
	case vNull:
		return -1, nil
	}
	return 0, evalErr(pos, "operand of %s is %s, not a boolean", op, v.k)
}

type constNode struct{ v val }

func (n *constNode) eval(*Properties) (val, error) { return n.v, nil }

// userProp reads an application property. Names are case-insensitive: an exact
// match wins, otherwise the first property (in wire order) equal under Unicode case
// folding.
type userProp struct{ name string }

func (n *userProp) eval(p *Properties) (val, error) {
	if v := lookupUser(p, n.name); v != nil {
		return fromValue(*v), nil
	}
	return nullVal, nil
}

// lookupUser finds the application property named name (see userProp).
func lookupUser(p *Properties, name string) *Value {
	if i := findUser(p, name); i >= 0 {
		return &p.App[i].Value
	}
	return nil
}

func findUser(p *Properties, name string) int {
	for i := range p.App {
		if p.App[i].Key == name {
			return i
		}
	}
	for i := range p.App {
		if strings.EqualFold(p.App[i].Key, name) {
			return i
		}
	}
	return -1
}

type sysProp struct{ id sysID }

func (n *sysProp) eval(p *Properties) (val, error) { return sysValue(p, n.id), nil }

// dynProp is property(name) / p(name) with a name computed at run time.
type dynProp struct {
	name node
	pos  int
}

func (n *dynProp) eval(p *Properties) (val, error) {
	nv, err := n.name.eval(p)
	if err != nil || nv.k == vNull {
		return nullVal, err
	}
	if nv.k != vString {
		return nullVal, evalErr(n.pos, "argument of property() is %s, not a string", nv.k)
	}
	sys, name := splitScope(nv.s)
	if !sys {
		return (&userProp{name: name}).eval(p)
	}
	id, ok := lookupSys(name)
	if !ok {
		return nullVal, evalErr(n.pos, "unknown system property sys.%s", name)
	}
	return sysValue(p, id), nil
}

// splitScope splits "sys.X" / "user.X" (scope case-insensitive); anything else is a
// user property name as written.
func splitScope(s string) (sys bool, name string) {
	if len(s) > 4 && strings.EqualFold(s[:4], "sys.") {
		return true, s[4:]
	}
	if len(s) > 5 && strings.EqualFold(s[:5], "user.") {
		return false, s[5:]
	}
	return false, s
}

// newidNode is newid(). The state machine may not use randomness, so the GUID is
// derived (FNV-128a) from the expression, the call's position in it and the message's
// sequence number, enqueued time and message ID: distinct across messages and call
// sites, identical on every replica.
type newidNode struct {
	expr string
	pos  int
}

func (n *newidNode) eval(p *Properties) (val, error) {
	if p == nil {
		return nullVal, evalErr(n.pos, "newid() needs a message")
	}
	h := fnv.New128a()
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], uint64(n.pos))
	binary.BigEndian.PutUint64(b[8:], uint64(p.SequenceNumber))
	binary.BigEndian.PutUint64(b[16:], uint64(p.EnqueuedTime))
	h.Write(b[:])
	h.Write([]byte(n.expr))
	h.Write([]byte{0})
	h.Write([]byte(p.MessageID))
	sum := h.Sum(nil)
	sum[6] = sum[6]&0x0f | 0x40 // version 4 layout
	sum[8] = sum[8]&0x3f | 0x80 // RFC 4122 variant
	return val{k: vUUID, s: string(sum)}, nil
}

type notNode struct {
	x   node
	pos int
}

func (n *notNode) eval(p *Properties) (val, error) {
	v, err := n.x.eval(p)
	if err != nil {
		return nullVal, err
	}
	t, err := truth(v, n.pos, "NOT")
	if err != nil {
		return nullVal, err
	}
	if t < 0 {
		return nullVal, nil
	}
	return boolVal(t == 0), nil
}

// andNode evaluates left to right and stops at the first FALSE.
type andNode struct {
	l, r node
	pos  int
}

func (n *andNode) eval(p *Properties) (val, error) {
	v, err := n.l.eval(p)
	if err != nil {
		return nullVal, err
	}
	lt, err := truth(v, n.pos, "AND")
	if err != nil || lt == 0 {
		return falseVal, err
	}
	if v, err = n.r.eval(p); err != nil {
		return nullVal, err
	}
	rt, err := truth(v, n.pos, "AND")
	if err != nil {
		return nullVal, err
	}
	if rt == 0 {
		return falseVal, nil
	}
	if lt < 0 || rt < 0 {
		return nullVal, nil
	}
	return trueVal, nil
}

// orNode evaluates left to right and stops at the first TRUE.
type orNode struct {
	l, r node
	pos  int
}

func (n *orNode) eval(p *Properties) (val, error) {
	v, err := n.l.eval(p)
	if err != nil {
		return nullVal, err
	}
	lt, err := truth(v, n.pos, "OR")
	if err != nil {
		return nullVal, err
	}
	if lt == 1 {
		return trueVal, nil
	}
	if v, err = n.r.eval(p); err != nil {
		return nullVal, err
	}
	rt, err := truth(v, n.pos, "OR")
	if err != nil {
		return nullVal, err
	}
	if rt == 1 {
		return trueVal, nil
	}
	if lt < 0 || rt < 0 {
		return nullVal, nil
	}
	return falseVal, nil
}

// negNode is unary minus; plus=true makes it unary plus (a numeric no-op).
type negNode struct {
	x    node
	plus bool
	pos  int
}

func (n *negNode) eval(p *Properties) (val, error) {
	v, err := n.x.eval(p)
	if err != nil {
		return nullVal, err
	}
	switch v.k {
	case vNull:
		return nullVal, nil
	case vInt:
		if !n.plus {
			v.i = -v.i // wraps for MinInt64, as C# unchecked negation does
		}
		return v, nil
	case vDouble:
		if !n.plus {
			v.f = -v.f
		}
		return v, nil
	}
	op := "-"
	if n.plus {
		op = "+"
	}
	return nullVal, evalErr(n.pos, "unary %s cannot be applied to %s", op, v.k)
}

type arithNode struct {
	op   byte // + - * / %
	l, r node
	pos  int
}

func (n *arithNode) eval(p *Properties) (val, error) {
	a, err := n.l.eval(p)
	if err != nil {
		return nullVal, err
	}
	b, err := n.r.eval(p)
	if err != nil {
		return nullVal, err
	}
	return arith(n.op, a, b, n.pos)
}

// arith applies a binary arithmetic operator (C# binding, with the deviations listed
// in docs/sql-filters.md).
func arith(op byte, a, b val, pos int) (val, error) {
	if a.k == vNull || b.k == vNull {
		return nullVal, nil
	}
	switch {
	case a.k == vInt && b.k == vInt:
		x, y := a.i, b.i
		switch op {
		case '+':
			return val{k: vInt, i: x + y}, nil
		case '-':
			return val{k: vInt, i: x - y}, nil
		case '*':
			return val{k: vInt, i: x * y}, nil
		}
		if y == 0 {
			return nullVal, evalErr(pos, "division by zero")
		}
		if x == math.MinInt64 && y == -1 {
			return nullVal, evalErr(pos, "integer overflow")
		}
		if op == '/' {
			return val{k: vInt, i: x / y}, nil
		}
		return val{k: vInt, i: x % y}, nil
	case isNum(a) && isNum(b):
		x, y := num(a), num(b)
		switch op {
		case '+':
			return val{k: vDouble, f: x + y}, nil
		case '-':
			return val{k: vDouble, f: x - y}, nil
		case '*':
			return val{k: vDouble, f: x * y}, nil
		}
		if y == 0 {
			return nullVal, evalErr(pos, "division by zero")
		}
		if op == '/' {
			return val{k: vDouble, f: x / y}, nil
		}
		return val{k: vDouble, f: math.Mod(x, y)}, nil
	case a.k == vString && b.k == vString && op == '+':
		return val{k: vString, s: a.s + b.s}, nil
	case a.k == vTime && b.k == vInt && (op == '+' || op == '-'):
		if op == '-' {
			return val{k: vTime, i: a.i - b.i}, nil
		}
		return val{k: vTime, i: a.i + b.i}, nil
	case a.k == vInt && b.k == vTime && op == '+':
		return val{k: vTime, i: a.i + b.i}, nil
	case a.k == vTime && b.k == vTime && op == '-':
		return val{k: vInt, i: a.i - b.i}, nil
	}
	return nullVal, evalErr(pos, "operator %c cannot be applied to %s and %s", op, a.k, b.k)
}

func isNum(v val) bool { return v.k == vInt || v.k == vDouble }

func num(v val) float64 {
	if v.k == vInt {
		return float64(v.i)
	}
	return v.f
}

// cmpOp is a comparison operator.
type cmpOp uint8

const (
	opEq cmpOp = iota
	opNe
	opLt
	opLe
	opGt
	opGe
)

var cmpOpNames = [...]string{"=", "<>", "<", "<=", ">", ">="}

type cmpNode struct {
	op   cmpOp
	l, r node
	pos  int
}

func (n *cmpNode) eval(p *Properties) (val, error) {
	a, err := n.l.eval(p)
	if err != nil {
		return nullVal, err
	}
	b, err := n.r.eval(p)
	if err != nil {
		return nullVal, err
	}
	return compareOp(n.op, a, b, n.pos)
}

func compareOp(op cmpOp, a, b val, pos int) (val, error) {
	if a.k == vNull || b.k == vNull {
		return nullVal, nil
	}
	c, ordered, err := compare(a, b, pos)
	if err != nil {
		return nullVal, err
	}
	if !ordered && op >= opLt {
		return nullVal, evalErr(pos, "operator %s is not defined for %s", cmpOpNames[op], a.k)
	}
	switch op {
	case opEq:
		return boolVal(c == 0), nil
	case opNe:
		return boolVal(c != 0), nil
	case opLt:
		return boolVal(c == -1), nil
	case opLe:
		return boolVal(c == -1 || c == 0), nil
	case opGt:
		return boolVal(c == 1), nil
	}
	return boolVal(c == 1 || c == 0), nil
}

// unordered is compare's result for NaN operands: every comparison but <> is false.
const unordered = 2

// compare compares two non-null values: c is -1, 0, 1 or unordered; ordered reports
// whether <, <=, >, >= are defined for the type. Values of types C# cannot compare
// (string with number, bool with number, ...) are an error.
func compare(a, b val, pos int) (c int, ordered bool, err error) {
	switch {
	case a.k == vInt && b.k == vInt, a.k == vTime && b.k == vTime:
		return cmpInt(a.i, b.i), true, nil
	case isNum(a) && isNum(b):
		x, y := num(a), num(b)
		switch {
		case x < y:
			return -1, true, nil
		case x > y:
			return 1, true, nil
		case x == y:
			return 0, true, nil
		}
		return unordered, true, nil
	case a.k == vString && b.k == vString:
		return strings.Compare(a.s, b.s), true, nil
	case a.k == b.k && (a.k == vBool || a.k == vUUID || a.k == vBinary):
		if a.i == b.i && a.s == b.s {
			return 0, false, nil
		}
		return 1, false, nil
	}
	return 0, false, evalErr(pos, "cannot compare %s with %s", a.k, b.k)
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// isNullNode is x IS [NOT] NULL: never unknown.
type isNullNode struct {
	x   node
	not bool
}

func (n *isNullNode) eval(p *Properties) (val, error) {
	v, err := n.x.eval(p)
	if err != nil {
		return nullVal, err
	}
	return boolVal((v.k == vNull) != n.not), nil
}

// existsNode is EXISTS(prop): an application property exists when the message carries
// it (even with a null value); a system property when it has a value.
type existsNode struct {
	user string
	sys  sysID
}

func (n *existsNode) eval(p *Properties) (val, error) {
	if n.user != "" {
		return boolVal(findUser(p, n.user) >= 0), nil
	}
	return boolVal(sysValue(p, n.sys).k != vNull), nil
}

// inNode is x [NOT] IN (list). An unknown x gives unknown; otherwise TRUE on the first
// equal item, else unknown when an item was NULL, else FALSE (NOT negates).
type inNode struct {
	x    node
	list []node
	not  bool
	pos  int
}

func (n *inNode) eval(p *Properties) (val, error) {
	x, err := n.x.eval(p)
	if err != nil || x.k == vNull {
		return nullVal, err
	}
	sawNull := false
	for _, it := range n.list {
		v, err := it.eval(p)
		if err != nil {
			return nullVal, err
		}
		if v.k == vNull {
			sawNull = true
			continue
		}
		c, _, err := compare(x, v, n.pos)
		if err != nil {
			return nullVal, err
		}
		if c == 0 {
			return boolVal(!n.not), nil
		}
	}
	if sawNull {
		return nullVal, nil
	}
	return boolVal(n.not), nil
}

// likeNode is x [NOT] LIKE pattern [ESCAPE esc]. pat is precompiled when the pattern
// and escape are constants.
type likeNode struct {
	x, pattern, escape node // escape may be nil
	pat                *likePattern
	not                bool
	pos                int
}

func (n *likeNode) eval(p *Properties) (val, error) {
	x, err := n.x.eval(p)
	if err != nil {
		return nullVal, err
	}
	pat := n.pat
	if pat == nil {
		pv, err := n.pattern.eval(p)
		if err != nil {
			return nullVal, err
		}
		ev := nullVal
		if n.escape != nil {
			if ev, err = n.escape.eval(p); err != nil {
				return nullVal, err
			}
		}
		if pv.k == vNull || (n.escape != nil && ev.k == vNull) {
			return nullVal, nil
		}
		if pat, err = compileLikeVals(pv, ev, n.escape != nil, n.pos); err != nil {
			return nullVal, err
		}
	}
	if x.k == vNull {
		return nullVal, nil
	}
	if x.k != vString {
		return nullVal, evalErr(n.pos, "LIKE cannot be applied to %s", x.k)
	}
	return boolVal(pat.match(x.s) != n.not), nil
}

func compileLikeVals(pv, ev val, hasEscape bool, pos int) (*likePattern, error) {
	if pv.k != vString {
		return nil, evalErr(pos, "LIKE pattern is %s, not a string", pv.k)
	}
	esc := rune(-1)
	if hasEscape {
		if ev.k != vString {
			return nil, evalErr(pos, "ESCAPE is %s, not a string", ev.k)
		}
		r := []rune(ev.s)
		if len(r) != 1 {
			return nil, evalErr(pos, "ESCAPE must be exactly one character, got %d", len(r))
		}
		esc = r[0]
	}
	pat, reason := compileLike(pv.s, esc)
	if reason != "" {
		return nil, evalErr(pos, "%s", reason)
	}
	return pat, nil
}
