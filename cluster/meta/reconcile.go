package meta

import (
	"reflect"
	"strings"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Reconcile returns the commands that bring s to what the file declares, as a GitOps
// tool applies a definition on every deploy (the chart's apply hook, qbctl apply):
// missing entities, subscriptions and rules are created; existing ones whose declared
// properties or rule differ are updated; with prune, queues and topics the file does not
// declare, subscriptions of declared topics it does not declare, and rules of declared
// subscriptions it does not declare are deleted. Properties fixed at creation
// (RequiresSession, RequiresDuplicateDetection, partitioning) keep their value, with a
// warning when the file declares another. Nothing is emitted when s already matches.
func (c *EmulatorConfig) Reconcile(s *State, prune bool) (cmds []Command, warnings []string) {
	// The last item that sets an owner's properties (a creation, or the update that sets
	// its forwards) carries the properties to converge to.
	last := map[string]int{}
	for i, it := range c.items {
		switch it.cmd.(type) {
		case *CreateQueue, *UpdateQueue, *CreateTopic, *UpdateTopic, *CreateSubscription, *UpdateSubscription:
			last[strings.ToLower(it.owner)] = i
		}
	}
	existed := func(owner string) bool {
		topic, sub, isSub := strings.Cut(owner, "/Subscriptions/")
		if isSub {
			_, ok := s.Subscription(topic, sub)
			return ok
		}
		return s.Kind(owner) != KindNone
	}
	fixed := func(owner, what string) {
		warnings = append(warnings, owner+": "+what+" is fixed at creation; the declared value is not applied")
	}
	for i, it := range c.items {
		if _, ok := it.cmd.(*SetNamespace); ok {
			if s.Namespace().Name == "" {
				cmds = append(cmds, it.cmd)
			}
			continue
		}
		if !existed(it.owner) {
			cmds = append(cmds, it.cmd) // as at start-up: creations, then forwards
			continue
		}
		isLast := last[strings.ToLower(it.owner)] == i
		switch x := it.cmd.(type) {
		case *CreateQueue, *UpdateQueue:
			if !isLast {
				continue
			}
			p := queueProps(x)
			q, _ := s.Queue(it.owner)
			if p.RequiresSession != q.Properties.RequiresSession || p.RequiresDuplicateDetection != q.Properties.RequiresDuplicateDetection || p.PartitionCount != q.Properties.PartitionCount {
				fixed("queue "+q.Name, "RequiresSession, RequiresDuplicateDetection or EnablePartitioning")
				p.RequiresSession, p.RequiresDuplicateDetection, p.PartitionCount = q.Properties.RequiresSession, q.Properties.RequiresDuplicateDetection, q.Properties.PartitionCount
			}
			p.AuthorizationRules = q.Properties.AuthorizationRules
			if !reflect.DeepEqual(p, q.Properties) {
				cmds = append(cmds, &UpdateQueue{Name: q.Name, Properties: p})
			}
		case *CreateTopic, *UpdateTopic:
			if !isLast {
				continue
			}
			p := topicProps(x)
			t, _ := s.Topic(it.owner)
			if p.RequiresDuplicateDetection != t.Properties.RequiresDuplicateDetection || p.PartitionCount != t.Properties.PartitionCount {
				fixed("topic "+t.Name, "RequiresDuplicateDetection or EnablePartitioning")
				p.RequiresDuplicateDetection, p.PartitionCount = t.Properties.RequiresDuplicateDetection, t.Properties.PartitionCount
			}
			p.AuthorizationRules = t.Properties.AuthorizationRules
			if !reflect.DeepEqual(p, t.Properties) {
				cmds = append(cmds, &UpdateTopic{Name: t.Name, Properties: p})
			}
		case *CreateSubscription, *UpdateSubscription:
			topic, name, _ := strings.Cut(it.owner, "/Subscriptions/")
			sub, _ := s.Subscription(topic, name)
			if cs, ok := x.(*CreateSubscription); ok {
				cmds = append(cmds, reconcileRules(sub, cs.Rules, prune)...)
			}
			if !isLast {
				continue
			}
			p := subProps(x)
			if p.RequiresSession != sub.Properties.RequiresSession {
				fixed("subscription "+sub.Topic+"/Subscriptions/"+sub.Name, "RequiresSession")
				p.RequiresSession = sub.Properties.RequiresSession
			}
			if !reflect.DeepEqual(p, sub.Properties) {
				cmds = append(cmds, &UpdateSubscription{Topic: sub.Topic, Name: sub.Name, Properties: p})
			}
		}
	}
	if prune {
		cmds = append(cmds, c.prune(s)...)
	}
	return cmds, warnings
}

func queueProps(c Command) QueueProperties {
	if x, ok := c.(*CreateQueue); ok {
		return x.Properties
	}
	return c.(*UpdateQueue).Properties
}

func topicProps(c Command) TopicProperties {
	if x, ok := c.(*CreateTopic); ok {
		return x.Properties
	}
	return c.(*UpdateTopic).Properties
}

func subProps(c Command) SubscriptionProperties {
	if x, ok := c.(*CreateSubscription); ok {
		return x.Properties
	}
	return c.(*UpdateSubscription).Properties
}

// reconcileRules brings an existing subscription's rules to the declared ones (no
// declared rule means the $Default rule a new subscription gets).
func reconcileRules(sub Subscription, specs []rule.Spec, prune bool) []Command {
	if len(specs) == 0 {
		specs = []rule.Spec{{Name: rule.DefaultRuleName, Filter: rule.FilterSpec{Kind: rule.FilterTrue}}}
	}
	var out []Command
	declared := map[string]bool{}
	for _, sp := range specs {
		declared[strings.ToLower(sp.Name)] = true
		j := ruleIndex(sub.Rules, sp.Name)
		switch {
		case j < 0:
			out = append(out, &CreateRule{Topic: sub.Topic, Subscription: sub.Name, Rule: sp})
		default:
			have := sub.Rules[j].Spec
			want := sp
			want.Name = have.Name
			if !reflect.DeepEqual(cloneSpec(want), cloneSpec(have)) {
				out = append(out, &UpdateRule{Topic: sub.Topic, Subscription: sub.Name, Rule: want})
			}
		}
	}
	if prune {
		for _, r := range sub.Rules {
			if !declared[strings.ToLower(r.Spec.Name)] {
				out = append(out, &DeleteRule{Topic: sub.Topic, Subscription: sub.Name, Name: r.Spec.Name})
			}
		}
	}
	return out
}

// prune deletes what exists and the file does not declare: queues and topics, and the
// subscriptions of declared topics.
func (c *EmulatorConfig) prune(s *State) []Command {
	declared := map[string]bool{}
	for _, it := range c.items {
		if it.owner != "" {
			declared[strings.ToLower(it.owner)] = true
		}
	}
	var out []Command
	for _, q := range s.Queues() {
		if !declared[strings.ToLower(q.Name)] {
			out = append(out, &DeleteQueue{Name: q.Name})
		}
	}
	for _, t := range s.Topics() {
		if !declared[strings.ToLower(t.Name)] {
			out = append(out, &DeleteTopic{Name: t.Name})
			continue
		}
		subs, _ := s.Subscriptions(t.Name)
		for _, sub := range subs {
			if !declared[strings.ToLower(t.Name+"/Subscriptions/"+sub.Name)] {
				out = append(out, &DeleteSubscription{Topic: t.Name, Name: sub.Name})
			}
		}
	}
	return out
}
