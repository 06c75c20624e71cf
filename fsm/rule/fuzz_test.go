package rule

import (
	"errors"
	"testing"
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
