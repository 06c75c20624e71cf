package test

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/quorumbus/quorumbus"

// depRule forbids packages under a prefix from depending (directly or not) on others.
type depRule struct {
	pkgPrefix string   // packages this rule applies to (module-relative, "" = root)
	forbidden []string // import path prefixes they must not reach
	why       string
}

// stdOnly lists the packages that may depend on the standard library only, and why.
var stdOnly = map[string]string{
	"cluster/placement":     "placement is a pure choice over a View, with no dependency to keep apart from (P8)",
	"cmd/internal/kubenode": "one GET of a Kubernetes node with net/http and the pod's token: client-go's dependency tree is not worth a label",
	"internal/binenc":       "the field encoding of the fsm's and the wire's codecs: the pure fsm imports it (P1, P3)",
	"test/lazyfsctl":        "it runs test/lazyfs (a module of its own) as a process, so that go-fuse stays out of the product's go.mod",
}

var depRules = append([]depRule{
	{"fsm", []string{"os", "net", "math/rand", "crypto/rand", "syscall", "time", "sync",
		"github.com/hashicorp/", module + "/partition", module + "/cluster", module + "/amqp"},
		"the replicated state machine is pure: time, randomness and I/O arrive in commands (P1)"},
	{"amqp", []string{module + "/fsm", module + "/partition", module + "/cluster", "github.com/hashicorp/"},
		"amqp knows nothing of Raft; it defines the Backend interface it needs (P9)"},
	{"partition", []string{module + "/cluster", module + "/amqp"},
		"dependencies point one way: fsm <- partition <- cluster"},
	{"partition/transport", []string{module + "/fsm", exactly(module + "/partition"), module + "/cluster", module + "/amqp"},
		"the transport carries bytes and raft's RPCs; it knows no entity, fsm or partition (P8)"},
	{"cluster", []string{module + "/amqp"},
		"cluster implements amqp.Backend structurally; cmd wires the two together"},
	{"cluster/placement", []string{"os", "net", "time", "math/rand", "crypto/rand", "sync", "syscall"},
		"placement is a pure choice over a View: no clock, I/O, randomness or goroutine (P8)"},
	{"cluster/gossip", []string{module + "/fsm", module + "/partition", module + "/cluster/meta", "github.com/hashicorp/raft"},
		"gossip only says who is alive and what they advertise; it knows no Raft group (P8)"},
	{"cluster/meta", []string{"os", "net", module + "/partition", "github.com/hashicorp/"},
		"the metadata state machine is pure like the fsm: its Raft group, disk and network are cluster/metagroup's (P1, P8)"},
	{"cluster/admin", []string{module + "/partition", "github.com/hashicorp/"},
		"the admin API speaks to the node through its Store and Cluster interfaces, never to Raft or a partition (P9)"},
	{"cmd/internal/explorer", []string{module + "/amqp"},
		"the explorer is a client of the broker (the SDK and go-amqp), never its AMQP server"},
	{"cluster/metagroup", []string{module + "/partition", module + "/cluster/gossip", "github.com/hashicorp/memberlist"},
		"the metadata group replicates cluster/meta over Raft; it knows neither the partition groups nor gossip (P8)"},
	{"cluster/wire", []string{"reflect", "encoding/gob", "encoding/json", "net/rpc", module + "/amqp", module + "/cluster/meta",
		module + "/cluster/admin", "github.com/hashicorp/memberlist"},
		"the node-to-node protocol is a leaf of cluster: hand-written codecs without reflection (its versions are its " +
			"bytes), knowing partitions and fsm values but not the node, metadata or admin (cluster importing it makes " +
			"importing cluster a cycle)"},
	{"internal/binenc", []string{"os", "net", "time", "math/rand", "crypto/rand", "sync", "syscall", "unsafe", "reflect"},
		"the codecs' field encoding is pure: bytes in, values out, no clock, I/O, randomness, goroutine or reflection (P3)"},
	{"internal/sas", []string{module + "/amqp", module + "/cluster", module + "/fsm", module + "/partition", "github.com/hashicorp/", "github.com/Azure/", "golang.org/", "os", "net/http"},
		"the one SAS implementation is a pure stdlib leaf that amqp and cluster/admin both import"},
}, testOnly("fsm", "partition", "cluster", "amqp", "cmd", "internal")...)

