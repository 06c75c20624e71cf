package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

type kvFlag map[string]any

func (kv kvFlag) String() string { return fmt.Sprint(map[string]any(kv)) }

// Set takes key=value; the value is typed as an int, float, bool, or else a string,
// so that a correlation property matches the type the sender used.
func (kv kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	kv[k] = typedValue(v)
	return nil
}

func typedValue(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return v
}

func (g *globals) ruleCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: rule needs a verb: create, list, show or delete", errUsage)
	}
	verb := args[0]
	fs := flag.NewFlagSet("qbctl rule "+verb, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	sql := fs.String("sql", "", "SQL filter expression")
	always := fs.Bool("true", false, "TrueFilter: every message matches")
	never := fs.Bool("false", false, "FalseFilter: no message matches")
	action := fs.String("action", "", "SQL rule action (SET/REMOVE statements)")
	var corr admin.CorrelationFilter
	corrProps := kvFlag{}
	strf := func(dst **string, name string) {
		fs.Func(name, "correlation filter: "+name, func(v string) error { *dst = &v; return nil })
	}
	strf(&corr.CorrelationID, "correlation-id")
	strf(&corr.MessageID, "message-id")
	strf(&corr.To, "to")
	strf(&corr.ReplyTo, "reply-to")
	strf(&corr.Subject, "subject")
	strf(&corr.SessionID, "session-id")
	strf(&corr.ReplyToSessionID, "reply-to-session-id")
	strf(&corr.ContentType, "content-type")
	fs.Var(corrProps, "property", "correlation filter application property key=value (repeatable)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	want := 3
	if verb == "list" {
		want = 2
	}
	if len(pos) != want {
		return fmt.Errorf("%w: rule %s takes %d arguments (TOPIC SUB%s), got %d", errUsage, verb, want,
			map[bool]string{true: " RULE", false: ""}[want == 3], len(pos))
	}
	var props admin.RuleProperties
	if verb == "create" {
		if len(corrProps) > 0 {
			corr.ApplicationProperties = corrProps
		}
		isCorr := len(corrProps) > 0
		for _, f := range []*string{corr.CorrelationID, corr.MessageID, corr.To, corr.ReplyTo,
			corr.Subject, corr.SessionID, corr.ReplyToSessionID, corr.ContentType} {
			isCorr = isCorr || f != nil
		}
		n := 0
		for _, b := range []bool{*sql != "", *always, *never, isCorr} {
			if b {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%w: give exactly one filter: --sql, --true, --false or correlation flags", errUsage)
		}
		props.Name = pos[2]
		switch {
		case *sql != "":
			props.Filter = &admin.SQLFilter{Expression: *sql}
		case *always:
			props.Filter = &admin.TrueFilter{}
		case *never:
			props.Filter = &admin.FalseFilter{}
		default:
			props.Filter = &corr
		}
		if *action != "" {
			props.Action = &admin.SQLAction{Expression: *action}
		}
	}
	ac, err := g.adminClient()
	if err != nil {
		return err
	}
	topic, sub := pos[0], pos[1]
	switch verb {
	case "create":
		if _, err := ac.CreateRule(ctx, topic, sub, &admin.CreateRuleOptions{
			Name: &props.Name, Filter: props.Filter, Action: props.Action}); err != nil {
			return err
		}
		return g.showRule(ctx, ac, topic, sub, pos[2])
	case "show":
		return g.showRule(ctx, ac, topic, sub, pos[2])
	case "delete":
		_, err := ac.DeleteRule(ctx, topic, sub, pos[2], nil)
		return err
	case "list":
		t := &table{header: []string{"NAME", "FILTER", "ACTION"}}
		pager := ac.NewListRulesPager(topic, sub, nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, r := range page.Rules {
				t.add(r.Name, describeFilter(r.Filter), describeAction(r.Action))
			}
		}
		return g.print(t)
	}
	return fmt.Errorf("%w: unknown rule verb %q", errUsage, verb)
}

func (g *globals) showRule(ctx context.Context, ac *admin.Client, topic, sub, name string) error {
	r, err := ac.GetRule(ctx, topic, sub, name, nil)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("rule %s/%s/%s not found", topic, sub, name)
	}
	return g.printKV([]string{"Name", "Filter", "Action"},
		[]any{r.Name, describeFilter(r.Filter), describeAction(r.Action)})
}

func describeFilter(f admin.RuleFilter) string {
	switch f := f.(type) {
	case *admin.TrueFilter:
		return "TrueFilter"
	case *admin.FalseFilter:
		return "FalseFilter"
	case *admin.SQLFilter:
		return "SqlFilter: " + f.Expression
	case *admin.CorrelationFilter:
		var parts []string
		add := func(k string, v *string) {
			if v != nil {
				parts = append(parts, k+"="+*v)
			}
		}
		add("CorrelationId", f.CorrelationID)
		add("MessageId", f.MessageID)
		add("To", f.To)
		add("ReplyTo", f.ReplyTo)
		add("Subject", f.Subject)
		add("SessionId", f.SessionID)
		add("ReplyToSessionId", f.ReplyToSessionID)
		add("ContentType", f.ContentType)
		keys := make([]string, 0, len(f.ApplicationProperties))
		for k := range f.ApplicationProperties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%v", k, f.ApplicationProperties[k]))
		}
		return "CorrelationFilter: " + strings.Join(parts, ", ")
	case nil:
		return ""
	}
	return fmt.Sprintf("%T", f)
}

func describeAction(a admin.RuleAction) string {
	if s, ok := a.(*admin.SQLAction); ok && s != nil {
		return s.Expression
	}
	return ""
}
