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

// Code, tests and docs cite the behaviour contract (S-LOCK-5 in docs/semantics.md), the
// principles (P1 in docs/principles.md), and sections of docs/protocol.md and
// docs/design-notes.md. These tests keep every such reference resolvable inside the
// repository, and keep out references to documents that are not in it.

var (
	reRuleRef     = regexp.MustCompile(`\bS-[A-Z]+-[0-9]+\b`)
	rePrincRef    = regexp.MustCompile(`\bP[0-9]{1,2}\b`)
	reProtocolRef = regexp.MustCompile(`\bprotocol(?:\.md)?((?:(?:,| and)?\s*§[0-9]+(?:\.[0-9]+)?)+)`)
	reNotesRef    = regexp.MustCompile(`\bdesign-notes\.md ((?:(?:,| and)?\s*§[0-9]+)+)`)
	reSection     = regexp.MustCompile(`§([0-9]+(?:\.[0-9]+)?)`)
	reDocPath     = regexp.MustCompile(`\bdocs/[A-Za-z0-9_-]+\.md\b`)      // from the repository root
	reMarkdownRef = regexp.MustCompile(`\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)`) // relative to the page

	// References to documents that live outside the repository, and to issue numbers,
	// which mean nothing to someone who cloned it.
	reOutside = regexp.MustCompile(`shared/spec|shared/style|shared/emulator|implementation-notes|\bstyle\.md|(?i:\bissues? #?[0-9]+\b|\bitem [0-9]+ of issue|see issues\b)`)
)

// contract is what docs/ defines.
type contract struct {
	rules, principles map[string]bool // "S-LOCK-5", "P1"
	protocol, notes   map[string]bool // section numbers: "6", "6.4", "11.3"; "2"
}

func loadContract(t *testing.T) contract {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	c := contract{
		rules:      defined(read("semantics.md"), `(?m)^- \*\*(S-[A-Z]+-[0-9]+)\*\*`),
		principles: defined(read("principles.md"), `(?m)^- \*\*(P[0-9]+)\*\*`),
		protocol:   sections(read("protocol.md")),
		notes:      defined(read("design-notes.md"), `(?m)^## ([0-9]+)\.`),
	}
	if len(c.rules) < 40 || len(c.principles) < 10 || len(c.protocol) < 20 || len(c.notes) < 4 {
		t.Fatalf("docs define only %d rules, %d principles, %d protocol sections, %d design notes: the patterns here are stale",
			len(c.rules), len(c.principles), len(c.protocol), len(c.notes))
	}
	return c
}

func defined(doc, pattern string) map[string]bool {
	m := map[string]bool{}
	for _, sm := range regexp.MustCompile(pattern).FindAllStringSubmatch(doc, -1) {
		m[sm[1]] = true
	}
	return m
}

// sections returns protocol.md's section numbers: "## 6." gives "6", "### 6.4" gives
// "6.4", and the numbered items of "## 11." give "11.1", "11.2", ...
func sections(doc string) map[string]bool {
	m := map[string]bool{}
	top := ""
	for line := range strings.SplitSeq(doc, "\n") {
		if sm := regexp.MustCompile(`^## ([0-9]+)\.`).FindStringSubmatch(line); sm != nil {
			top = sm[1]
			m[top] = true
		} else if strings.HasPrefix(line, "## ") {
			top = ""
		} else if sm := regexp.MustCompile(`^### ([0-9]+\.[0-9]+) `).FindStringSubmatch(line); sm != nil {
			m[sm[1]] = true
		} else if sm := regexp.MustCompile(`^([0-9]+)\. `).FindStringSubmatch(line); sm != nil && top == "11" {
			m[top+"."+sm[1]] = true
		}
	}
	return m
}

// unresolved lists the references in text that c does not define, and the references
// to documents outside the repository.
func (c contract) unresolved(text string) []string {
	var bad []string
	for _, id := range reRuleRef.FindAllString(text, -1) {
		if !c.rules[id] {
			bad = append(bad, id+" (not in docs/semantics.md)")
		}
	}
	for _, id := range rePrincRef.FindAllString(text, -1) {
		if !c.principles[id] {
			bad = append(bad, id+" (not in docs/principles.md)")
		}
	}
	for _, sm := range reProtocolRef.FindAllStringSubmatch(text, -1) {
		for _, s := range reSection.FindAllStringSubmatch(sm[1], -1) {
			if !c.protocol[s[1]] {
				bad = append(bad, "protocol.md §"+s[1]+" (no such section)")
			}
		}
	}
	for _, sm := range reNotesRef.FindAllStringSubmatch(text, -1) {
		for _, s := range reSection.FindAllStringSubmatch(sm[1], -1) {
			if !c.notes[s[1]] {
				bad = append(bad, "design-notes.md §"+s[1]+" (no such section)")
			}
		}
	}
	for _, s := range reOutside.FindAllString(text, -1) {
		bad = append(bad, s+" (points outside the repository)")
	}
	return bad
}

// TestReferencesResolve checks every .go and .md file of the module, including that the
// docs/*.md pages they name and the Markdown pages they link to exist.
func TestReferencesResolve(t *testing.T) {
	c := loadContract(t)
	files, cited := 0, 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// third_party/hashicorp-raft is upstream's code and docs (docs/raft-patches.md).
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "bin" || name == "data" || path == filepath.Join("..", "third_party", "hashicorp-raft")) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); (ext != ".go" && ext != ".md") || filepath.Base(path) == "refs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		cited += len(reRuleRef.FindAllIndex(b, -1))
		for _, r := range c.unresolved(string(b)) {
			t.Errorf("%s: %s", path, r)
		}
		for _, doc := range reDocPath.FindAllString(string(b), -1) {
			if _, err := os.Stat(filepath.Join("..", doc)); err != nil {
				t.Errorf("%s: %s does not exist", path, doc)
			}
		}
		if filepath.Ext(path) == ".md" {
			for _, m := range reMarkdownRef.FindAllStringSubmatch(string(b), -1) {
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), m[1])); err != nil {
					t.Errorf("%s: link to %s, which does not exist", path, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || cited < 100 {
		t.Fatalf("checked %d files citing %d rules: the walk is not reading the repository", files, cited)
	}
}

// TestReferenceCheckCatchesStaleRefs proves the matcher is not vacuous.
func TestReferenceCheckCatchesStaleRefs(t *testing.T) {
	c := loadContract(t)
	cases := []struct {
		text string
		want []string
	}{
		{"// S-LOCK-5, P1, protocol.md §6.4, §11.3 and design-notes.md §2", nil},
		{"// part 2 §2.6.7 (the AMQP specification, not ours)", nil},
		{"// S-LOCK-99", []string{"S-LOCK-99 (not in docs/semantics.md)"}},
		{"// (P42: made up)", []string{"P42 (not in docs/principles.md)"}},
		{"// protocol.md §6.3, §12.1", []string{"protocol.md §12.1 (no such section)"}},
		{"// (protocol §6.9)", []string{"protocol.md §6.9 (no such section)"}},
		{"// design-notes.md §9", []string{"design-notes.md §9 (no such section)"}},
		{"// see shared/spec/semantics.md", []string{"shared/spec (points outside the repository)"}},
		{"// (issue 3 item 7)", []string{"issue 3 (points outside the repository)"}},
	}
	for _, tc := range cases {
		if got := c.unresolved(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("unresolved(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
