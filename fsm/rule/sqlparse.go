package rule

import (
	"fmt"
	"strconv"
	"strings"
)

var sprintf = fmt.Sprintf

func syntaxErr(pos int, format string, args ...any) *SQLError {
	return &SQLError{Pos: pos, Syntax: true, Reason: sprintf(format, args...)}
}

// stype is what the compiler knows statically about an expression's type.
type stype uint8

const (
	sAny   stype = iota // known only at run time (application property, parameter-free function)
	sBool               // a predicate
	sValue              // a non-boolean value (number, string, arithmetic, system property)
)

// cnode is a compiled expression with its compile-time facts.
type cnode struct {
	n   node
	t   stype
	c   bool // depends on no message: may be folded
	pos int  // 1-based position of its first token or operator
}

// propRef is a parsed property name.
type propRef struct {
	sys  bool
	id   sysID
	name string // user property name, or the sys name as written
	pos  int
}

// parseFail carries a *SQLError up through the recursive descent; only the entry
// points recover it.
type parseFail struct{ err *SQLError }

// parser is a recursive-descent parser that compiles as it parses. Grammar and
// precedence (lowest first): OR, AND, NOT, predicate (comparison, IS, LIKE, IN,
// EXISTS), + -, * / %, unary + -, primary.
type parser struct {
	src    string
	what   string // "filter" or "action", for messages
	toks   []token
	i      int
	params []Property
	depth  int
	nodes  int
	noFold bool // tests only: compile without constant folding
}

func newParser(expr string, params []Property, what string) (*parser, error) {
	if n := runeLen(expr); n > MaxSQLLength {
		return nil, &SQLError{Pos: MaxSQLLength + 1, Limit: "MaxSQLLength",
			Reason: sprintf("%s expression is %d characters long; the limit is %d (MaxSQLLength)", what, n, MaxSQLLength)}
	}
	toks, err := lex([]rune(expr))
	if err != nil {
		return nil, err
	}
	return &parser{src: expr, what: what, toks: toks, params: params}, nil
}

func (p *parser) recover(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(parseFail)
		if !ok {
			panic(r)
		}
		*err = f.err
	}
}

func (p *parser) fail(pos int, format string, args ...any) {
	panic(parseFail{&SQLError{Pos: pos, Reason: sprintf(format, args...)}})
}

func (p *parser) failSyntax(pos int, format string, args ...any) {
	panic(parseFail{syntaxErr(pos, format, args...)})
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) isKw(k keyword) bool {
	t := p.toks[p.i]
	return t.kind == tKeyword && t.kw == k
}

