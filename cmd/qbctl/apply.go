package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"

	"github.com/spf13/cobra"
)

// applyResult is the answer of the admin API's PUT /$config (cluster/admin.ConfigResult).
type applyResult struct {
	Applied  []string `json:"applied"`
	Warnings []string `json:"warnings"`
}

func (g *globals) applyCmd() *cobra.Command {
	var file string
	var prune bool
	c := &cobra.Command{Use: "apply -f Config.json [--prune]", Short: "bring the namespace to a Config.json: create and update what it declares",
		Long: `Bring the namespace to an emulator Config.json (docs/config-json.md), as a GitOps tool
applies a definition: queues, topics, subscriptions and rules it declares are created
when missing and updated when their properties or filters differ; nothing else changes,
unless --prune, which also deletes the queues and topics the file does not declare, the
subscriptions of its topics it does not declare and their undeclared rules. Applying the
same file again changes nothing. The Helm chart runs it on every install and upgrade.`,
		Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if file == "" {
				return usageErr(c.CommandPath(), "apply needs -f FILE")
			}
			body, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			path := "/$config"
			if prune {
				path += "?prune=true"
			}
			b, err := g.adminRequest(c.Context(), http.MethodPut, path, body)
			if err != nil {
				return g.human(err, target{kind: "Config.json", name: file})
			}
			var res applyResult
			if err := json.Unmarshal(b, &res); err != nil {
				return fmt.Errorf("the node answered something that is not PUT /$config's JSON: %v", err)
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"Applied": res.Applied, "Warnings": res.Warnings})
			}
			for _, w := range res.Warnings {
				fmt.Fprintln(g.stderr, "warning:", w)
			}
			for _, a := range res.Applied {
				fmt.Fprintln(g.stdout, a)
			}
			fmt.Fprintf(g.stdout, "%d change(s) applied from %s\n", len(res.Applied), file)
			return nil
		}}
	c.Flags().StringVarP(&file, "file", "f", "", "the Config.json to apply")
	c.Flags().BoolVar(&prune, "prune", false, "also delete what the file does not declare")
	return c
}
