package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
)

type kvFlag map[string]any

func (kv kvFlag) String() string { return "" }
func (kv kvFlag) Type() string   { return "key=value" }

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

type strPtrFlag struct{ dst **string }

func (f strPtrFlag) String() string     { return "" }
func (f strPtrFlag) Type() string       { return "string" }
func (f strPtrFlag) Set(v string) error { *f.dst = &v; return nil }

func ruleTarget(pos []string) target {
	t := target{kind: "rule", name: strings.Join(pos, "/")}
	if len(pos) >= 2 {
		t.list = "qbctl rule list " + pos[0] + " " + pos[1]
	}
	if len(pos) == 3 {
		t.name = pos[0] + "/Subscriptions/" + pos[1] + "/Rules/" + pos[2]
	}
	return t
}

func (g *globals) ruleCmd() *cobra.Command {
	var (
		sql, action, fromFile string
		always, never         bool
		corr                  admin.CorrelationFilter
		corrProps             = kvFlag{}
	)
	create := &cobra.Command{
		Use:   "create TOPIC SUB RULE (--sql EXPR | --true | --false | correlation flags | --from-file F) [--action SQL]",
		Short: "add a rule to a subscription",
		Long: `Add a rule to a subscription: exactly one filter, and optionally a SQL action.

--from-file reads one rule as 'qbctl rule show TOPIC SUB RULE -o json' prints it:
{"Name": ..., "Filter": {"Type": "SqlFilter", "Expression": ...}, "Action": {...}}.`,
		Args: nArgs("TOPIC", "SUB", "RULE"),
		RunE: func(c *cobra.Command, pos []string) error {
			var props admin.RuleProperties
			if len(corrProps) > 0 {
				corr.ApplicationProperties = corrProps
			}
			isCorr := len(corrProps) > 0
			for _, f := range []*string{corr.CorrelationID, corr.MessageID, corr.To, corr.ReplyTo,
				corr.Subject, corr.SessionID, corr.ReplyToSessionID, corr.ContentType} {
				isCorr = isCorr || f != nil
			}
			n := 0
			for _, b := range []bool{sql != "", always, never, isCorr, fromFile != ""} {
				if b {
					n++
				}
			}
			if n != 1 {
				return usageErr(c.CommandPath(), "give exactly one filter: --sql, --true, --false, correlation flags or --from-file")
			}
			switch {
			case fromFile != "":
				r, err := readRuleFile(fromFile)
				if err != nil {
					return err
				}
				props.Filter, props.Action = r.Filter, r.Action
			case sql != "":
				props.Filter = &admin.SQLFilter{Expression: sql}
			case always:
				props.Filter = &admin.TrueFilter{}
			case never:
				props.Filter = &admin.FalseFilter{}
			default:
				props.Filter = &corr
			}
			if action != "" {
				props.Action = &admin.SQLAction{Expression: action}
			}
			ac, err := g.adminClient()
			if err != nil {
				return err
			}
			ctx := c.Context()
			if _, err := ac.CreateRule(ctx, pos[0], pos[1], &admin.CreateRuleOptions{
				Name: &pos[2], Filter: props.Filter, Action: props.Action}); err != nil {
				return g.human(err, ruleTarget(pos))
			}
			return g.human(g.showRule(ctx, ac, pos), ruleTarget(pos))
		},
	}
	fs := create.Flags()
	fs.StringVar(&sql, "sql", "", "SQL filter expression")
	fs.BoolVar(&always, "true", false, "TrueFilter: every message matches")
	fs.BoolVar(&never, "false", false, "FalseFilter: no message matches")
	fs.StringVar(&action, "action", "", "SQL rule action (SET/REMOVE statements)")
	fs.StringVarP(&fromFile, "from-file", "f", "", "read the filter and action from a JSON file as 'rule show -o json' writes it ('-': standard input)")
	for _, f := range []struct {
		dst  **string
		name string
	}{{&corr.CorrelationID, "correlation-id"}, {&corr.MessageID, "message-id"}, {&corr.To, "to"}, {&corr.ReplyTo, "reply-to"},
		{&corr.Subject, "subject"}, {&corr.SessionID, "session-id"}, {&corr.ReplyToSessionID, "reply-to-session-id"},
		{&corr.ContentType, "content-type"}} {
		fs.Var(strPtrFlag{f.dst}, f.name, "correlation filter: "+f.name)
	}
	fs.Var(corrProps, "property", "correlation filter application property key=value (repeatable)")

	withClient := func(fn func(ctx context.Context, ac *admin.Client, pos []string) error) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, pos []string) error {
			ac, err := g.adminClient()
			if err != nil {
				return err
			}
			return g.human(fn(c.Context(), ac, pos), ruleTarget(pos))
		}
	}
	list := &cobra.Command{Use: "list TOPIC SUB", Short: "list a subscription's rules", Args: nArgs("TOPIC", "SUB"),
		RunE: withClient(func(ctx context.Context, ac *admin.Client, pos []string) error {
			t := &table{header: []string{"NAME", "FILTER", "ACTION"}}
			var objs []*object
			pager := ac.NewListRulesPager(pos[0], pos[1], nil)
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					return g.human(err, ruleTarget(pos)) // "listing the rules of subscription ..."
				}
				for _, r := range page.Rules {
					t.add(r.Name, describeFilter(r.Filter), describeAction(r.Action))
					objs = append(objs, ruleObject(r))
				}
			}
			if g.output == "json" {
				if objs == nil {
					objs = []*object{}
				}
				return g.printJSON(objs)
			}
			return g.print(t)
		})}
	show := &cobra.Command{Use: "show TOPIC SUB RULE", Short: "show one rule", Args: nArgs("TOPIC", "SUB", "RULE"),
		RunE: withClient(func(ctx context.Context, ac *admin.Client, pos []string) error { return g.showRule(ctx, ac, pos) })}
	del := &cobra.Command{Use: "delete TOPIC SUB RULE", Short: "delete a rule", Args: nArgs("TOPIC", "SUB", "RULE"),
		RunE: withClient(func(ctx context.Context, ac *admin.Client, pos []string) error {
			if _, err := ac.DeleteRule(ctx, pos[0], pos[1], pos[2], nil); err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"Deleted": pos[2], "Kind": "rule"})
			}
			fmt.Fprintf(g.stdout, "deleted rule %q of %s/Subscriptions/%s\n", pos[2], pos[0], pos[1])
			return nil
		})}
	create.ValidArgsFunction = g.completeRuleArgs(2)
	list.ValidArgsFunction = g.completeRuleArgs(2)
	show.ValidArgsFunction = g.completeRuleArgs(3)
	del.ValidArgsFunction = g.completeRuleArgs(3)
	return group("rule", "subscription rules: create, list, show, delete", []string{"rules"}, create, list, show, del)
}

