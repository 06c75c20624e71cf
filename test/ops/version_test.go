package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// TestVersionEverywhere: `quorumbus --version` prints the build's version, revision and
// Go version; the node's /metrics carries the same as quorumbus_build_info labels; and
// `qbctl version` prints its own build and the node's, as a table and as JSON. A release
// build's -ldflags -X values win over what the toolchain recorded.
func TestVersionEverywhere(t *testing.T) {
	bin := filepath.Join(harness.Binary(t), "quorumbus")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	m := regexp.MustCompile(`^quorumbus (\S+) \(revision (\S+), (go\S+)\)\n$`).FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("quorumbus --version: %v\n%s", err, out)
	}
	ver, rev, gov := m[1], m[2], m[3]

	n := harness.Start(t)
	resp, err := http.Get("http://" + n.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`quorumbus_build_info{go_version=%q,revision=%q,version=%q} 1`, gov, rev, ver)
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("/metrics lacks %s", want)
	}

	table, err := n.Qbctl(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"qbctl", "node " + n.Admin} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(who) + `\s+` + regexp.QuoteMeta(ver) + `\s+` + regexp.QuoteMeta(rev) + `\s+` + regexp.QuoteMeta(gov) + `$`).MatchString(table) {
			t.Errorf("qbctl version has no row for %s with %s %s %s:\n%s", who, ver, rev, gov, table)
		}
	}
	js, err := n.Qbctl(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]string
	if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("qbctl version -o json: %v\n%s", err, js)
	}
	for _, r := range rows {
		if r["Version"] != ver || r["Revision"] != rev || r["GoVersion"] != gov || r["Component"] == "" {
			t.Errorf("qbctl version -o json row %v, want version %s, revision %s, %s", r, ver, rev, gov)
		}
	}

	// A release build: the linker's values.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rel := filepath.Join(t.TempDir(), "quorumbus")
	build := exec.CommandContext(ctx, "go", "build", "-o", rel, "-ldflags",
		"-X github.com/quorumbus/quorumbus/cmd/internal/version.version=v9.8.7 -X github.com/quorumbus/quorumbus/cmd/internal/version.revision=cafe123",
		"./cmd/quorumbus")
	build.Dir = repoFile(t, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(rel, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "quorumbus v9.8.7 (revision cafe123, go") {
		t.Errorf("a release build's --version: %v %q", err, out)
	}
}
