package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	fmt.Fprintf(g.stdout, "purged %d message(s) from %s\n", res.Purged, what)
	return nil
}

// namespaceCmd: qbctl namespace purge.
func (g *globals) namespaceCmd(ctx context.Context, args []string) error {
	if len(args) != 1 || args[0] != "purge" {
		return fmt.Errorf("%w: namespace takes one verb: purge", errUsage)
	}
	return g.purge(ctx, "/$purge", "the namespace")
}
