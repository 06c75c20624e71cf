package rule

import "testing"

const benchFilter = "color = 'red' AND quantity > 10 AND sys.Label LIKE 'inv%' AND region IN ('eu','us') AND EXISTS(priority)"

// benchMessage has 10 application properties; the ones the filter reads are spread
// through the list, and priority is last.
func benchMessage() *Properties {
	return &Properties{
		MessageID: "m-1", Subject: "invoice-17", SequenceNumber: 7,
		App: []Property{
			{"tenant", vStr("contoso")},
			{"color", vStr("red")},
			{"source", vStr("web")},
			{"quantity", vInt32(12)},
			{"weight", vDbl(2.5)},
			{"region", vStr("us")},
			{"express", vBoolean(false)},
			{"customer", vLong(991)},
			{"channel", vStr("b2b")},
			{"priority", vStr("high")},
		},
	}
}

func BenchmarkSQLFilterMatch(b *testing.B) {
	f, err := CompileSQLFilter(benchFilter, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(p); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkSQLFilterMatchMiss(b *testing.B) {
	f, err := CompileSQLFilter(benchFilter, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := benchMessage()
	p.App[1].Value = vStr("blue") // fails at the first clause
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(p); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkCompileSQLFilter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileSQLFilter(benchFilter, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// The hot path must not allocate (a count, not a timing: deterministic).
func TestSQLFilterMatchDoesNotAllocate(t *testing.T) {
	for _, expr := range []string{
		benchFilter,
		"NOT (color LIKE '%e_' ESCAPE '!') OR quantity * 2 + 1.5 >= @n OR missing IS NULL",
		"Color <> 'x' AND sys.SequenceNumber % 2 = 1 AND sys.MessageId NOT IN ('a', 'b', NULL) AND property('region') = 'us'",
	} {
		f, err := CompileSQLFilter(expr, []Property{{"@n", vLong(3)}})
		if err != nil {
			t.Fatal(err)
		}
		p := benchMessage()
		if _, err := f.Match(p); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = f.Match(p) }); n != 0 {
			t.Errorf("%s: %v allocations per Match", expr, n)
		}
	}
}
