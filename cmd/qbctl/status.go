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
	return &cobra.Command{Use: "status", Short: "node health and namespace", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error { return g.status(c.Context()) }}
}

func (g *globals) status(ctx context.Context) error {
	hc := g.httpClient(10 * time.Second)
	probe := func(path string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.adminURL(path), nil)
		if err != nil {
			return err.Error()
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "unreachable: " + err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("%d %s", resp.StatusCode, s)
		}
		if s == "" {
			return "ok"
		}
		return s
	}
	keys := []string{"admin", "healthz", "readyz"}
	values := []any{g.adminAddr, probe("/healthz"), probe("/readyz")}
	if ac, err := g.adminClient(); err == nil {
		if ns, err := ac.GetNamespaceProperties(ctx, nil); err == nil {
			keys = append(keys, "namespace", "sku", "created")
			values = append(values, ns.Name, ns.SKU, ns.CreatedTime)
		} else {
			keys = append(keys, "namespace")
			values = append(values, "error: "+err.Error())
		}
	}
	return g.printKV(keys, values)
}