func (g *globals) showRule(ctx context.Context, ac *admin.Client, pos []string) error {
	r, err := ac.GetRule(ctx, pos[0], pos[1], pos[2], nil)
	if err != nil {
		return err
	}
	if r == nil {
		return withHint(fmt.Errorf("%s not found", ruleTarget(pos)), "'"+ruleTarget(pos).list+"' lists them")
	}
	if g.output == "json" {
		return g.printJSON(ruleObject(r.RuleProperties))
	}
	return g.printKV([]string{"Name", "Filter", "Action"},
		[]any{r.Name, describeFilter(r.Filter), describeAction(r.Action)})
}

// ruleObject is a rule as JSON: the filter and action as objects with a Type (the
// ATOM type name) and the SDK's field names.
func ruleObject(r admin.RuleProperties) *object {
	o := (&object{}).add("Name", r.Name)
	f := &object{}
	switch x := r.Filter.(type) {
	case *admin.TrueFilter:
		f.add("Type", "TrueFilter")
	case *admin.FalseFilter:
		f.add("Type", "FalseFilter")
	case *admin.SQLFilter:
		f.add("Type", "SqlFilter").add("Expression", x.Expression)
		if len(x.Parameters) > 0 {
			f.add("Parameters", x.Parameters)
		}
	case *admin.CorrelationFilter:
		f.add("Type", "CorrelationFilter")
		for _, kv := range []struct {
			k string
			v *string
		}{{"CorrelationID", x.CorrelationID}, {"MessageID", x.MessageID}, {"To", x.To}, {"ReplyTo", x.ReplyTo},
			{"Subject", x.Subject}, {"SessionID", x.SessionID}, {"ReplyToSessionID", x.ReplyToSessionID}, {"ContentType", x.ContentType}} {
			if kv.v != nil {
				f.add(kv.k, *kv.v)
			}
		}
		if len(x.ApplicationProperties) > 0 {
			f.add("ApplicationProperties", x.ApplicationProperties)
		}
	case *admin.UnknownRuleFilter:
		f.add("Type", x.Type)
	case nil:
		f = nil
	}
	if f != nil {
		o.add("Filter", f)
	} else {
		o.add("Filter", nil)
	}
	if a, ok := r.Action.(*admin.SQLAction); ok && a != nil {
		ao := (&object{}).add("Type", "SqlRuleAction").add("Expression", a.Expression)
		if len(a.Parameters) > 0 {
			ao.add("Parameters", a.Parameters)
		}
		o.add("Action", ao)
	} else {
		o.add("Action", nil)
	}
	return o
}

