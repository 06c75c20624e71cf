package rule

import (
	"errors"
	"strings"
	"testing"
)

func applyAction(t *testing.T, expr string, params []Property, p *Properties) error {
	t.Helper()
	a, err := CompileSQLAction(expr, params)
	if err != nil {
		t.Fatalf("%s: compile: %v", expr, err)
	}
	return a.Apply(p)
}

func mustGet(t *testing.T, p *Properties, key string) Value {
	t.Helper()
	v, ok := p.Get(key)
	if !ok {
		t.Fatalf("property %q missing after action; App = %v", key, p.App)
	}
	return v
}

func TestSQLActionSetKinds(t *testing.T) { // S-TOP-1
	cases := []struct {
		expr string
		key  string
		want Value
	}{
		{"SET n = 5", "n", vLong(5)},
		{"SET n = 5.5", "n", vDbl(5.5)},
		{"SET n = 1e3", "n", vDbl(1000)},
		{"SET n = 'x'", "n", vStr("x")},
		{"SET n = TRUE", "n", vBoolean(true)},
		{"SET n = NULL", "n", Value{Kind: KindNull}},
		{"SET n = missing", "n", Value{Kind: KindNull}},
		{"SET n = color + '-' + sys.Label", "n", vStr("red-invoice-2024")},
		{"SET n = quantity > 10", "n", vBoolean(true)},
		{"SET n = sys.SequenceNumber * 2", "n", vLong(84)},
		{"SET n = sys.EnqueuedTimeUtc", "n", vTS(1_700_000_000_000)},
		{"SET n = @p", "n", vStr("param")},
		// a plain copy keeps the source kind
		{"SET n = quantity", "n", vInt32(12)},
		{"SET n = sym", "n", vSym("abc")},
		{"SET n = f32", "n", vFloat(1.5)},
		// SET converts to the existing property's kind when the value fits
		{"SET quantity = quantity / 2", "quantity", vInt32(6)},
		{"SET quantity = 3000000000", "quantity", vLong(3_000_000_000)},
		{"SET quantity = 7.0", "quantity", vInt32(7)},
		{"SET quantity = 7.5", "quantity", vDbl(7.5)},
		{"SET quantity = 'many'", "quantity", vStr("many")},
		{"SET price = 3", "price", vDbl(3)},
		{"SET f32 = 2", "f32", vFloat(2)},
		{"SET f32 = 0.1", "f32", vDbl(0.1)},
		{"SET sym = 'new'", "sym", vSym("new")},
		{"SET zero = quantity", "zero", vLong(12)},
		// names resolve case-insensitively, keeping the original key
		{"SET COLOR = 'blue'", "color", vStr("blue")},
		{"SET user.[my prop] = 1", "my prop", vLong(1)},
	}
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			p := fixture()
			if err := applyAction(t, c.expr, []Property{{"@p", vStr("param")}}, p); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, p, c.key); got != c.want {
				t.Fatalf("%s = %+v, want %+v", c.key, got, c.want)
			}
		})
	}
}

