package cluster

import (
	"bytes"
	"encoding/gob"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateWire = flag.Bool("update", false, "rewrite testdata/wire from the current wire types")

// Version 1 of the node-to-node wire (net/rpc with gob, wirev1.go) is what nodes of
// releases before the versioned wire speak, and this release still speaks it with them
// and serves it to them (cluster/wire has version 2 and its own golden files under
// testdata/wire/v2). A rolling upgrade relies on it: a node of release N+1 must call
// and answer nodes of release N. gob matches
// struct fields by name and ignores those the receiver lacks, so adding a field is
// compatible; removing, renaming or retyping one, or renumbering an operation or an error
// kind, is not. These golden files hold the previous release's format:
//
//   - schema.golden: every field of every type that crosses the wire, with its type;
//   - values.gob: one gob stream of a value of each, every field set, as written;
//   - ops.golden and errors.golden: the numbering of operations and wire error kinds.
//
// A change that breaks them fails here. A compatible change (a new field, a new
// operation at the end) fails too, with what to review; regenerate with
// `go test ./cluster -run TestWire -update` and commit the diff.

// wireTypes are the arguments and replies of every rpcService method, in a fixed order.
func wireTypes() []any {
	return []any{
		&CallReq{}, &CallResp{}, &MultiReq{}, &MultiResp{}, &WaitReq{}, &MetaApplyReq{}, &MetaApplyResp{},
		&[]GroupInfo{}, &TransferReq{}, &WireErr{}, &MetaDigest{}, &map[uint32]string{},
	}
}

// schema lists every field reachable from t as "Type.Field type", sorted.
func schema(t reflect.Type, seen map[reflect.Type]bool, out *[]string) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		schema(t.Elem(), seen, out)
		return
	case reflect.Map:
		schema(t.Key(), seen, out)
		schema(t.Elem(), seen, out)
		return
	case reflect.Struct:
	default:
		return
	}
	if seen[t] || t == reflect.TypeOf(time.Time{}) {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // gob does not send it
		}
		*out = append(*out, fmt.Sprintf("%s.%s %s", t.String(), f.Name, f.Type.String()))
		schema(f.Type, seen, out)
	}
}

func currentSchema() []string {
	var out []string
	seen := map[reflect.Type]bool{}
	for _, v := range wireTypes() {
		schema(reflect.TypeOf(v).Elem(), seen, &out)
	}
	slices.Sort(out)
	return out
}

// fill sets every exported field of v to a value derived from n, deterministically.
func fill(v reflect.Value, n *int, depth int) {
	*n++
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n % 100))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) / 4)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n, depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n, depth+1)
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n, depth+1)
		}
	case reflect.Map:
		if depth > 6 {
			return
		}
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n, depth+1)
		fill(e, n, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1_700_000_000+int64(*n), 0).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n, depth+1)
			}
		}
	}
}

func samples() []any {
	var out []any
	for _, v := range wireTypes() {
		p := reflect.New(reflect.TypeOf(v).Elem())
		n := 0
		fill(p.Elem(), &n, 0)
		out = append(out, p.Interface())
	}
	return out
}

// opNames are the operation constants of cluster/wire (wire.Op, which version 1 carries
// as CallReq.Op) in declaration order, read from the source: their numbers are iota+1,
// so the order is the wire numbering. Version 1 named them opX; the golden file keeps
// those names.
func opNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "wire/ops.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 {
			continue
		}
		first := g.Specs[0].(*ast.ValueSpec)
		if id, ok := first.Type.(*ast.Ident); !ok || id.Name != "Op" {
			continue
		}
		for i, s := range g.Specs {
			for _, name := range s.(*ast.ValueSpec).Names {
				if name.Name == "opEnd" {
					continue
				}
				names = append(names, fmt.Sprintf("%d op%s", i+1, strings.TrimPrefix(name.Name, "Op")))
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no Op constants found in wire/ops.go")
	}
	return names
}

func errorKinds() []string {
	var out []string
	for i, e := range wireSentinels {
		out = append(out, fmt.Sprintf("%d %s", i, e.Error()))
	}
	return out
}

// appendOnly compares the lines of a golden file with the current ones: the golden ones
// must all be there, unchanged (in order when ordered); new ones are reported apart.
func appendOnly(t *testing.T, name string, cur []string, ordered bool) {
	t.Helper()
	path := "testdata/wire/" + name
	if *updateWire {
		if err := os.WriteFile(path, []byte(strings.Join(cur, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	old := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, l := range old {
		if ordered && (i >= len(cur) || cur[i] != l) {
			t.Errorf("%s: line %d was %q, now %q: nodes of the previous release would misread it (append only)", name, i+1, l, at(cur, i))
		} else if !ordered && !slices.Contains(cur, l) {
			t.Errorf("%s: %q is gone or changed: nodes of the previous release send or expect it", name, l)
		}
	}
	for i, l := range cur {
		if (ordered && i >= len(old)) || (!ordered && !slices.Contains(old, l)) {
			t.Errorf("%s: new %q: compatible only if the previous release ignores it (gob drops unknown fields; "+
				"an unknown op or error kind reaches an older node as an error); review, then run with -update", name, l)
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(missing)"
}

func TestWireSchema(t *testing.T) {
	appendOnly(t, "schema.golden", currentSchema(), false)
	appendOnly(t, "ops.golden", opNames(t), true)
	appendOnly(t, "errors.golden", errorKinds(), true)
}

// The values the previous release wrote decode into this release's types, with every
// field the previous release sent intact.
func TestWireValuesDecode(t *testing.T) {
	path := "testdata/wire/values.gob"
	if *updateWire {
		var buf bytes.Buffer
		enc := gob.NewEncoder(&buf)
		for _, v := range samples() {
			if err := enc.Encode(v); err != nil {
				t.Fatalf("encode %T: %v", v, err)
			}
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	dec := gob.NewDecoder(bytes.NewReader(b))
	for i, want := range samples() {
		got := reflect.New(reflect.TypeOf(want).Elem())
		if err := dec.Decode(got.Interface()); err != nil {
			t.Fatalf("value %d (%T) of the previous release does not decode: %v", i, want, err)
		}
		if !reflect.DeepEqual(got.Interface(), want) {
			t.Errorf("value %d (%T) of the previous release decodes to\n%+v\nwant\n%+v", i, want, got.Elem().Interface(), reflect.ValueOf(want).Elem().Interface())
		}
	}
}
