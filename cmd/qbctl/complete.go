package main

import (
	"context"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
)

// Shell completion of entity names: the scripts `qbctl completion SHELL` writes ask
// qbctl for the candidates of the word being typed, and these functions ask the node
// (with the flags typed so far: --admin-addr, --connection-string, --data). A node that
// cannot be asked completes nothing rather than fail.

const completeTimeout = 3 * time.Second

func (g *globals) names(c *cobra.Command, list func(ctx context.Context, ac *admin.Client) ([]string, error)) []string {
	ac, err := g.adminClient()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.Context(), completeTimeout)
	defer cancel()
	out, _ := list(ctx, ac)
	return out
}

func queueNames(ctx context.Context, ac *admin.Client) ([]string, error) {
	var out []string
	p := ac.NewListQueuesPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, err
		}
		for _, q := range page.Queues {
			out = append(out, q.QueueName)
		}
	}
	return out, nil
}

func topicNames(ctx context.Context, ac *admin.Client) ([]string, error) {
	var out []string
	p := ac.NewListTopicsPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, err
		}
		for _, t := range page.Topics {
			out = append(out, t.TopicName)
		}
	}
	return out, nil
}

func subscriptionNames(topic string) func(ctx context.Context, ac *admin.Client) ([]string, error) {
	return func(ctx context.Context, ac *admin.Client) ([]string, error) {
		var out []string
		p := ac.NewListSubscriptionsPager(topic, nil)
		for p.More() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return out, err
			}
			for _, s := range page.Subscriptions {
				out = append(out, s.SubscriptionName)
			}
		}
		return out, nil
	}
}

func ruleNames(topic, sub string) func(ctx context.Context, ac *admin.Client) ([]string, error) {
	return func(ctx context.Context, ac *admin.Client) ([]string, error) {
		var out []string
		p := ac.NewListRulesPager(topic, sub, nil)
		for p.More() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return out, err
			}
			for _, r := range page.Rules {
				out = append(out, r.Name)
			}
		}
		return out, nil
	}
}

const noFiles = cobra.ShellCompDirectiveNoFileComp

// completeEntityArgs completes the names of an entity command of kind k: a queue or a
// topic, then (subscriptions) a subscription of that topic.
func (g *globals) completeEntityArgs(k entityKind, max int) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch {
		case len(args) >= max:
			return nil, noFiles
		case k == kindQueue:
			return g.names(c, queueNames), noFiles
		case len(args) == 0:
			return g.names(c, topicNames), noFiles
		}
		return g.names(c, subscriptionNames(args[0])), noFiles
	}
}

// completeRuleArgs completes TOPIC SUB RULE.
func (g *globals) completeRuleArgs(max int) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return g.names(c, topicNames), noFiles
		case 1:
			return g.names(c, subscriptionNames(args[0])), noFiles
		case 2:
			if max == 3 {
				return g.names(c, ruleNames(args[0], args[1])), noFiles
			}
		}
		return nil, noFiles
	}
}

// completeEntityPath completes ENTITY: queue names, and TOPIC/Subscriptions/SUB once a
// topic is typed (withTopics: also plain topic names, for send).
func (g *globals) completeEntityPath(withTopics bool) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, typed string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, noFiles
		}
		if topic, _, ok := strings.Cut(typed, "/"); ok {
			var out []string
			for _, s := range g.names(c, subscriptionNames(topic)) {
				out = append(out, topic+"/Subscriptions/"+s)
			}
			return out, noFiles
		}
		out := g.names(c, queueNames)
		for _, t := range g.names(c, topicNames) {
			if withTopics {
				out = append(out, t)
			} else {
				out = append(out, t+"/Subscriptions/")
			}
		}
		dir := noFiles
		if !withTopics {
			dir |= cobra.ShellCompDirectiveNoSpace
		}
		return out, dir
	}
}