func TestSQLActionSystemProperties(t *testing.T) {
	p := fixture()
	err := applyAction(t, "SET sys.Label = 'L'; SET sys.To = 'T'; SET sys.ReplyTo = 'R'; "+
		"SET sys.ContentType = 'text/plain'; SET sys.CorrelationId = sys.MessageId; SET sys.MessageId = 'M'; "+
		"SET SYS.sessionid = 'S'; SET sys.ReplyToSessionId = 'RS' + 1", nil, p)
	if !errors.Is(err, ErrEvaluation) {
		t.Fatalf("'RS' + 1: %v", err)
	}
	if p.Subject != "invoice-2024" {
		t.Fatalf("failed action changed the message: %+v", p)
	}
	err = applyAction(t, "SET sys.Label = 'L'; SET sys.To = 'T'; SET sys.ReplyTo = 'R'; "+
		"SET sys.ContentType = 'text/plain'; SET sys.CorrelationId = sys.MessageId; SET sys.MessageId = 'M'; "+
		"SET SYS.sessionid = 'S'; SET sys.ReplyToSessionId = 'RS'; SET sys.Subject = sys.Label + '2'", nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "L2" || p.To != "T" || p.ReplyTo != "R" || p.ContentType != "text/plain" ||
		p.CorrelationID != "m1" || p.MessageID != "M" || p.SessionID != "S" || p.ReplyToSessionID != "RS" {
		t.Fatalf("system properties = %+v", p)
	}
	if err := applyAction(t, "REMOVE sys.To; SET sys.ReplyTo = NULL; SET sys.MessageId = 17", nil, p); err != nil {
		t.Fatal(err)
	}
	if p.To != "" || p.ReplyTo != "" || p.MessageID != "17" {
		t.Fatalf("after REMOVE: %+v", p)
	}
	if err := applyAction(t, "SET sys.MessageId = newid()", nil, p); err != nil {
		t.Fatal(err)
	}
	if len(p.MessageID) != 36 || p.MessageID[14] != '4' || strings.Count(p.MessageID, "-") != 4 {
		t.Fatalf("newid() MessageId = %q", p.MessageID)
	}
	if err := applyAction(t, "SET sys.To = 1.5", nil, p); !errors.Is(err, ErrEvaluation) {
		t.Fatalf("SET sys.To = 1.5: %v", err)
	}
}

func TestSQLActionNewIDDeterministic(t *testing.T) {
	a, err := CompileSQLAction("SET a = newid(); SET b = newid()", nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2, p3 := fixture(), fixture(), fixture()
	p3.SequenceNumber++
	for _, p := range []*Properties{p1, p2, p3} {
		if err := a.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	a1, b1, a2, a3 := mustGet(t, p1, "a"), mustGet(t, p1, "b"), mustGet(t, p2, "a"), mustGet(t, p3, "a")
	if a1.Kind != KindUUID || len(a1.S) != 16 || a1 != a2 || a1 == b1 || a1 == a3 {
		t.Fatalf("newid: a1=%x b1=%x a2=%x a3=%x", a1.S, b1.S, a2.S, a3.S)
	}
}

func TestSQLActionRemoveAndSequence(t *testing.T) {
	p := fixture()
	n := len(p.App)
	err := applyAction(t, "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';", nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if mustGet(t, p, "quantity") != vInt32(6) || p.CorrelationID != "low" || len(p.App) != n {
		t.Fatalf("after action: %+v", p)
	}
	// Statements see earlier statements; semicolons are optional; REMOVE of a
	// missing property is a no-op; names are case-insensitive.
	err = applyAction(t, "SET a = 1 SET b = a + 1; REMOVE COLOR REMOVE missing;; SET c = EXISTS(color)", nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if mustGet(t, p, "b") != vLong(2) || mustGet(t, p, "c") != vBoolean(false) {
		t.Fatalf("after action: %v", p.App)
	}
	if _, ok := p.Get("color"); ok {
		t.Fatalf("color not removed")
	}
	if len(p.App) != n+3-1 {
		t.Fatalf("len(App) = %d, want %d", len(p.App), n+2)
	}
	// A later statement overrides an earlier one; a property removed then set is
	// appended at the end.
	err = applyAction(t, "SET a = 5; SET a = a * 10; REMOVE b; SET b = 'again'", nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if mustGet(t, p, "a") != vLong(50) || p.App[len(p.App)-1].Key != "b" {
		t.Fatalf("after action: %v", p.App)
	}
}

// Copy-on-write: the App storage the message shares with other subscriptions' copies
// is never written, whether the action succeeds or fails.
func TestSQLActionCopyOnWrite(t *testing.T) {
	shared := fixture().App
	orig := append([]Property(nil), shared...)
	for _, expr := range []string{
		"SET color = 'blue'; SET new = 1; REMOVE quantity",
		"SET color = 'blue'; SET x = 'a' + 1",
		"REMOVE color; SET color = 'green'",
	} {
		p := fixture()
		p.App = shared
		sibling := *p // another subscription's copy of the same message
		a, err := CompileSQLAction(expr, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.Apply(p)
		for i := range orig {
			if shared[i] != orig[i] || sibling.App[i] != orig[i] {
				t.Fatalf("%s wrote into shared storage at %d: %v", expr, i, shared[i])
			}
		}
	}
}

func TestSQLActionAllOrNothing(t *testing.T) {
	p := fixture()
	before := fixture()
	err := applyAction(t, "SET a = 1; SET sys.Label = 'x'; SET b = 1 / 0", nil, p)
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Pos != 43 || ee.Reason != "division by zero" {
		t.Fatalf("err = %v", err)
	}
	if !equalProps(p, before) {
		t.Fatalf("failed action changed the message")
	}
}

func TestSQLActionCompileErrors(t *testing.T) {
	many := strings.Repeat("SET a = 1;", MaxActionStatements+1)
	cases := []struct {
		expr   string
		pos    int
		reason string
		limit  string
	}{
		{"", 1, "empty action", ""},
		{" ; ;", 1, "empty action", ""},
		{"SET", 4, "expected a property name but found end of expression", ""},
		{"SET a", 6, "expected '=' but found end of expression", ""},
		{"SET a 1", 7, "expected '=' but found '1'", ""},
		{"SET a = ", 9, "expected an expression", ""},
		{"SET a = 1 b = 2", 11, "expected ';' or the end of the action but found 'b'", ""},
		{"UPDATE a = 1", 1, "expected SET or REMOVE but found 'UPDATE'", ""},
		{"REMOVE 1", 8, "expected a property name", ""},
		{"SET sys.SequenceNumber = 1", 5, "sys.SequenceNumber cannot be set by an action", ""},
		{"SET sys.PartitionKey = 'x'", 5, "sys.PartitionKey cannot be set", ""},
		{"REMOVE sys.Size", 8, "sys.Size cannot be removed", ""},
		{"SET sys.Nope = 1", 9, "unknown system property sys.Nope", ""},
		{"SET a = @nope", 9, "parameter @nope is not defined", ""},
		{"SET a = (1", 11, "expected ')'", ""},
		{many, 321, "more than 32 statements (MaxActionStatements)", "MaxActionStatements"},
		{"SET a = '" + strings.Repeat("x", MaxSQLLength) + "'", MaxSQLLength + 1,
			"action expression is 1034 characters long; the limit is 1024 (MaxSQLLength)", "MaxSQLLength"},
	}
	for _, c := range cases {
		name := c.expr
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			_, err := CompileSQLAction(c.expr, nil)
			var se *SQLError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSQL) {
				t.Fatalf("err = %v, want *SQLError", err)
			}
			if se.Limit != c.limit || errors.Is(err, ErrSQLLimit) != (c.limit != "") {
				t.Errorf("limit = %q, want %q", se.Limit, c.limit)
			}
			if se.Pos != c.pos {
				t.Errorf("pos = %d, want %d (%v)", se.Pos, c.pos, err)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not contain %q", err, c.reason)
			}
		})
	}
	// Exactly MaxActionStatements statements compile.
	if _, err := CompileSQLAction(strings.Repeat("SET a = 1;", MaxActionStatements), nil); err != nil {
		t.Fatal(err)
	}
}

func TestCompileRuleWithAction(t *testing.T) { // S-TOP-1
	r, err := Compile(Spec{Name: "r", Filter: FilterSpec{Kind: FilterSQL, SQL: "user.color='red'"},
		Action: ActionSpec{SQL: "SET source = @s", Parameters: []Property{{"@s", vStr("routed")}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := fixture()
	if ok, err := r.Filter.Match(p); !ok || err != nil {
		t.Fatalf("Match = %v, %v", ok, err)
	}
	if err := r.Action.Apply(p); err != nil || mustGet(t, p, "source") != vStr("routed") {
		t.Fatalf("Apply: %v, %v", err, p.App)
	}
	if r, _ := Compile(Spec{Filter: FilterSpec{Kind: FilterTrue}}); r.Action != nil {
		t.Fatalf("empty action compiled to %v", r.Action)
	}
}

// The SQL rule of the official emulator's sample Config.json
// (Azure/azure-service-bus-emulator-installer, subscription.4) compiles and behaves.
func TestEmulatorSampleRule(t *testing.T) { // S-TOP-1
	r, err := Compile(Spec{Name: "sql-filter-1",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "sys.MessageId = '123456' AND userProp1 = 'value1'"},
		Action: ActionSpec{SQL: "SET sys.To = 'Entity'"}})
	if err != nil {
		t.Fatal(err)
	}
	hit := &Properties{MessageID: "123456", App: []Property{{"userProp1", vStr("value1")}}}
	miss := &Properties{MessageID: "123456", App: []Property{{"userProp1", vStr("value2")}}}
	if ok, err := r.Filter.Match(hit); !ok || err != nil {
		t.Fatalf("hit: %v, %v", ok, err)
	}
	if ok, err := r.Filter.Match(miss); ok || err != nil {
		t.Fatalf("miss: %v, %v", ok, err)
	}
	if err := r.Action.Apply(hit); err != nil || hit.To != "Entity" {
		t.Fatalf("action: %v, To = %q", err, hit.To)
	}
}
