package meta

import (
	"strconv"
	"strings"
)

func quote(s string) string { return strconv.Quote(s) }

// MaxForwardChain is the longest forwarding chain Service Bus supports: a message is
// forwarded at most this many times (cluster dead-letters it after that).
const MaxForwardChain = 4

// CheckForwardLoop refuses a command that would make auto-forwarding (ForwardTo or
// ForwardDeadLetteredMessagesTo, S-FWD-1) go round in a circle, as Service Bus refuses
// it with 400 Bad Request: after the change no entity may reach itself by following
// forward targets, where a topic reaches every target of its subscriptions. Commands
// other than creating or updating a queue or subscription pass.
//
// This is a check of the proposer, not of Apply: Apply's verdicts must stay what
// earlier releases committed (P3). Two concurrent updates can still close a cycle
// between them; the forwarders' hop limit then bounds every message's trip.
func (s *State) CheckForwardLoop(c Command) error {
	var src, sub string // the entity whose forward edges change; sub for a subscription
	var fwd, fwdDLQ string
	switch c := c.(type) {
	case *CreateQueue:
		src, fwd, fwdDLQ = c.Name, c.Properties.ForwardTo, c.Properties.ForwardDeadLetteredMessagesTo
	case *UpdateQueue:
		src, fwd, fwdDLQ = c.Name, c.Properties.ForwardTo, c.Properties.ForwardDeadLetteredMessagesTo
	case *CreateSubscription:
		src, sub, fwd, fwdDLQ = c.Topic, c.Name, c.Properties.ForwardTo, c.Properties.ForwardDeadLetteredMessagesTo
	case *UpdateSubscription:
		src, sub, fwd, fwdDLQ = c.Topic, c.Name, c.Properties.ForwardTo, c.Properties.ForwardDeadLetteredMessagesTo
	default:
		return nil
	}
	// edges lists where an entity's messages are forwarded, with the change applied.
	edges := func(name string) []string {
		var out []string
		add := func(to ...string) {
			for _, t := range to {
				if t = ForwardTarget(t); t != "" {
					out = append(out, key(t))
				}
			}
		}
		isSrc := key(name) == key(src)
		if isSrc && sub == "" {
			add(fwd, fwdDLQ)
			return out
		}
		e := s.entities[key(name)]
		if e == nil {
			return nil
		}
		switch e.kind {
		case KindQueue:
			add(e.queue.Properties.ForwardTo, e.queue.Properties.ForwardDeadLetteredMessagesTo)
		case KindTopic:
			for _, sb := range e.subs {
				if isSrc && strings.EqualFold(sb.Name, sub) {
					continue
				}
				add(sb.Properties.ForwardTo, sb.Properties.ForwardDeadLetteredMessagesTo)
			}
			if isSrc {
				add(fwd, fwdDLQ)
			}
		}
		return out
	}
	field := map[string]string{}
	for _, f := range []struct{ name, to string }{{"ForwardDeadLetteredMessagesTo", fwdDLQ}, {"ForwardTo", fwd}} {
		if t := ForwardTarget(f.to); t != "" {
			field[key(t)] = f.name
		}
	}
	// Depth-first from each new target, looking for src; parents rebuild the path.
	for _, f := range []string{fwd, fwdDLQ} {
		start := ForwardTarget(f)
		if start == "" {
			continue
		}
		parent := map[string]string{key(start): ""}
		stack := []string{key(start)}
		for len(stack) > 0 {
			cur := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if cur == key(src) {
				path := []string{s.display(cur)}
				for p := parent[cur]; p != ""; p = parent[p] {
					path = append(path, s.display(p))
				}
				path = append(path, s.display(key(src)))
				for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				from := "queue " + quote(src)
				if sub != "" {
					from = "subscription " + quote(src+"/Subscriptions/"+sub)
				}
				return invalid(field[key(start)], "auto-forwarding from %s to %q would create a forwarding loop (%s): "+
					"messages must not be forwarded back to an entity they came from", from, start, strings.Join(path, " -> "))
			}
			for _, next := range edges(cur) {
				if _, seen := parent[next]; !seen {
					parent[next] = cur
					stack = append(stack, next)
				}
			}
		}
	}
	return nil
}

// display is an entity's name as created, or k when there is none.
func (s *State) display(k string) string {
	if e := s.entities[k]; e != nil {
		return e.name()
	}
	return k
}
