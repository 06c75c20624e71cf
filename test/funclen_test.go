package test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// shortFuncDirs are the packages whose functions stay short enough to read in one
// screen: cmd/quorumbus is wiring, one step per function (run.go: listen, startNode,
// startAMQP, startHTTP, announce), and a step that grows past the bound wants splitting.
var shortFuncDirs = map[string]int{"cmd/quorumbus": 80}

// TestFunctionsStayShort fails when a function in a shortFuncDirs package, its tests
// included, has more lines than the bound.
func TestFunctionsStayShort(t *testing.T) {
	for dir, max := range shortFuncDirs {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v): the table is stale", dir, err)
		}
		for _, f := range files {
			long, err := longFuncs(f, nil, max)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range long {
				t.Errorf("%s: %s; split it into steps", filepath.Join(dir, filepath.Base(f)), l)
			}
		}
	}
}

// TestLongFuncsCatchesLongFunction proves the counter is not vacuous.
func TestLongFuncsCatchesLongFunction(t *testing.T) {
	src := "package p\n\nfunc short() {\n}\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 80) + "}\n"
	long, err := longFuncs("p.go", src, 80)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 1 || !strings.HasPrefix(long[0], "long has 82 lines") {
		t.Fatalf("longFuncs = %q, want long with 82 lines", long)
	}
}

// longFuncs lists the functions and methods of a Go file (src, or the file at path
// when src is nil) longer than max lines, from the func keyword to the closing brace.
func longFuncs(path string, src any, max int) ([]string, error) {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, path, src, 0)
	if err != nil {
		return nil, err
	}
	var long []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1; n > max {
			long = append(long, fmt.Sprintf("%s has %d lines, more than %d", fd.Name.Name, n, max))
		}
	}
	return long, nil
}
