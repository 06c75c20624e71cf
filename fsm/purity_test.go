package fsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbidden are the imports that would let the state machine see the outside world (P1).
var forbidden = map[string]string{
	"os": "I/O", "net": "network", "net/http": "network", "time": "clock", "math/rand": "randomness",
	"math/rand/v2": "randomness", "crypto/rand": "randomness", "sync": "goroutines", "sync/atomic": "goroutines",
	"syscall": "I/O", "io/ioutil": "I/O", "os/exec": "I/O", "unsafe": "memory layout", "runtime": "scheduler",
	"log": "I/O", "log/slog": "I/O", "path/filepath": "I/O", "io/fs": "I/O", "reflect": "map order",
}

// pureDeps are the module's packages the fsm may import (pure leaves), with their
// directories, which TestPurity checks as well.
var pureDeps = map[string]string{
	"github.com/quorumbus/quorumbus/fsm/rule":        "rule",
	"github.com/quorumbus/quorumbus/internal/binenc": "../internal/binenc",
}

// TestPurity parses the non-test files of fsm and of pureDeps and fails on a forbidden
// import, a non-stdlib import not in pureDeps, a go statement or a time.Now.
func TestPurity(t *testing.T) {
	files := 0
	dirs := []string{"."}
	for _, dir := range pureDeps {
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if why, bad := forbidden[path]; bad {
					t.Errorf("%s imports %s (%s): the fsm is pure", name, path, why)
				}
				if _, ok := pureDeps[path]; !ok && strings.Contains(strings.SplitN(path, "/", 2)[0], ".") {
					t.Errorf("%s imports %s: the fsm uses the standard library only", name, path)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if _, ok := n.(*ast.GoStmt); ok {
					t.Errorf("%s starts a goroutine: the fsm has none", name)
				}
				return true
			})
			if strings.Contains(string(src), "time.Now") {
				t.Errorf("%s mentions time.Now: time comes from Entry.Now", name)
			}
		}
	}
	if files < 5 {
		t.Fatalf("only %d files checked: the glob is wrong", files)
	}
}
