package test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Walls: no process-wide state, and every goroutine started under an
// owner that waits for it (docs/principles.md P4, P5, P10).

// untrackedFree lists the packages with no raw go statement at all: each goroutine
// starts through a sync.WaitGroup's Go on its owner's group, which the owner's Close
// waits on. cluster counts its own remaining debt (cluster/goroutines_test.go).
var untrackedFree = []string{"partition", "partition/transport", "cluster/wire", "cluster/gossip"}

// TestNoRawGoStatements fails on a go statement in the non-test files of untrackedFree.
func TestNoRawGoStatements(t *testing.T) {
	for _, pkg := range untrackedFree {
		files := parseDir(t, filepath.Join("..", pkg), false)
		for _, f := range files {
			for _, pos := range goStatements(f.fset, f.file) {
				t.Errorf("%s: a raw go statement; start it with the owner's WaitGroup.Go (or goTracked), which its Close waits for", pos)
			}
		}
	}
}

func goStatements(fset *token.FileSet, f *ast.File) []token.Position {
	var out []token.Position
	ast.Inspect(f, func(n ast.Node) bool {
		if g, ok := n.(*ast.GoStmt); ok {
			out = append(out, fset.Position(g.Pos()))
		}
		return true
	})
	return out
}

// immutableVars allows package-level variables the rules below cannot tell are
// constant: each is set once at initialisation and only read after, by its package
// ("pkg.name").
var immutableVars = map[string]string{
	"amqp.formatZero":               "the message-format every transfer points at (its address is shared); never written",
	"cmd/internal/version.version":  "set by the linker (-X) for a release build",
	"cmd/internal/version.revision": "set by the linker (-X) for a release build",
	"cmd/qbctl.propSpecs":           "the property table qbctl prints, computed once from meta.Properties",
	"fsm.emptyStrs":                 "a constant string of psCount zero bytes (a string cannot be written)",
	"partition/transport.encHandle": "the msgpack handle, configured once; codec handles are safe for concurrent use",
}

// processWide lists the package-level state that belongs to the process by nature,
// not to a node or a connection: there is one of it per process whatever runs in it.
var processWide = map[string]string{
	"cmd/quorumbus.tunerOnce": "the GC tuner sets GOGC, which is the process's: one tuner per process, " +
		"however many times a test runs the command in it",
}