// ruleJSON is ruleObject read back.
type ruleJSON struct {
	Name   string
	Filter *struct {
		Type                  string
		Expression            string
		Parameters            map[string]any
		CorrelationID         *string
		MessageID             *string
		To                    *string
		ReplyTo               *string
		Subject               *string
		SessionID             *string
		ReplyToSessionID      *string
		ContentType           *string
		ApplicationProperties map[string]any
	}
	Action *struct {
		Type       string
		Expression string
		Parameters map[string]any
	}
}

func readRuleFile(path string) (admin.RuleProperties, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return admin.RuleProperties{}, err
		}
		defer f.Close()
		r = f
	}
	var j ruleJSON
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	hint := "write one with 'qbctl rule show TOPIC SUB RULE -o json'"
	if err := dec.Decode(&j); err != nil {
		return admin.RuleProperties{}, withHint(fmt.Errorf("--from-file %s: %v", path, err), hint)
	}
	var p admin.RuleProperties
	if j.Filter == nil {
		return p, withHint(fmt.Errorf("--from-file %s: no Filter", path), hint)
	}
	f := j.Filter
	switch strings.ToLower(f.Type) {
	case "truefilter":
		p.Filter = &admin.TrueFilter{}
	case "falsefilter":
		p.Filter = &admin.FalseFilter{}
	case "sqlfilter":
		p.Filter = &admin.SQLFilter{Expression: f.Expression, Parameters: numbers(f.Parameters)}
	case "correlationfilter":
		p.Filter = &admin.CorrelationFilter{CorrelationID: f.CorrelationID, MessageID: f.MessageID, To: f.To, ReplyTo: f.ReplyTo,
			Subject: f.Subject, SessionID: f.SessionID, ReplyToSessionID: f.ReplyToSessionID, ContentType: f.ContentType,
			ApplicationProperties: numbers(f.ApplicationProperties)}
	default:
		return p, withHint(fmt.Errorf("--from-file %s: Filter.Type %q is not one of SqlFilter, CorrelationFilter, TrueFilter, FalseFilter", path, f.Type), hint)
	}
	if j.Action != nil && j.Action.Expression != "" {
		p.Action = &admin.SQLAction{Expression: j.Action.Expression, Parameters: numbers(j.Action.Parameters)}
	}
	return p, nil
}

// numbers types JSON numbers as the SDK sends them: integers as int64, others float64.
func numbers(m map[string]any) map[string]any {
	for k, v := range m {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				m[k] = i
			} else if f, err := n.Float64(); err == nil {
				m[k] = f
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
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
