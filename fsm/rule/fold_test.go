package rule

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// exprGen builds random, mostly well-formed expressions over the fixture's
// properties, constants and every operator.
type exprGen struct{ r *rand.Rand }

var (
	genAtoms = []string{"1", "0", "-3", "2.5", "0.0", "'red'", "'r%'", "''", "TRUE", "FALSE", "NULL",
		"color", "quantity", "price", "flag", "off", "nothing", "missing", "sym", "when", "ch", "dec",
		"sys.Label", "sys.SequenceNumber", "sys.SessionId", "sys.EnqueuedTimeUtc", "sys.TimeToLive",
		"[my prop]", "@n", "@s", "property('color')", "p('sys.To')"}
	genArith = []string{"+", "-", "*", "/", "%"}
	genCmp   = []string{"=", "<>", "!=", "<", "<=", ">", ">="}
)

func (g exprGen) value(d int) string {
	if d <= 0 || g.r.Intn(3) == 0 {
		return genAtoms[g.r.Intn(len(genAtoms))]
	}
	switch g.r.Intn(4) {
	case 0:
		return "-" + g.value(d-1)
	case 1:
		return "(" + g.value(d-1) + ")"
	}
	return g.value(d-1) + " " + genArith[g.r.Intn(len(genArith))] + " " + g.value(d-1)
}

func (g exprGen) pred(d int) string {
	if d <= 0 {
		return g.value(0) + " = " + g.value(0)
	}
	switch g.r.Intn(10) {
	case 0:
		return "NOT " + g.pred(d-1)
	case 1:
		return g.pred(d-1) + " AND " + g.pred(d-1)
	case 2:
		return g.pred(d-1) + " OR " + g.pred(d-1)
	case 3:
		return "(" + g.pred(d-1) + ")"
	case 4:
		return g.value(d-1) + " IS NOT NULL"
	case 5:
		items := []string{g.value(d - 1)}
		for g.r.Intn(2) == 0 {
			items = append(items, g.value(d-1))
		}
		return g.value(d-1) + " NOT IN (" + strings.Join(items, ", ") + ")"
	case 6:
		return g.value(d-1) + " LIKE " + g.value(d-1)
	case 7:
		return "EXISTS(" + []string{"color", "missing", "sys.To"}[g.r.Intn(3)] + ")"
	}
	return g.value(d-1) + " " + genCmp[g.r.Intn(len(genCmp))] + " " + g.value(d-1)
}

func evalCompiled(expr string, params []Property, noFold bool, p *Properties) (string, error) {
	ps, err := newParser(expr, params, "filter")
	if err != nil {
		return "", err
	}
	ps.noFold = noFold
	root, err := ps.parseFilter()
	if err != nil {
		return "", err
	}
	v, err := root.n.eval(p)
	if err != nil {
		if !errors.Is(err, ErrEvaluation) {
			return "", fmt.Errorf("not an evaluation error: %v", err)
		}
		return "error", nil
	}
	return fmt.Sprintf("%+v", v), nil
}

// Folding constants at compile time must not change any result, error or not.
func TestSQLConstantFoldingPreservesSemantics(t *testing.T) {
	params := []Property{{"@n", vLong(4)}, {"@s", vStr("x")}}
	g := exprGen{rand.New(rand.NewSource(6))}
	compiled := 0
	for i := 0; i < 3000; i++ {
		expr := g.pred(4)
		folded, err1 := evalCompiled(expr, params, false, fixture())
		plain, err2 := evalCompiled(expr, params, true, fixture())
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: compile errors differ: %v / %v", expr, err1, err2)
		}
		if err1 != nil {
			if !errors.Is(err1, ErrInvalidSQL) {
				t.Fatalf("%s: %v", expr, err1)
			}
			continue
		}
		compiled++
		if folded != plain {
			t.Fatalf("%s: folded %s, unfolded %s", expr, folded, plain)
		}
	}
	t.Logf("%d of 3000 compiled", compiled)
	if compiled < 1000 {
		t.Fatalf("only %d of 3000 generated expressions compiled", compiled)
	}
}
