package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorumbus/quorumbus/cmd/internal/version"
)

func (g *globals) versionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "the version of qbctl and of the node it talks to", Args: nArgs(),
		Long: "Print the version, VCS revision and Go version of this qbctl and, when its admin API answers, of the node " +
			"(its quorumbus_build_info metric). A node that does not answer is reported on standard error; the " +
			"command still succeeds.",
		RunE: func(c *cobra.Command, _ []string) error { return g.version(c.Context()) }}
}

func (g *globals) version(ctx context.Context) error {
	t := &table{header: []string{"COMPONENT", "VERSION", "REVISION", "GO"},
		jsonKeys: []string{"Component", "Version", "Revision", "GoVersion"}}
	v := version.Get()
	t.add("qbctl", v.Version, v.Revision, v.GoVersion)
	if nv, err := g.nodeVersion(ctx); err == nil {
		t.add("node "+g.adminAddr, nv.Version, nv.Revision, nv.GoVersion)
	} else {
		fmt.Fprintf(g.stderr, "qbctl: the node at %s did not say its version: %v\n", g.adminAddr, err)
	}
	return g.print(t)
}

// nodeVersion reads the node's quorumbus_build_info metric from its /metrics, which
// needs no key.
func (g *globals) nodeVersion(ctx context.Context) (version.Info, error) {
	var v version.Info
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.adminURL("/metrics"), nil)
	if err != nil {
		return v, err
	}
	resp, err := g.httpClient(5 * time.Second).Do(req)
	if err != nil {
		return v, unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		labels, ok := strings.CutPrefix(sc.Text(), "quorumbus_build_info{")
		if !ok {
			continue
		}
		labels, _, _ = strings.Cut(labels, "}")
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "version":
				v.Version = val
			case "revision":
				v.Revision = val
			case "go_version":
				v.GoVersion = val
			}
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return v, err
	}
	return v, fmt.Errorf("its /metrics has no quorumbus_build_info (a node older than this qbctl)")
}
