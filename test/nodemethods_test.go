package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// nodeMethodBound bounds the methods of cluster.Node: the node is start-up,
// identity, lifetime and the shared state of its rooms, and each room is a type of its
// own (Router, Ops, Store, the reconciler, the log engine; cluster/doc.go). A method
// that would take Node to the bound belongs on one of them, or on a new one.
const nodeMethodBound = 40

// TestNodeHasFewMethods fails when cluster.Node has nodeMethodBound methods or more,
// counting every file of the package, its tests included.
func TestNodeHasFewMethods(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "cluster", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("cluster: no Go files (%v)", err)
	}
	var names []string
	for _, f := range files {
		ms, err := methodsOf(f, nil, "Node")
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, ms...)
	}
	sort.Strings(names)
	t.Logf("cluster.Node has %d methods: %s", len(names), strings.Join(names, ", "))
	if len(names) >= nodeMethodBound {
		t.Errorf("cluster.Node has %d methods, the bound is under %d: move a room onto a type of its own",
			len(names), nodeMethodBound)
	}
}

// TestMethodsOfCountsMethods proves the counter is not vacuous: pointer and value
// receivers of the type count, other types' methods and plain functions do not.
func TestMethodsOfCountsMethods(t *testing.T) {
	src := `package p

type Node struct{}
type Other struct{}
type G[T any] struct{}

func (n *Node) A()  {}
func (n Node) B()   {}
func (*Node) C()    {}
func (o *Other) D() {}
func (g *G[T]) E()  {}
func Node2()        {}
`
	got, err := methodsOf("p.go", src, "Node")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "A,B,C" {
		t.Fatalf("methodsOf(Node) = %q, want A, B, C", got)
	}
	if got, _ := methodsOf("p.go", src, "G"); strings.Join(got, ",") != "E" {
		t.Fatalf("methodsOf(G) = %q, want E", got)
	}
}

// methodsOf lists the methods declared on type typ (value or pointer receiver) in a Go
// file (src, or the file at path when src is nil).
func methodsOf(path string, src any, typ string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
			continue
		}
		if receiverType(fd.Recv.List[0].Type) == typ {
			out = append(out, fd.Name.Name)
		}
	}
	return out, nil
}

// receiverType is the name of a receiver's type: T, *T, T[P] or *T[P].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