// TestNoPackageLevelMutableState lists the package-level variables of the product
// packages (all but test/, third_party/ and _test.go files) that may change after
// initialisation, and fails on any beyond immutableVars. A variable passes when it is
// blank (var _ I = (*T)(nil)), embedded (//go:embed), or a value no method changes (an
// error sentinel, a compiled regexp, a metric descriptor: immutableCalls) or a literal
// (a lookup table, a number) that no function of its package but init, tests included,
// assigns to, indexes into on the left of =, increments, takes the address of, deletes
// from, clears or appends to. Anything else (no initialiser, a sync or atomic value,
// the result of another call) is state.
func TestNoPackageLevelMutableState(t *testing.T) {
	var bad []string
	for _, dir := range goList(t, "-f", "{{.Dir}}", "./...") {
		rel, err := filepath.Rel(filepath.Dir(mustAbs(t, ".")), dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if rel == "test" || strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "third_party/") {
			continue
		}
		files := parseDir(t, dir, true)
		for _, v := range mutableVars(files) {
			key := rel + "." + v.name
			if _, ok := immutableVars[key]; ok {
				continue
			}
			if _, ok := processWide[key]; ok {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s: %s (%s)", v.pos, key, v.why))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("package-level mutable state: %s; make it a field of its owner, a const, or (if it is immutable) list it in immutableVars", b)
	}
}

// TestMutableVarsFindsState proves the rules are not vacuous.
func TestMutableVarsFindsState(t *testing.T) {
	src := `package p

import (
	"errors"
	"os"
	"regexp"
	"sync/atomic"
)

var _ error = (*T)(nil)
var ErrX = errors.New("p: x")
var re = regexp.MustCompile("a+")
var table = map[string]int{"a": 1}
var names = []string{"a"}
var counter atomic.Uint64
var debug = os.Getenv("DEBUG") != ""
var hook func()
var tunable = 5
var cache = map[string]int{}
var grown = []string{}
var pointed = 3

//go:embed assets
var assets embed.FS

func f() {
	tunable = 6
	cache["a"] = 1
	grown = append(grown, "b")
	_ = &pointed
	_ = &names[0] // reading an entry without a copy: names stays a table
	table := 1 // a local: table stays a table
	table = 2
	_ = table
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range mutableVars([]parsedFile{{fset, f, false}}) {
		got = append(got, v.name)
	}
	want := []string{"counter", "debug", "hook", "tunable", "cache", "grown", "pointed"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("mutableVars = %v, want %v", got, want)
	}
}

type parsedFile struct {
	fset *token.FileSet
	file *ast.File
	test bool // a _test.go file: its writes count, its declarations do not
}

// parseDir parses the Go files of dir (tests too when withTests).
func parseDir(t *testing.T, dir string, withTests bool) []parsedFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("%s: no Go files", dir)
	}
	fset := token.NewFileSet()
	var out []parsedFile
	for _, name := range names {
		test := strings.HasSuffix(name, "_test.go")
		if test && !withTests {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsedFile{fset, f, test})
	}
	return out
}

type pkgVar struct {
	name string
	pos  token.Position
	why  string
}

// mutableVars returns the package-level variables of the non-test files that may
// change after initialisation, in declaration order.
func mutableVars(files []parsedFile) []pkgVar {
	written := map[string]bool{}
	for _, f := range files {
		for name := range writtenNames(f.file) {
			written[name] = true
		}
	}
	var out []pkgVar
	for _, f := range files {
		if f.test {
			continue
		}
		for _, d := range f.file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name == "_" {
						continue
					}
					var val ast.Expr
					if i < len(vs.Values) {
						val = vs.Values[i]
					}
					why := ""
					switch {
					case embedded(gd, vs):
						// A //go:embed file system or file: read-only.
					case val == nil:
						why = "no initialiser: state"
					case isImmutableCall(val):
						// A sentinel, a compiled pattern or another value no method
						// changes, unless rebound.
						if written[id.Name] {
							why = "written after initialisation"
						}
					case isLiteral(val):
						if written[id.Name] {
							why = "written after initialisation"
						}
					default:
						why = "initialised by a call or an expression that is not a literal"
					}
					if why != "" {
						out = append(out, pkgVar{id.Name, f.fset.Position(id.Pos()), why})
					}
				}
			}
		}
	}
	return out
}

// writtenNames returns the names that f assigns to (as the root of the left side),
// increments, takes the address of (but for an element's), deletes from, clears or
// appends to, in functions other than init that do not declare the name themselves.
// The check is by name within one package: a function that declares a local of the
// same name anywhere in it hides its writes, and writes from other packages to an
// exported table are not looked for (good enough for a fence; review does the rest).
func writtenNames(f *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil || (fd.Recv == nil && fd.Name.Name == "init") {
			continue // an init function initialises
		}
		locals := map[string]bool{}
		addField := func(fl *ast.FieldList) {
			if fl == nil {
				return
			}
			for _, fld := range fl.List {
				for _, n := range fld.Names {
					locals[n.Name] = true
				}
			}
		}
		addField(fd.Recv)
		addField(fd.Type.Params)
		addField(fd.Type.Results)
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				if s.Tok == token.DEFINE {
					for _, l := range s.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							locals[id.Name] = true
						}
					}
				}
			case *ast.ValueSpec:
				for _, id := range s.Names {
					locals[id.Name] = true
				}
			case *ast.FuncLit:
				addField(s.Type.Params)
				addField(s.Type.Results)
			case *ast.RangeStmt:
				if s.Tok == token.DEFINE {
					for _, e := range []ast.Expr{s.Key, s.Value} {
						if id, ok := e.(*ast.Ident); ok {
							locals[id.Name] = true
						}
					}
				}
			}
			return true
		})
		mark := func(e ast.Expr) {
			if name := rootName(e); name != "" && !locals[name] {
				out[name] = true
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				if s.Tok != token.DEFINE {
					for _, l := range s.Lhs {
						mark(l)
					}
				}
			case *ast.IncDecStmt:
				mark(s.X)
			case *ast.UnaryExpr:
				// &x hands the variable out; &table[i] is how a table's entries are
				// read without a copy.
				if _, elem := s.X.(*ast.IndexExpr); s.Op == token.AND && !elem {
					mark(s.X)
				}
			case *ast.CallExpr:
				if id, ok := s.Fun.(*ast.Ident); ok && len(s.Args) > 0 {
					switch id.Name {
					case "delete", "clear", "append":
						mark(s.Args[0])
					}
				}
			}
			return true
		})
	}
	return out
}

// immutableCalls are the constructors whose results no method changes: error
// sentinels, compiled patterns, metric descriptors, replacers and CRC tables.
var immutableCalls = [][2]string{
	{"errors", "New"}, {"fmt", "Errorf"}, {"regexp", "MustCompile"}, {"prometheus", "NewDesc"},
	{"strings", "NewReplacer"}, {"crc32", "MakeTable"},
}

func isImmutableCall(e ast.Expr) bool {
	for _, c := range immutableCalls {
		if isCallTo(e, c[0], c[1]) {
			return true
		}
	}
	return false
}

// embedded reports whether a var spec carries a //go:embed directive.
func embedded(gd *ast.GenDecl, vs *ast.ValueSpec) bool {
	for _, doc := range []*ast.CommentGroup{vs.Doc, gd.Doc} {
		if doc == nil {
			continue
		}
		for _, c := range doc.List {
			if strings.HasPrefix(c.Text, "//go:embed ") {
				return true
			}
		}
	}
	return false
}

// rootName is the variable an expression such as x, x[i], x.f, *x or (x) writes into.
func rootName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x.Name
		case *ast.IndexExpr:
			e = x.X
		case *ast.SelectorExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return ""
		}
	}
}

func isCallTo(e ast.Expr, pkg, fn string) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != fn {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// isLiteral reports whether e is built of literals, constants and conversions only: a
// number, a string, a composite literal, a function literal, and operators on them. A
// composite literal of a sync or atomic type is state.
func isLiteral(e ast.Expr) bool {
	if u, isU := e.(*ast.UnaryExpr); isU && u.Op == token.AND {
		e = u.X // &T{...}
	}
	if cl, isCL := e.(*ast.CompositeLit); isCL {
		// A table: its elements may be computed (a check function, a reflect.Type);
		// what makes it state is a write, which the caller looks for.
		return !syncType(cl.Type)
	}
	ok := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CompositeLit:
			if syncType(x.Type) {
				ok = false
			}
		case *ast.FuncLit:
			return false // its body runs later; what it reads is checked where it is declared
		case *ast.CallExpr:
			// Conversions (time.Duration(5), []byte("x")) and len of a literal are
			// constant; any other call is not known to be.
			if !isConversionLike(x) {
				ok = false
			}
		}
		return ok
	})
	return ok
}

// syncType reports a type of package sync or sync/atomic, whose values are state.
func syncType(t ast.Expr) bool {
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "sync" || pkg.Name == "atomic")
}

func isConversionLike(c *ast.CallExpr) bool {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		switch f.Name {
		case "len", "string", "int", "int64", "uint32", "uint64", "byte", "float64":
			return true
		}
	case *ast.ArrayType:
		return true
	case *ast.SelectorExpr:
		if id, ok := f.X.(*ast.Ident); ok && id.Name == "time" && f.Sel.Name == "Duration" {
			return true
		}
	}
	return false
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); err != nil {
		t.Fatal(err)
	}
	return a
}
