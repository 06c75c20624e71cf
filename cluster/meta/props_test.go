package meta

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every row of the table names a field that every kind in Entities has, of its Type;
// every field of the properties structs is in the table (or is AuthorizationRules, which
// has a structure of its own); each surface is a subset of Entities.
func TestPropertyTableMatchesTheStructs(t *testing.T) {
	goType := map[PropType]reflect.Type{TypeDuration: reflect.TypeOf(time.Duration(0)), TypeInt32: reflect.TypeOf(int32(0)),
		TypeInt64: reflect.TypeOf(int64(0)), TypeBool: reflect.TypeOf(false), TypeString: reflect.TypeOf(""), TypeStatus: reflect.TypeOf(Status(0))}
	structs := map[EntitySet]any{OnQueue: &QueueProperties{}, OnTopic: &TopicProperties{}, OnSubscription: &SubscriptionProperties{}}
	seen := map[string]bool{}
	for i := range Properties {
		p := &Properties[i]
		if seen[p.Name] {
			t.Errorf("%s: twice in the table", p.Name)
		}
		seen[p.Name] = true
		for _, s := range []EntitySet{p.ATOM, p.ConfigJSON, p.CLI, p.DefaultFor} {
			if s&^p.Entities != 0 {
				t.Errorf("%s: a surface names kinds outside Entities", p.Name)
			}
		}
		if p.CLI != 0 && p.Flag == "" || p.CLI == 0 && p.Flag != "" {
			t.Errorf("%s: a flag without the CLI surface or the reverse", p.Name)
		}
		for k, st := range structs {
			f, ok := reflect.TypeOf(st).Elem().FieldByName(p.Name)
			switch {
			case p.Virtual && ok:
				t.Errorf("%s: virtual, but %T has the field", p.Name, st)
			case p.Virtual:
			case p.Entities.Has(k) && !ok:
				t.Errorf("%s: %T has no such field", p.Name, st)
			case !p.Entities.Has(k) && ok:
				t.Errorf("%s: %T has the field, Entities does not say so", p.Name, st)
			case ok && f.Type != goType[p.Type]:
				t.Errorf("%s: %T's field is %v, the table says %v", p.Name, st, f.Type, goType[p.Type])
			}
		}
		if p.Default != nil && reflect.TypeOf(p.Default) != goType[p.Type] {
			t.Errorf("%s: default %T, want %v", p.Name, p.Default, goType[p.Type])
		}
	}
	for _, st := range structs {
		rt := reflect.TypeOf(st).Elem()
		for i := 0; i < rt.NumField(); i++ {
			if n := rt.Field(i).Name; !seen[n] && n != "AuthorizationRules" {
				t.Errorf("%v.%s is not in Properties", rt, n)
			}
		}
	}
}

// docs/admin-api.md's table of properties is generated from Properties (run with
// -update to rewrite it); docs/config-json.md's is written by hand and must list exactly
// the properties Config.json accepts, with the right entity kinds.
func TestDocsListEveryProperty(t *testing.T) {
	const path = "../../docs/admin-api.md"
	const begin, end = "<!-- properties: generated from cluster/meta.Properties by TestDocsListEveryProperty -update -->\n", "<!-- end of properties -->\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, begin, end)
	}
	want := propertiesMarkdown()
	if got := doc[i+len(begin) : j]; got != want {
		if *update {
			if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("%s: the property table is stale (run go test ./cluster/meta -run TestDocsListEveryProperty -update):\n%s", path, want)
		}
	}

	cj, err := os.ReadFile("../../docs/config-json.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (`[A-Za-z]+`(?:, `[A-Za-z]+`)*) \\| ([^|]*)\\| ([^|]*)\\| ([^|]*)\\|")
	listed := map[string]EntitySet{}
	for _, m := range row.FindAllStringSubmatch(string(cj), -1) {
		var kinds EntitySet
		for c, k := range []EntitySet{OnQueue, OnTopic, OnSubscription} {
			if strings.TrimSpace(m[2+c]) == "✓" {
				kinds |= k
			}
		}
		for _, n := range strings.Split(m[1], ", ") {
			listed[strings.Trim(n, "`")] = kinds
		}
	}
	for i := range Properties {
		p := &Properties[i]
		if got, ok := listed[p.Name]; p.ConfigJSON != 0 && (!ok || got != p.ConfigJSON) {
			t.Errorf("docs/config-json.md: %s listed for %v, Config.json takes it for %v", p.Name, got, p.ConfigJSON)
		}
	}
	for n := range listed {
		if p := PropertyNamed(n); p == nil || p.ConfigJSON == 0 {
			t.Errorf("docs/config-json.md lists %s, which Config.json does not take", n)
		}
	}
}

func (s EntitySet) String() string {
	var out []string
	for i, n := range []string{"queue", "topic", "subscription"} {
		if s&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}

// propertiesMarkdown is the admin API's table of properties.
func propertiesMarkdown() string {
	var b strings.Builder
	b.WriteString("| Property | Queue | Topic | Subscription | Default | Accepted | |\n|---|---|---|---|---|---|---|\n")
	mark := func(s, k EntitySet) string {
		if s.Has(k) {
			return "✓"
		}
		return ""
	}
	for i := range Properties {
		p := &Properties[i]
		if p.ATOM == 0 {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", p.Name, mark(p.ATOM, OnQueue), mark(p.ATOM, OnTopic),
			mark(p.ATOM, OnSubscription), docDefault(p), docAccepted(p), docNotes(p))
	}
	return b.String()
}

func docDefault(p *Property) string {
	if p.Virtual {
		return "`false`"
	}
	v := p.Default
	if v == nil {
		v = reflect.Zero(map[PropType]reflect.Type{TypeDuration: reflect.TypeOf(time.Duration(0)), TypeInt32: reflect.TypeOf(int32(0)),
			TypeInt64: reflect.TypeOf(int64(0)), TypeBool: reflect.TypeOf(false), TypeString: reflect.TypeOf(""),
			TypeStatus: reflect.TypeOf(Status(0))}[p.Type]).Interface()
	}
	var s string
	switch x := v.(type) {
	case time.Duration:
		s = "`" + FormatISODuration(x) + "`"
		if x == Never {
			s = "never"
		}
	case string:
		s = "empty"
		if x != "" {
			s = "`" + x + "`"
		}
	default:
		s = fmt.Sprintf("`%v`", x)
	}
	if p.DefaultFor != 0 && p.DefaultFor != p.Entities {
		s += " (" + p.DefaultFor.String() + "; else `false`)"
	}
	return s
}

func docAccepted(p *Property) string {
	switch {
	case p.Check != nil:
		return p.Check.Doc
	case p.Type == TypeBool:
		return "`true`, `false`"
	}
	return ""
}

func docNotes(p *Property) string {
	s := p.Doc
	if p.FixedAtCreation {
		s += "; fixed at creation"
	}
	return s
}
