package test

import (
	"bufio"
	"bytes"
	"os/exec"
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
	"cluster/placement": "placement is a pure choice over a View, with no dependency to keep apart from (P8)",
	"internal/binenc":   "the field encoding of the fsm's and the wire's codecs: the pure fsm imports it (P1, P3)",
	"test/lazyfsctl":    "it runs test/lazyfs (a module of its own) as a process, so that go-fuse stays out of the product's go.mod",
}

var depRules = append([]depRule{
	{"fsm", []string{"os", "net", "math/rand", "crypto/rand", "syscall", "time", "sync",
		"github.com/hashicorp/", module + "/partition", module + "/cluster", module + "/amqp"},
		"the replicated state machine is pure: time, randomness and I/O arrive in commands (P1)"},
	{"amqp", []string{module + "/fsm", module + "/partition", module + "/cluster", "github.com/hashicorp/"},
		"amqp knows nothing of Raft; it defines the Backend interface it needs (P9)"},
	{"partition", []string{module + "/cluster", module + "/amqp"},
		"dependencies point one way: fsm <- partition <- cluster"},
	{"cluster", []string{module + "/amqp"},
		"cluster implements amqp.Backend structurally; cmd wires the two together"},
	{"cluster/placement", []string{"os", "net", "time", "math/rand", "crypto/rand", "sync", "syscall"},
		"placement is a pure choice over a View: no clock, I/O, randomness or goroutine (P8)"},
	{"cluster/gossip", []string{module + "/fsm", module + "/partition", module + "/cluster/meta", "github.com/hashicorp/raft"},
		"gossip only says who is alive and what they advertise; it knows no Raft group (P8)"},
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

// violates reports whether dependency dep breaks the forbidden entry f. A standard
// library entry (no dot in its first element) counts only as a direct import.
func violates(dep, f string, isDirect bool) bool {
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