func (p *parser) acceptKw(k keyword) bool {
	if p.isKw(k) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expect(kind tokKind, want string) token {
	t := p.next()
	if t.kind != kind {
		p.failSyntax(t.pos, "expected %s but found %s", want, t.describe())
	}
	return t
}

func (p *parser) expectKw(k keyword) {
	if t := p.next(); t.kind != tKeyword || t.kw != k {
		p.failSyntax(t.pos, "expected %s but found %s", keywords[k], t.describe())
	}
}

// enter and leave bound nesting depth.
func (p *parser) enter(pos int) {
	p.depth++
	if p.depth > MaxSQLDepth {
		panic(parseFail{&SQLError{Pos: pos, Limit: "MaxSQLDepth",
			Reason: sprintf("expression is nested more than %d levels deep (MaxSQLDepth)", MaxSQLDepth)}})
	}
}

func (p *parser) leave() { p.depth-- }

func (p *parser) count(pos int) {
	p.nodes++
	if p.nodes > MaxSQLNodes {
		panic(parseFail{&SQLError{Pos: pos, Limit: "MaxSQLNodes",
			Reason: sprintf("%s has more than %d operators and operands (MaxSQLNodes)", p.what, MaxSQLNodes)}})
	}
}

// mk counts a new node and folds it to a constant when it depends on no message and
// evaluates without error. A constant that fails (1/0) is left to fail at run time,
// so short-circuiting behaves the same whether or not it was folded.
func (p *parser) mk(n node, t stype, c bool, pos int) cnode {
	p.count(pos)
	if c && !p.noFold {
		if v, err := n.eval(nil); err == nil {
			switch v.k {
			case vBool:
				t = sBool
			case vNull:
			default:
				t = sValue
			}
			return cnode{n: &constNode{v}, t: t, c: true, pos: pos}
		}
	}
	return cnode{n: n, t: t, c: c, pos: pos}
}

func (p *parser) constant(v val, pos int) cnode {
	t := sValue
	switch v.k {
	case vBool:
		t = sBool
	case vNull:
		t = sAny
	}
	p.count(pos)
	return cnode{n: &constNode{v}, t: t, c: true, pos: pos}
}

func (p *parser) wantBool(e cnode, where string) {
	if e.t == sValue {
		p.fail(e.pos, "%s needs a boolean predicate, but this is a value expression", where)
	}
}

func (p *parser) wantValue(e cnode, op string) {
	if e.t == sBool {
		p.fail(e.pos, "operator %s cannot be applied to a boolean", op)
	}
}

// parseFilter parses a whole filter expression.
func (p *parser) parseFilter() (root cnode, err error) {
	defer p.recover(&err)
	if p.peek().kind == tEOF {
		p.failSyntax(1, "empty filter expression")
	}
	root = p.parseOr()
	if t := p.peek(); t.kind != tEOF {
		p.failSyntax(t.pos, "unexpected %s after the end of the predicate", t.describe())
	}
	p.wantBool(root, "a filter")
	return root, nil
}

func (p *parser) parseOr() cnode {
	l := p.parseAnd()
	for p.isKw(kwOr) {
		t := p.next()
		r := p.parseAnd()
		p.wantBool(l, "OR")
		p.wantBool(r, "OR")
		l = p.mk(&orNode{l: l.n, r: r.n, pos: t.pos}, sBool, l.c && r.c, t.pos)
	}
	return l
}

func (p *parser) parseAnd() cnode {
	l := p.parseNot()
	for p.isKw(kwAnd) {
		t := p.next()
		r := p.parseNot()
		p.wantBool(l, "AND")
		p.wantBool(r, "AND")
		l = p.mk(&andNode{l: l.n, r: r.n, pos: t.pos}, sBool, l.c && r.c, t.pos)
	}
	return l
}

func (p *parser) parseNot() cnode {
	if !p.isKw(kwNot) {
		return p.parsePredicate()
	}
	t := p.next()
	p.enter(t.pos)
	x := p.parseNot()
	p.leave()
	p.wantBool(x, "NOT")
	return p.mk(&notNode{x: x.n, pos: t.pos}, sBool, x.c, t.pos)
}

var cmpOps = map[string]cmpOp{"=": opEq, "<>": opNe, "!=": opNe, "<": opLt, "<=": opLe, ">": opGt, ">=": opGe}

func (p *parser) parsePredicate() cnode {
	if p.isKw(kwExists) {
		t := p.next()
		p.expect(tLParen, "'(' after EXISTS")
		ref := p.parseProperty()
		p.expect(tRParen, "')'")
		n := &existsNode{sys: ref.id}
		if !ref.sys {
			n.user = ref.name
		}
		return p.mk(n, sBool, false, t.pos)
	}
	l := p.parseAdditive()
	t := p.peek()
	if t.kind == tOp {
		op, ok := cmpOps[t.text]
		if !ok {
			return l
		}
		p.next()
		r := p.parseAdditive()
		return p.mk(&cmpNode{op: op, l: l.n, r: r.n, pos: t.pos}, sBool, l.c && r.c, t.pos)
	}
	if t.kind != tKeyword {
		return l
	}
	switch t.kw {
	case kwIs:
		p.next()
		not := p.acceptKw(kwNot)
		p.expectKw(kwNull)
		return p.mk(&isNullNode{x: l.n, not: not}, sBool, l.c, t.pos)
	case kwNot:
		p.next()
		switch n := p.peek(); {
		case n.kind == tKeyword && n.kw == kwLike:
			p.next()
			return p.parseLike(l, true, t.pos)
		case n.kind == tKeyword && n.kw == kwIn:
			p.next()
			return p.parseIn(l, true, t.pos)
		default:
			p.failSyntax(n.pos, "expected LIKE or IN after NOT but found %s", n.describe())
		}
	case kwLike:
		p.next()
		return p.parseLike(l, false, t.pos)
	case kwIn:
		p.next()
		return p.parseIn(l, false, t.pos)
	}
	return l
}

func (p *parser) parseLike(x cnode, not bool, pos int) cnode {
	p.wantValue(x, "LIKE")
	pat := p.parseAdditive()
	p.wantValue(pat, "LIKE")
	n := &likeNode{x: x.n, pattern: pat.n, not: not, pos: pos}
	c := x.c && pat.c
	var esc cnode
	hasEsc := p.acceptKw(kwEscape)
	if hasEsc {
		esc = p.parseAdditive()
		p.wantValue(esc, "ESCAPE")
		n.escape = esc.n
		c = c && esc.c
	}
	if pat.c && (!hasEsc || esc.c) {
		// Precompile a constant pattern, and reject a malformed one now.
		pv, err1 := pat.n.eval(nil)
		ev := nullVal
		var err2 error
		if hasEsc {
			ev, err2 = esc.n.eval(nil)
		}
		if err1 == nil && err2 == nil && pv.k != vNull && (!hasEsc || ev.k != vNull) {
			cp, err := compileLikeVals(pv, ev, hasEsc, pos)
			if err != nil {
				p.fail(pat.pos, "%s", err.(*EvalError).Reason)
			}
			n.pat = cp
		}
	}
	return p.mk(n, sBool, c, pos)
}

func (p *parser) parseIn(x cnode, not bool, pos int) cnode {
	p.expect(tLParen, "'(' after IN")
	if t := p.peek(); t.kind == tRParen {
		p.failSyntax(t.pos, "IN list must not be empty")
	}
	n := &inNode{x: x.n, not: not, pos: pos}
	c := x.c
	for {
		it := p.parseAdditive()
		n.list = append(n.list, it.n)
		c = c && it.c
		t := p.next()
		if t.kind == tRParen {
			break
		}
		if t.kind != tComma {
			p.failSyntax(t.pos, "expected ',' or ')' in IN list but found %s", t.describe())
		}
	}
	return p.mk(n, sBool, c, pos)
}

func (p *parser) parseAdditive() cnode {
	l := p.parseMul()
	for {
		t := p.peek()
		if t.kind != tOp || (t.text != "+" && t.text != "-") {
			return l
		}
		p.next()
		r := p.parseMul()
		p.wantValue(l, t.text)
		p.wantValue(r, t.text)
		l = p.mk(&arithNode{op: t.text[0], l: l.n, r: r.n, pos: t.pos}, sValue, l.c && r.c, t.pos)
	}
}

func (p *parser) parseMul() cnode {
	l := p.parseUnary()
	for {
		t := p.peek()
		if t.kind != tOp || (t.text != "*" && t.text != "/" && t.text != "%") {
			return l
		}
		p.next()
		r := p.parseUnary()
		p.wantValue(l, t.text)
		p.wantValue(r, t.text)
		l = p.mk(&arithNode{op: t.text[0], l: l.n, r: r.n, pos: t.pos}, sValue, l.c && r.c, t.pos)
	}
}

func (p *parser) parseUnary() cnode {
	t := p.peek()
	if t.kind != tOp || (t.text != "+" && t.text != "-") {
		return p.parsePrimary()
	}
	p.next()
	if n := p.peek(); t.text == "-" && n.kind == tInt {
		// A negative integer constant, so that -9223372036854775808 is in range.
		p.next()
		i, err := strconv.ParseInt("-"+n.text, 10, 64)
		if err != nil {
			p.fail(t.pos, "integer constant -%s is out of range for long", clip(n.text))
		}
		return p.constant(val{k: vInt, i: i}, t.pos)
	}
	p.enter(t.pos)
	x := p.parseUnary()
	p.leave()
	p.wantValue(x, "unary "+t.text)
	return p.mk(&negNode{x: x.n, plus: t.text == "+", pos: t.pos}, sValue, x.c, t.pos)
}

func (p *parser) parsePrimary() cnode {
	t := p.peek()
	switch t.kind {
	case tInt:
		p.next()
		i, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			p.fail(t.pos, "integer constant %s is out of range for long", clip(t.text))
		}
		return p.constant(val{k: vInt, i: i}, t.pos)
	case tDouble:
		p.next()
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			p.fail(t.pos, "numeric constant %s is out of range for double", clip(t.text))
		}
		return p.constant(val{k: vDouble, f: f}, t.pos)
	case tString:
		p.next()
		return p.constant(val{k: vString, s: t.text}, t.pos)
	case tParam:
		p.next()
		v, ok := p.param(t.text)
		if !ok {
			p.fail(t.pos, "parameter @%s is not defined", clip(t.text))
		}
		return p.constant(fromValue(v), t.pos)
	case tLParen:
		p.next()
		p.enter(t.pos)
		e := p.parseOr()
		p.expect(tRParen, "')'")
		p.leave()
		e.pos = t.pos
		return e
	case tKeyword:
		switch t.kw {
		case kwTrue:
			p.next()
			return p.constant(trueVal, t.pos)
		case kwFalse:
			p.next()
			return p.constant(falseVal, t.pos)
		case kwNull:
			p.next()
			return p.constant(nullVal, t.pos)
		}
	case tIdent:
		if p.toks[p.i+1].kind == tLParen {
			return p.parseCall()
		}
		fallthrough
	case tDelim:
		ref := p.parseProperty()
		if ref.sys {
			return p.mk(&sysProp{id: ref.id}, sValue, false, ref.pos)
		}
		return p.mk(&userProp{name: ref.name}, sAny, false, ref.pos)
	}
	p.failSyntax(t.pos, "expected an expression but found %s", t.describe())
	panic("unreachable")
}

