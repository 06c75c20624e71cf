package rule

import (
	"errors"
	"testing"
	"unicode/utf8"
)

var fuzzParams = []Property{{"@s", vStr("x%")}, {"@n", vLong(3)}, {"@d", vDbl(0.5)}, {"@b", vBoolean(true)}}

// FuzzCompileSQL feeds arbitrary text to the filter and action compilers and runs
// whatever compiles: nothing may panic, every error must be of the documented type,
// and evaluation must be deterministic. Seeds are in testdata/fuzz/FuzzCompileSQL.
func FuzzCompileSQL(f *testing.F) {
	for _, s := range []string{
		"1=1", "1=0", "color = 'red' AND quantity > 10 AND sys.Label LIKE 'inv%' AND region IN ('eu','us') AND EXISTS(priority)",
		"NOT (a IS NULL) OR b NOT LIKE '%!_%' ESCAPE '!'", "[my prop] = @s", "property('sys.To') = 'dest'",
		"SET a = 1; REMOVE b; SET sys.Label = newid()", "x % 0 = 1", "-9223372036854775808 / -1 = 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		if flt, err := CompileSQLFilter(expr, fuzzParams); err != nil {
			var se *SQLError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSQL) {
				t.Fatalf("filter compile error %T %v", err, err)
			}
		} else {
			for _, p := range []*Properties{fixture(), {}} {
				m1, e1 := flt.Match(p)
				m2, e2 := flt.Match(p)
				if m1 != m2 || (e1 == nil) != (e2 == nil) {
					t.Fatalf("nondeterministic: %v %v / %v %v", m1, e1, m2, e2)
				}
				if e1 != nil && (m1 || !errors.Is(e1, ErrEvaluation)) {
					t.Fatalf("match error %v (matched %v)", e1, m1)
				}
			}
		}
		act, err := CompileSQLAction(expr, fuzzParams)
		if err != nil {
			if !errors.Is(err, ErrInvalidSQL) {
				t.Fatalf("action compile error %T %v", err, err)
			}
			return
		}
		shared := fixture()
		orig := append([]Property(nil), shared.App...)
		p := *shared
		if err := act.Apply(&p); err != nil && !errors.Is(err, ErrEvaluation) {
			t.Fatalf("apply error %v", err)
		}
		for i := range orig {
			if shared.App[i] != orig[i] {
				t.Fatalf("action wrote into shared App storage")
			}
		}
	})
}

// FuzzLike compares the compiled LIKE matcher (with its fast paths and backtracking)
// against a naive recursive matcher over code points, escape character included.
func FuzzLike(f *testing.F) {
	f.Add("a%b_c", "axxbyc", "")
	f.Add("50!%%", "50%off", "!")
	f.Add("%!_%", "a_b", "!")
	f.Add("h_llo%", "héllo wörld", "")
	f.Add("%%a%_", "baab", "%")
	f.Fuzz(func(t *testing.T, pat, s, esc string) {
		if !utf8.ValidString(pat) || !utf8.ValidString(s) || utf8.RuneCountInString(esc) > 1 ||
			len(pat) > 64 || len(s) > 256 {
			return
		}
		e := rune(-1)
		for _, r := range esc {
			e = r
		}
		toks, ok := naiveLikeTokens([]rune(pat), e)
		cp, reason := compileLike(pat, e)
		if ok != (reason == "") {
			t.Fatalf("pattern %q escape %q: compile reason %q, naive ok %v", pat, esc, reason, ok)
		}
		if !ok {
			return
		}
		if got, want := cp.match(s), naiveLikeMatch(toks, []rune(s)); got != want {
			t.Fatalf("%q LIKE %q ESCAPE %q = %v, want %v", s, pat, esc, got, want)
		}
	})
}

// naiveLikeTokens turns a pattern into code points, with wildcards as -1 ('%') and
// -2 ('_'); ok is false when the pattern ends with the escape character.
func naiveLikeTokens(p []rune, esc rune) ([]rune, bool) {
	var out []rune
	for i := 0; i < len(p); i++ {
		switch {
		case esc >= 0 && p[i] == esc:
			if i+1 == len(p) {
				return nil, false
			}
			i++
			out = append(out, p[i])
		case p[i] == '%':
			out = append(out, -1)
		case p[i] == '_':
			out = append(out, -2)
		default:
			out = append(out, p[i])
		}
	}
	return out, true
}

// naiveLikeMatch is the textbook dynamic program: m[i][j] reports whether p[i:]
// matches s[j:].
func naiveLikeMatch(p, s []rune) bool {
	m := make([][]bool, len(p)+1)
	for i := range m {
		m[i] = make([]bool, len(s)+1)
	}
	m[len(p)][len(s)] = true
	for i := len(p) - 1; i >= 0; i-- {
		for j := len(s); j >= 0; j-- {
			switch {
			case p[i] == -1:
				m[i][j] = m[i+1][j] || (j < len(s) && m[i][j+1])
			case j == len(s):
				m[i][j] = false
			case p[i] == -2 || p[i] == s[j]:
				m[i][j] = m[i+1][j+1]
			}
		}
	}
	return m[0][0]
}
