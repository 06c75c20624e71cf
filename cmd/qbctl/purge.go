package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// purgeCmd is `qbctl queue|subscription|topic purge`: what the SDKs' purgeMessages does
// (batch delete, S-DEL-1..4) on the entity and then its dead-letter queue, or with
// --reset the admin API's reset.
func (g *globals) purgeCmd(k entityKind, names string) *cobra.Command {
	short := "remove the messages of a " + k.String() + " and its dead-letter queue, as the SDKs' purgeMessages does"
	if k == kindTopic {
		short = "purge every subscription of a topic, as the SDKs' purgeMessages does"
	}
	var reset bool
	c := &cobra.Command{Use: "purge " + names + " [--reset]", Short: short, Args: nArgs(k.names()...),
		RunE: func(c *cobra.Command, pos []string) error {
			if reset {
				path := "/" + url.PathEscape(pos[0])
				if k == kindSubscription {
					path += "/Subscriptions/" + url.PathEscape(pos[1])
				}
				return g.human(g.purge(c.Context(), path+"/$purge", strings.Join(pos, "/Subscriptions/")), k.target(pos))
			}
			return g.human(g.batchPurge(c.Context(), k, pos), k.target(pos))
		}}
	what := "the " + k.String() + " and then its dead-letter queue"
	if k == kindTopic {
		what = "each subscription of the topic and then its dead-letter queue"
	}
	c.Long = `Remove the messages of ` + what + ` with
com.microsoft:batch-delete-messages, as the Service Bus SDKs' purgeMessages does:
requests of up to 4,000 messages, each deleting only messages enqueued before the
command started, until one deletes nothing.
Messages a receiver holds locked stay (they can still be completed), and so do messages
scheduled for later; deferred messages go (S-DEL-1..4 in docs/semantics.md).

--reset removes everything instead, locked, scheduled and deferred messages included
(the admin API's POST .../$purge, one Raft proposal per partition): the operator's reset,
as 'qbctl namespace purge' is for the whole namespace.`
	c.Flags().BoolVar(&reset, "reset", false, "remove every message, locked, scheduled and deferred ones included (the admin API's $purge)")
	return c
}

// purged is what a batch-delete purge removed from one queue or subscription.
type purged struct {
	entity       entityPath
	active, dead int // from the entity, from its dead-letter queue
}

// batchPurge purges the queue, the subscription or every subscription of the topic
// named by pos, each entity and then its dead-letter queue, with batch deletes cut off at
// the time it started (drainDLQ's connection: up to 4,000 messages a request).
func (g *globals) batchPurge(ctx context.Context, k entityKind, pos []string) error {
	before := time.Now()
	var entities []entityPath
	switch k {
	case kindQueue:
		entities = []entityPath{{queue: pos[0]}}
	case kindSubscription:
		entities = []entityPath{{topic: pos[0], sub: pos[1]}}
	default:
		subs, err := g.subscriptionsOf(ctx, pos[0])
		if err != nil {
			return err
		}
		for _, s := range subs {
			entities = append(entities, entityPath{topic: pos[0], sub: s})
		}
	}
	for _, e := range entities {
		if _, err := g.deadLetterCount(ctx, e); err != nil { // it exists: fail before purging anything
			return err
		}
	}
	var res []purged
	if len(entities) > 0 {
		c, err := g.batchConn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		for _, e := range entities {
			p := purged{entity: e}
			p.active, err = c.Purge(ctx, e.String(), before, 0, nil)
			if err == nil {
				p.dead, err = c.Purge(ctx, e.String()+"/$DeadLetterQueue", before, 0, nil)
			}
			res = append(res, p)
			if err != nil {
				if n := total(res); n > 0 {
					return fmt.Errorf("after purging %d message(s) from %s: %w", n, strings.Join(pos, "/Subscriptions/"), err)
				}
				return err
			}
		}
	}
	return g.printPurged(k, pos[0], res)
}

func total(res []purged) int {
	n := 0
	for _, p := range res {
		n += p.active + p.dead
	}
	return n
}

// subscriptionsOf lists the names of a topic's subscriptions through the admin API.
func (g *globals) subscriptionsOf(ctx context.Context, topic string) ([]string, error) {
	ac, err := g.adminClient()
	if err != nil {
		return nil, err
	}
	t, err := ac.GetTopic(ctx, topic, nil)
	if err != nil || t == nil {
		return nil, firstNonNil(err, withHint(fmt.Errorf("topic %q not found", topic), "'qbctl topic list' lists them"))
	}
	var names []string
	pager := ac.NewListSubscriptionsPager(topic, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Subscriptions {
			names = append(names, s.SubscriptionName)
		}
	}
	return names, nil
}

// printPurged reports a batch-delete purge: "Purged" is the total, as the reset reports
// it, "DeadLettered" how many of them came from dead-letter queues; a topic's adds each
// subscription's.
func (g *globals) printPurged(k entityKind, topic string, res []purged) error {
	dead := 0
	for _, p := range res {
		dead += p.dead
	}
	if g.output == "json" {
		if k != kindTopic {
			p := res[0]
			return g.printJSON(map[string]any{"Entity": p.entity.String(), "Purged": p.active + p.dead, "DeadLettered": p.dead})
		}
		subs := make([]map[string]any, 0, len(res))
		for _, p := range res {
			subs = append(subs, map[string]any{"Entity": p.entity.String(), "Purged": p.active + p.dead, "DeadLettered": p.dead})
		}
		return g.printJSON(map[string]any{"Entity": topic, "Purged": total(res), "DeadLettered": dead, "Subscriptions": subs})
	}
	for _, p := range res {
		fmt.Fprintf(g.stdout, "purged %d message(s) from %s (%d from its dead-letter queue)\n", p.active+p.dead, p.entity, p.dead)
	}
	if k == kindTopic {
		fmt.Fprintf(g.stdout, "purged %d message(s) from %s (%d subscription(s), %d from dead-letter queues)\n", total(res), topic, len(res), dead)
	}
	return nil
}

// purge drives the admin API's POST .../$purge (docs/admin-api.md), the reset that also
// removes locked, scheduled and deferred messages, and reports the count.
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
		return g.printJSON(map[string]any{"Entity": what, "Purged": res.Purged, "Reset": true})
	}
	fmt.Fprintf(g.stdout, "purged %d message(s) from %s (reset: locked, scheduled and deferred messages included)\n", res.Purged, what)
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