// parseCall parses newid(), property(name) and p(name).
func (p *parser) parseCall() cnode {
	t := p.next()
	p.next() // '('
	switch strings.ToLower(t.text) {
	case "newid":
		p.expect(tRParen, "')' (newid takes no arguments)")
		return p.mk(&newidNode{expr: p.src, pos: t.pos}, sValue, false, t.pos)
	case "property", "p":
		p.enter(t.pos)
		arg := p.parseAdditive()
		p.expect(tRParen, "')'")
		p.leave()
		p.wantValue(arg, t.text+"()")
		if !arg.c {
			return p.mk(&dynProp{name: arg.n, pos: t.pos}, sAny, false, t.pos)
		}
		v, err := arg.n.eval(nil)
		switch {
		case err != nil:
			return p.mk(&dynProp{name: arg.n, pos: t.pos}, sAny, false, t.pos)
		case v.k == vNull:
			return p.constant(nullVal, t.pos)
		case v.k != vString:
			p.fail(arg.pos, "argument of %s() is %s, not a string", t.text, v.k)
		}
		sys, name := splitScope(v.s)
		if !sys {
			return p.mk(&userProp{name: name}, sAny, false, t.pos)
		}
		id, ok := lookupSys(name)
		if !ok {
			p.fail(arg.pos, "unknown system property sys.%s", clip(name))
		}
		return p.mk(&sysProp{id: id}, sValue, false, t.pos)
	}
	p.fail(t.pos, "unknown function %s() (supported: newid, property, p)", clip(t.text))
	panic("unreachable")
}

