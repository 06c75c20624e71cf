package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

// purge drives the admin API's POST .../$purge (docs/admin-api.md) and reports the count.
func (g *globals) purge(ctx context.Context, path, what string) error {
	b, err := g.adminRequest(ctx, http.MethodPost, path, nil)
	if err != nil {
		return err
	}
	var res struct {
		Purged int64 `json:"purged"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"entity": what, "purged": res.Purged})
	}
	fmt.Fprintf(g.stdout, "purged %d message(s) from %s\n", res.Purged, what)
	return nil
}

// namespaceCmd: qbctl namespace purge.
func (g *globals) namespaceCmd() *cobra.Command {
	purge := &cobra.Command{Use: "purge", Short: "remove every message of every entity (entities stay)", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			return g.human(g.purge(c.Context(), "/$purge", "the namespace"), target{kind: "namespace", name: "the namespace"})
		}}
	return group("namespace", "the namespace: purge", nil, purge)
}
