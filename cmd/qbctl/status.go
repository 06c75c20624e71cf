package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func (g *globals) statusCmd() *cobra.Command {
	return &cobra.Command{Use: "status", Short: "node health and namespace; exits 1 unless the node is healthy and ready", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error { return g.status(c.Context()) }}
}

// status prints the node's health, readiness and namespace, and fails (exit status 1)
// when the node is unreachable, unhealthy or not ready, so that scripts and probes can
// use it.
func (g *globals) status(ctx context.Context) error {
	hc := g.httpClient(10 * time.Second)
	var failed []string
	probe := func(path string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.adminURL(path), nil)
		if err != nil {
			failed = append(failed, path)
			return err.Error()
		}
		resp, err := hc.Do(req)
		if err != nil {
			failed = append(failed, path)
			return "unreachable: " + unwrapURL(err).Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK {
			failed = append(failed, path)
			return fmt.Sprintf("%d %s", resp.StatusCode, s)
		}
		if s == "" {
			return "ok"
		}
		return s
	}
	keys := []string{"admin", "healthz", "readyz"}
	values := []any{g.adminAddr, probe("/healthz"), probe("/readyz")}
	if len(failed) < 2 { // the admin API answered: ask for the namespace too
		if ac, err := g.adminClient(); err == nil {
			if ns, err := ac.GetNamespaceProperties(ctx, nil); err == nil {
				keys = append(keys, "namespace", "sku", "created time")
				values = append(values, ns.Name, ns.SKU, ns.CreatedTime)
			} else {
				keys = append(keys, "namespace")
				values = append(values, "error: "+err.Error())
			}
		}
	}
	if err := g.printKV(keys, values); err != nil {
		return err
	}
	switch {
	case len(failed) == 2 && strings.HasPrefix(values[1].(string), "unreachable: "):
		return withHint(fmt.Errorf("the node at %s is unreachable", g.adminAddr),
			"is the node running? Point --admin-addr (or QUORUMBUS_ADMIN_ADDR) at its admin listener")
	case len(failed) > 0 && failed[0] == "/healthz":
		return fmt.Errorf("the node at %s is not healthy", g.adminAddr)
	case len(failed) > 0:
		return fmt.Errorf("the node at %s is not ready", g.adminAddr)
	}
	return nil
}
