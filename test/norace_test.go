package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNoRaceTestsRunInCI: `make test` runs the suite with -race, which does not even
// compile a test file built with //go:build !race. Each test in such a file must be
// run by the Makefile's extra step (NORACE_TESTS in NORACE_PKGS), or it never runs in CI.
func TestNoRaceTestsRunInCI(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	run := makeVar(t, string(mk), "NORACE_TESTS")
	re, err := regexp.Compile(strings.ReplaceAll(run, "$$", "$"))
	if err != nil {
		t.Fatalf("NORACE_TESTS %q: %v", run, err)
	}
	pkgs := strings.Fields(makeVar(t, string(mk), "NORACE_PKGS"))
	found := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		build := regexp.MustCompile(`(?m)^//go:build (.*)$`).FindSubmatch(b)
		if build == nil || !strings.Contains(string(build[1]), "!race") {
			return nil
		}
		pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../"))) + "/"
		for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`).FindAllSubmatch(b, -1) {
			found++
			name := string(m[1])
			if !re.MatchString(name) || !slices.Contains(pkgs, pkg) {
				t.Errorf("%s: %s is built only without -race and the Makefile's NORACE step (%s in %v) does not run it",
					path, name, run, pkgs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Log("no !race tests: NORACE_TESTS can go")
	}
}

func makeVar(t *testing.T, mk, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*:?=\s*(.*)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile defines no %s", name)
	}
	return strings.TrimSpace(m[1])
}
