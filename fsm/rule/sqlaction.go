package rule

import (
	"encoding/hex"
	"math"
	"strconv"
)

// stmt is one SET or REMOVE statement of an action.
type stmt struct {
	remove bool
	target propRef
	expr   node // SET only
	raw    *userProp
	pos    int
}

// sqlAction is a compiled SQL rule action.
type sqlAction struct {
	expr  string
	stmts []stmt
}

// String returns the source expression.
func (a *sqlAction) String() string { return a.expr }

// Apply runs the statements in order, each seeing the effects of the ones before. It
// is all or nothing: on an error p is left unchanged. Application properties are
// changed only through Properties.Set and Remove, which copy the App slice, so storage
// shared with other copies of the message is never written.
func (a *sqlAction) Apply(p *Properties) error {
	q := *p
	for i := range a.stmts {
		if err := a.stmts[i].exec(&q); err != nil {
			return err
		}
	}
	*p = q
	return nil
}

func (s *stmt) exec(p *Properties) error {
	t := &s.target
	if t.sys {
		f := sysString(p, t.id)
		if s.remove {
			*f = ""
			return nil
		}
		v, err := s.expr.eval(p)
		if err != nil {
			return err
		}
		switch v.k {
		case vNull:
			*f = ""
		case vString:
			*f = v.s
			if v.s == "" && t.id == sysSessionID {
				*f = BlankSessionID // set, to the empty string: not removed
			}
		case vUUID:
			*f = formatUUID(v.s)
		case vInt:
			*f = strconv.FormatInt(v.i, 10)
		default:
			return evalErr(s.pos, "cannot assign %s to sys.%s", v.k, t.name)
		}
		return nil
	}
	i := findUser(p, t.name)
	key := t.name
	if i >= 0 {
		key = p.App[i].Key // SET and REMOVE resolve names as lookups do
	}
	if s.remove {
		if i >= 0 {
			p.Remove(key)
		}
		return nil
	}
	var nv Value
	if s.raw != nil {
		// A plain property copy keeps the source's kind (int stays int).
		if v := lookupUser(p, s.raw.name); v != nil {
			nv = *v
		}
	} else {
		v, err := s.expr.eval(p)
		if err != nil {
			return err
		}
		nv = toValue(v)
	}
	if i >= 0 {
		nv = convertTo(nv, p.App[i].Value.Kind)
	}
	p.Set(key, nv)
	return nil
}

// formatUUID renders 16 raw bytes as 8-4-4-4-12 lower-case hex.
func formatUUID(raw string) string {
	if len(raw) != 16 {
		return hex.EncodeToString([]byte(raw))
	}
	var b [36]byte
	hex.Encode(b[0:8], []byte(raw[0:4]))
	b[8] = '-'
	hex.Encode(b[9:13], []byte(raw[4:6]))
	b[13] = '-'
	hex.Encode(b[14:18], []byte(raw[6:8]))
	b[18] = '-'
	hex.Encode(b[19:23], []byte(raw[8:10]))
	b[23] = '-'
	hex.Encode(b[24:], []byte(raw[10:]))
	return string(b[:])
}

// convertTo implements "SET performs implicit conversion if possible when the
// expression type and the existing property type are different": a number is stored
// in the existing property's numeric kind when it is exactly representable there, a
// string keeps an existing symbol kind. Otherwise v keeps its own kind.
func convertTo(v Value, target Kind) Value {
	if v.Kind == target {
		return v
	}
	if (v.Kind == KindString && target == KindSymbol) || (v.Kind == KindSymbol && target == KindString) {
		return Value{Kind: target, S: v.S}
	}
	x := fromValue(v)
	if v.Kind == KindChar || v.Kind == KindTimestamp || !isNum(x) {
		return v
	}
	switch target {
	case KindFloat:
		f := num(x)
		if float64(float32(f)) == f || math.IsNaN(f) {
			return Value{Kind: KindFloat, N: math.Float64bits(float64(float32(f)))}
		}
		return v
	case KindDouble:
		return Value{Kind: KindDouble, N: math.Float64bits(num(x))}
	}
	var lo, hi int64
	switch target {
	case KindUbyte:
		lo, hi = 0, math.MaxUint8
	case KindUshort:
		lo, hi = 0, math.MaxUint16
	case KindUint:
		lo, hi = 0, math.MaxUint32
	case KindUlong:
		lo, hi = 0, math.MaxInt64
	case KindByte:
		lo, hi = math.MinInt8, math.MaxInt8
	case KindShort:
		lo, hi = math.MinInt16, math.MaxInt16
	case KindInt:
		lo, hi = math.MinInt32, math.MaxInt32
	case KindLong:
		lo, hi = math.MinInt64, math.MaxInt64
	default:
		return v
	}
	i := x.i
	if x.k == vDouble {
		f := x.f
		if f != math.Trunc(f) || f < -9.2e18 || f > 9.2e18 {
			return v
		}
		i = int64(f)
	}
	if i < lo || i > hi {
		return v
	}
	return Value{Kind: target, N: uint64(i)}
}

// parseAction parses the statements of an action.
func (p *parser) parseAction() (stmts []stmt, err error) {
	defer p.recover(&err)
	for {
		for p.peek().kind == tSemi {
			p.next()
		}
		t := p.next()
		if t.kind == tEOF {
			break
		}
		if len(stmts) == MaxActionStatements {
			p.failLimit(t.pos, "MaxActionStatements",
				"action has more than %d statements (MaxActionStatements)", MaxActionStatements)
		}
		var s stmt
		s.pos = t.pos
		switch {
		case t.kind == tKeyword && t.kw == kwSet:
			s.target = p.parseProperty()
			if s.target.sys && !sysSettable(s.target.id) {
				p.fail(s.target.pos, "sys.%s cannot be set by an action", s.target.name)
			}
			if eq := p.next(); eq.kind != tOp || eq.text != "=" {
				p.failSyntax(eq.pos, "expected '=' but found %s", eq.describe())
			}
			e := p.parseOr()
			s.expr = e.n
			if u, ok := e.n.(*userProp); ok && !s.target.sys {
				s.raw = u
			}
		case t.kind == tKeyword && t.kw == kwRemove:
			s.remove = true
			s.target = p.parseProperty()
			if s.target.sys && !sysSettable(s.target.id) {
				p.fail(s.target.pos, "sys.%s cannot be removed by an action", s.target.name)
			}
		default:
			p.failSyntax(t.pos, "expected SET or REMOVE but found %s", t.describe())
		}
		p.count(t.pos)
		stmts = append(stmts, s)
		if n := p.peek(); n.kind != tSemi && n.kind != tEOF && !(n.kind == tKeyword && (n.kw == kwSet || n.kw == kwRemove)) {
			p.failSyntax(n.pos, "expected ';' or the end of the action but found %s", n.describe())
		}
	}
	if len(stmts) == 0 {
		p.failSyntax(1, "empty action: expected SET or REMOVE")
	}
	return stmts, nil
}

func (p *parser) failLimit(pos int, limit, format string, args ...any) {
	panic(parseFail{&SQLError{Pos: pos, Limit: limit, Reason: sprintf(format, args...)}})
}