// parseProperty parses [sys. | user.] name, where name is a regular, [delimited] or
// "quoted" identifier. Unknown system properties are rejected here.
func (p *parser) parseProperty() propRef {
	t := p.next()
	switch t.kind {
	case tIdent:
		if p.peek().kind != tDot {
			return propRef{name: t.text, pos: t.pos}
		}
		sys := strings.EqualFold(t.text, "sys")
		if !sys && !strings.EqualFold(t.text, "user") {
			p.fail(t.pos, "unknown scope %q (expected sys or user)", clip(t.text))
		}
		p.next() // '.'
		n := p.next()
		if n.kind != tIdent && n.kind != tDelim {
			p.failSyntax(n.pos, "expected a property name after '%s.' but found %s", t.text, n.describe())
		}
		if !sys {
			return propRef{name: n.text, pos: t.pos}
		}
		id, ok := lookupSys(n.text)
		if !ok {
			p.fail(n.pos, "unknown system property sys.%s", clip(n.text))
		}
		return propRef{sys: true, id: id, name: n.text, pos: t.pos}
	case tDelim:
		return propRef{name: t.text, pos: t.pos}
	}
	p.failSyntax(t.pos, "expected a property name but found %s", t.describe())
	panic("unreachable")
}

// param finds the value of @name: keys may carry the '@' or not; an exact match wins,
// then a case-insensitive one.
func (p *parser) param(name string) (Value, bool) {
	for _, kv := range p.params {
		if k := strings.TrimPrefix(kv.Key, "@"); k == name {
			return kv.Value, true
		}
	}
	for _, kv := range p.params {
		if strings.EqualFold(strings.TrimPrefix(kv.Key, "@"), name) {
			return kv.Value, true
		}
	}
	return Value{}, false
}
