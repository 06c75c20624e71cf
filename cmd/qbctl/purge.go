package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

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
		return g.printJSON(map[string]any{"Entity": what, "Purged": res.Purged})
	}
	fmt.Fprintf(g.stdout, "purged %d message(s) from %s\n", res.Purged, what)
	return nil
}

// namespaceCmd: qbctl namespace purge [--prefix P] | delete-entities --prefix P.
func (g *globals) namespaceCmd() *cobra.Command {
	var purgePrefix, deletePrefix string
	purge := &cobra.Command{Use: "purge", Short: "remove every message of every entity, or of those named with --prefix (entities stay)", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			path, what := "/$purge", "the namespace"
			if c.Flags().Changed("prefix") {
				path, what = "/$purge?prefix="+url.QueryEscape(purgePrefix), "the entities named "+purgePrefix+"*"
			}
			return g.human(g.purge(c.Context(), path, what), target{kind: "namespace", name: "the namespace"})
		}}
	purge.Flags().StringVar(&purgePrefix, "prefix", "", "only the queues and topics whose names start with this (case-insensitive)")
	del := &cobra.Command{Use: "delete-entities --prefix P", Short: "delete every queue and topic whose name starts with P (a test run's own entities)", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if deletePrefix == "" {
				return fmt.Errorf("--prefix is required (the entity name prefix)")
			}
			return g.human(g.deletePrefixed(c.Context(), deletePrefix), target{kind: "namespace", name: "the namespace"})
		}}
	del.Flags().StringVar(&deletePrefix, "prefix", "", "the entity name prefix (required)")
	return group("namespace", "the namespace: purge, delete-entities", nil, purge, del)
}

// deletePrefixed drives the admin API's DELETE /$entities?prefix=P.
func (g *globals) deletePrefixed(ctx context.Context, prefix string) error {
	b, err := g.adminRequest(ctx, http.MethodDelete, "/$entities?prefix="+url.QueryEscape(prefix), nil)
	if err != nil {
		return err
	}
	var res struct {
		Deleted []string `json:"deleted"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"Prefix": prefix, "Deleted": res.Deleted})
	}
	fmt.Fprintf(g.stdout, "deleted %d entities named %s*\n", len(res.Deleted), prefix)
	for _, n := range res.Deleted {
		fmt.Fprintf(g.stdout, "  %s\n", n)
	}
	return nil
}