// testOnly keeps everything under test/ (the shared helpers test/testutil and
// test/backendtest, the harness, lazyfsctl, and with them the testing package) out of the
// listed production packages; their tests may import it.
func testOnly(prefixes ...string) []depRule {
	var rules []depRule
	for _, p := range prefixes {
		rules = append(rules, depRule{p, []string{module + "/test/"},
			"production code never imports test/: it holds what only tests use"})
	}
	return rules
}

// TestDependencyDirection fails when a package reaches a dependency its layer forbids.
func TestDependencyDirection(t *testing.T) {
	pkgs := goList(t, "./...")
	checked := 0
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		for _, r := range depRules {
			if rel != r.pkgPrefix && !strings.HasPrefix(rel, r.pkgPrefix+"/") {
				continue
			}
			checked++
			// Standard-library entries are checked against direct imports (fmt itself
			// reaches os); module and third-party entries against all dependencies.
			direct := goList(t, "-f", `{{join .Imports "\n"}}`, pkg)
			for _, dep := range append(direct, goList(t, "-deps", pkg)...) {
				for _, f := range r.forbidden {
					if violates(dep, f, contains(direct, dep)) {
						t.Errorf("%s depends on %s: %s", rel, dep, r.why)
					}
				}
			}
		}
		if why, ok := stdOnly[rel]; ok {
			checked++
			for _, dep := range goList(t, "-deps", pkg) {
				if !isStd(dep) && dep != pkg {
					t.Errorf("%s depends on %s: %s", rel, dep, why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package matched any rule: the rule table is stale")
	}
}

// exactly makes a forbidden entry match that package alone, not those under it (a
// parent may not forbid its own sub-packages).
func exactly(path string) string { return path + "$" }

// violates reports whether dependency dep breaks the forbidden entry f. A standard
// library entry (no dot in its first element) counts only as a direct import.
func violates(dep, f string, isDirect bool) bool {
	if p, ok := strings.CutSuffix(f, "$"); ok {
		return dep == p
	}
	if isStd(f) && !isDirect {
		return false
	}
	return dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/")
}

// isStd reports whether an import path is the standard library's (no dot in its first
// element).
func isStd(path string) bool {
	return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDependencyRuleCatchesViolation proves the matcher is not vacuous.
func TestDependencyRuleCatchesViolation(t *testing.T) {
	cases := []struct {
		dep, forbidden string
		direct, want   bool
	}{
		{"time", "time", true, true},
		{"time", "time", false, false}, // reached only through fmt: allowed
		{"math/rand/v2", "math/rand", true, true},
		{"github.com/hashicorp/raft", "github.com/hashicorp/", false, true},
		{module + "/cluster/meta", module + "/cluster", false, true},
		{module + "/clusterx", module + "/cluster", false, false},
		{module + "/test/testutil", module + "/test/", false, true},
		{"strings", "time", true, false},
		{module + "/partition", exactly(module + "/partition"), false, true},
		{module + "/partition/transport", exactly(module + "/partition"), false, false},
	}
	for path, std := range map[string]bool{"sort": true, "math/rand/v2": true, module + "/fsm": false, "github.com/hashicorp/raft": false} {
		if isStd(path) != std {
			t.Errorf("isStd(%q) = %v, want %v", path, !std, std)
		}
	}
	for _, c := range cases {
		if got := violates(c.dep, c.forbidden, c.direct); got != c.want {
			t.Errorf("violates(%q, %q, direct=%v) = %v, want %v", c.dep, c.forbidden, c.direct, got, c.want)
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			pkgs = append(pkgs, s)
		}
	}
	return pkgs
}

// TestPackageDocsQuoteTheirRule keeps each package doc's "Imports:" paragraph and the
// rule table in step (docs/principles.md P8):
//   - a package whose doc.go has the paragraph has a row of its own (depRules or
//     stdOnly), and a package with a row of its own has the paragraph;
//   - the paragraph cites test/deps_test.go, says "standard library only" for a
//     stdOnly package, and names every package of the module its own row forbids;
//   - every package of the module it says is never imported ("never", "must not") is
//     forbidden by a row that applies to it, or imports it (a cycle forbids it then).
func TestPackageDocsQuoteTheirRule(t *testing.T) {
	var rels []string
	for _, pkg := range goList(t, "./...") {
		rels = append(rels, strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"))
	}
	own := map[string]bool{}
	for _, r := range depRules {
		if !isTestOnlyRule(r) {
			own[r.pkgPrefix] = true
		}
	}
	for p := range stdOnly {
		own[p] = true
	}
	checked := 0
	for _, rel := range rels {
		para, hasDoc := importsParagraph(t, rel)
		switch {
		case !hasDoc && own[rel]:
			t.Errorf("%s has a row in test/deps_test.go but its doc.go has no \"Imports:\" paragraph quoting it", rel)
			continue
		case !hasDoc:
			continue
		case !own[rel]:
			t.Errorf("%s/doc.go says what it imports, but test/deps_test.go has no row of its own for it: add one", rel)
			continue
		}
		checked++
		if !strings.Contains(para, "test/deps_test.go") {
			t.Errorf("%s/doc.go: the Imports paragraph does not cite test/deps_test.go: %q", rel, para)
		}
		if _, ok := stdOnly[rel]; ok && !strings.Contains(para, "standard library only") {
			t.Errorf("%s/doc.go: the Imports paragraph does not say \"standard library only\", as stdOnly does: %q", rel, para)
		}
		words := docWords(para)
		for _, r := range depRules {
			if r.pkgPrefix != rel || isTestOnlyRule(r) {
				continue
			}
			for _, f := range r.forbidden {
				name, inModule := strings.CutPrefix(strings.TrimSuffix(f, "$"), module+"/")
				if inModule && !words[name] {
					t.Errorf("%s/doc.go: the Imports paragraph does not name %s, which its row forbids: %q", rel, name, para)
				}
			}
		}
		for _, never := range neverImported(para, rels) {
			if forbiddenFor(rel, module+"/"+never) {
				continue
			}
			if strings.HasPrefix(rel, never+"/") && contains(goList(t, "-deps", module+"/"+never), module+"/"+rel) {
				continue // never imports rel: importing it would be a cycle
			}
			t.Errorf("%s/doc.go says it never imports %s, but no row of test/deps_test.go forbids it", rel, never)
		}
	}
	if checked == 0 {
		t.Fatal("no doc.go has an Imports paragraph: the check is stale")
	}
}

func isTestOnlyRule(r depRule) bool {
	return len(r.forbidden) == 1 && r.forbidden[0] == module+"/test/"
}

// forbiddenFor reports whether a row that applies to package rel forbids dep.
func forbiddenFor(rel, dep string) bool {
	for _, r := range depRules {
		if rel != r.pkgPrefix && !strings.HasPrefix(rel, r.pkgPrefix+"/") {
			continue
		}
		for _, f := range r.forbidden {
			if violates(dep, f, true) {
				return true
			}
		}
	}
	return false
}

// importsParagraph returns the "Imports:" paragraph of rel's doc.go as one line, and
// whether there is one.
func importsParagraph(t *testing.T, rel string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel, "doc.go"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	} else if err != nil {
		t.Fatal(err)
	}
	var para []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		text, isComment := strings.CutPrefix(line, "//")
		text = strings.TrimSpace(text)
		if !in && isComment && strings.HasPrefix(text, "Imports:") {
			in = true
		}
		if in {
			if !isComment || text == "" {
				break
			}
			para = append(para, text)
		}
	}
	return strings.Join(para, " "), in
}

var docWordRE = regexp.MustCompile(`[a-z][a-z0-9_]*(?:/[a-z0-9_]+)*`)

// docWords returns the path-like words of a paragraph.
func docWords(para string) map[string]bool {
	out := map[string]bool{}
	for _, w := range docWordRE.FindAllString(para, -1) {
		out[w] = true
	}
	return out
}

// neverImported returns the packages of the module (rels) named in the clause that
// begins at the first "never" or "must not" of a paragraph and ends at a colon or at
// the end of its sentence.
func neverImported(para string, rels []string) []string {
	low := strings.ToLower(para)
	i := strings.Index(low, "never")
	if j := strings.Index(low, "must not"); j >= 0 && (i < 0 || j < i) {
		i = j
	}
	if i < 0 {
		return nil
	}
	clause := para[i:]
	if j := strings.IndexAny(clause, ":"); j >= 0 {
		clause = clause[:j]
	}
	if j := strings.Index(clause, ". "); j >= 0 {
		clause = clause[:j]
	}
	words := docWords(clause)
	var out []string
	for _, rel := range rels {
		if words[rel] {
			out = append(out, rel)
		}
	}
	return out
}
