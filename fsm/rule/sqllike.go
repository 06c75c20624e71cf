package rule

import (
	"strings"
	"unicode/utf8"
)

// likeShape selects a matcher: the common pattern shapes need no loop over tokens.
type likeShape uint8

const (
	likeExact    likeShape = iota // no wildcard
	likePrefix                    // lit%
	likeSuffix                    // %lit
	likeContains                  // %lit%
	likeAny                       // % (matches every string)
	likeGeneral                   // anything else: tokens
)

// likeTok is one element of a general pattern: a literal run, '_' or '%'.
type likeTok struct {
	op  byte // 'l' literal, '_' one character, '%' any run
	lit string
}

// likePattern is a compiled LIKE pattern. Matching is case-sensitive and ordinal; '_'
// matches one Unicode character (one rune; an invalid UTF-8 byte counts as one).
type likePattern struct {
	shape likeShape
	lit   string
	toks  []likeTok
}

// compileLike compiles pattern with escape character esc (-1 for none). It returns a
// non-empty reason when the pattern is malformed (a trailing escape character).
func compileLike(pattern string, esc rune) (*likePattern, string) {
	var toks []likeTok
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, likeTok{op: 'l', lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		r, w := utf8.DecodeRuneInString(pattern[i:])
		i += w
		switch {
		case esc >= 0 && r == esc:
			if i >= len(pattern) {
				return nil, "LIKE pattern ends with the escape character"
			}
			_, w2 := utf8.DecodeRuneInString(pattern[i:])
			lit.WriteString(pattern[i : i+w2])
			i += w2
		case r == '%':
			flush()
			if len(toks) == 0 || toks[len(toks)-1].op != '%' {
				toks = append(toks, likeTok{op: '%'})
			}
		case r == '_':
			flush()
			toks = append(toks, likeTok{op: '_'})
		default:
			lit.WriteString(pattern[i-w : i])
		}
	}
	flush()
	p := &likePattern{shape: likeGeneral, toks: toks}
	switch {
	case len(toks) == 0:
		p.shape, p.toks = likeExact, nil
	case len(toks) == 1 && toks[0].op == 'l':
		p.shape, p.lit, p.toks = likeExact, toks[0].lit, nil
	case len(toks) == 1 && toks[0].op == '%':
		p.shape, p.toks = likeAny, nil
	case len(toks) == 2 && toks[0].op == 'l' && toks[1].op == '%':
		p.shape, p.lit, p.toks = likePrefix, toks[0].lit, nil
	case len(toks) == 2 && toks[0].op == '%' && toks[1].op == 'l':
		p.shape, p.lit, p.toks = likeSuffix, toks[1].lit, nil
	case len(toks) == 3 && toks[0].op == '%' && toks[1].op == 'l' && toks[2].op == '%':
		p.shape, p.lit, p.toks = likeContains, toks[1].lit, nil
	}
	return p, ""
}

func (p *likePattern) match(s string) bool {
	switch p.shape {
	case likeExact:
		return s == p.lit
	case likePrefix:
		return strings.HasPrefix(s, p.lit)
	case likeSuffix:
		return strings.HasSuffix(s, p.lit)
	case likeContains:
		return strings.Contains(s, p.lit)
	case likeAny:
		return true
	}
	return matchToks(p.toks, s)
}

// matchToks is wildcard matching with backtracking to the last '%' only, which is
// enough because a later '%' subsumes every choice made for an earlier one:
// O(len(s) * len(toks)) in the worst case, no allocation.
func matchToks(toks []likeTok, s string) bool {
	ti, si := 0, 0
	star, mark := -1, 0
	for {
		if ti < len(toks) {
			t := toks[ti]
			switch t.op {
			case '%':
				if ti == len(toks)-1 {
					return true
				}
				star, mark = ti, si
				ti++
				continue
			case '_':
				if si < len(s) {
					_, w := utf8.DecodeRuneInString(s[si:])
					si += w
					ti++
					continue
				}
			default:
				if strings.HasPrefix(s[si:], t.lit) {
					si += len(t.lit)
					ti++
					continue
				}
			}
		} else if si == len(s) {
			return true
		}
		if star < 0 || mark >= len(s) {
			return false
		}
		_, w := utf8.DecodeRuneInString(s[mark:])
		mark += w
		ti, si = star+1, mark
	}
}
