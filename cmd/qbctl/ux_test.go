package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Help on every level prints the command's usage on stdout and succeeds: qbctl --help,
// qbctl queue -h, qbctl queue create -h, and every other command.
func TestHelpOnEveryLevel(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, s := range c.Commands() {
			if !s.Hidden {
				walk(s, append(append([]string{}, path...), s.Name()))
			}
		}
	}
	walk((&globals{}).rootCmd(), nil)
	if len(paths) < 40 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, p := range paths {
		for _, h := range []string{"--help", "-h"} {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append(append([]string{}, p...), h), &out, &errOut)
			if err != nil || errOut.Len() != 0 {
				t.Errorf("qbctl %s %s: err %v, stderr %q", strings.Join(p, " "), h, err, errOut.String())
			}
			if !strings.Contains(out.String(), "Usage:") {
				t.Errorf("qbctl %s %s printed no usage:\n%s", strings.Join(p, " "), h, out.String())
			}
		}
	}
}

// A usage error says what was wrong and where the help is, and is errUsage (exit 2).
func TestUsageErrorsHaveAHint(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"queu"}, `unknown command "queu"`, "did you mean queue?"},
		{[]string{"queue"}, "queue needs a verb: create, delete, list, purge, show, update", "qbctl queue --help"},
		{[]string{"queue", "frob"}, `unknown queue verb "frob"`, "qbctl queue --help"},
		{[]string{"queue", "show"}, "queue show takes NAME, got 0", "qbctl queue show --help"},
		{[]string{"queue", "create", "q", "--lock-duration", "soon"}, `"soon" is not a duration`, "qbctl queue create --help"},
		{[]string{"queue", "create", "q", "--status", "Sleeping"}, `"Sleeping" is not one of Active`, "qbctl queue create --help"},
		{[]string{"-o", "yaml", "queue", "list"}, "--output must be table or json", "--help"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		var printed bytes.Buffer
		if err != nil {
			printError(&printed, err)
		}
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(hintOf(err), tc.hint) ||
			!strings.Contains(printed.String(), "\nhint: ") {
			t.Errorf("qbctl %v: %q, want %q with a hint containing %q", tc.args, printed.String(), tc.msg, tc.hint)
		}
	}
}

func TestCompletionForEachShell(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_qbctl", "zsh": "#compdef qbctl", "fish": "complete -c qbctl"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"completion", shell}, &out, &errOut); err != nil || !strings.Contains(out.String(), want) {
			t.Errorf("completion %s: %v, script lacks %q", shell, err, want)
		}
	}
	// What the scripts ask qbctl: the candidates for the word being typed.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"qu"}, []string{"queue"}},
		{[]string{"queue", ""}, []string{"create", "delete", "list", "purge", "show", "update"}},
		{[]string{"queue", "create", "jobs", "--dead"}, []string{"--dead-letter-on-expiration"}},
		{[]string{"queue", "create", "jobs", "--status", ""}, []string{"Active", "Disabled", "SendDisabled", "ReceiveDisabled"}},
		{[]string{"subscription", "create", "t", "s", "--dead-letter-on-f"}, []string{"--dead-letter-on-filter-errors"}},
		{[]string{"-o", ""}, []string{"table", "json"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append([]string{cobra.ShellCompRequestCmd}, tc.args...), &out, &errOut); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(out.String(), "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// Errors from the admin API are sentences about the entity with a hint, never a dump
// of the HTTP answer.
func TestEntityErrorsAreSentences(t *testing.T) {
	qb := adminNode(t, nil)
	if _, _, err := qb("queue", "create", "cli-q1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"queue", "create", "cli-q1"}, `queue "cli-q1" already exists (409)`},
		{[]string{"queue", "create", "CLI-Q1"}, `queue "CLI-Q1" already exists (409)`},
		{[]string{"queue", "delete", "nosuch"}, `queue "nosuch" not found`},
		{[]string{"queue", "show", "nosuch"}, `queue "nosuch" not found`},
		{[]string{"queue", "update", "nosuch", "--max-delivery-count", "3"}, `queue "nosuch" not found`},
		{[]string{"topic", "delete", "nosuch"}, `topic "nosuch" not found`},
		{[]string{"subscription", "delete", "nosuch", "s"}, `subscription "nosuch/Subscriptions/s" not found`},
		{[]string{"rule", "show", "nosuch", "s", "r"}, `rule "nosuch/Subscriptions/s/Rules/r" not found`},
		{[]string{"dlq", "purge", "nosuch"}, `queue "nosuch" not found`},
		{[]string{"dlq", "resubmit", "nosuch"}, `queue "nosuch" not found`},
		{[]string{"key", "delete", "nosuch"}, `key "nosuch" not found`},
		{[]string{"queue", "create", "q2", "--lock-duration", "1s"}, `queue "q2": rejected (400): LockDuration: "PT1S" is below the minimum 5s`},
	} {
		out, _, err := qb(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("qbctl %v: %v, want %q", tc.args, err, tc.msg)
			continue
		}
		if hintOf(err) == "" {
			t.Errorf("qbctl %v: %v has no hint", tc.args, err)
		}
		for _, raw := range []string{"RESPONSE", "<Detail>", "&#34;", "TrackingId", "ERROR CODE", "meta:"} {
			if strings.Contains(err.Error(), raw) {
				t.Errorf("qbctl %v: the error shows the raw answer (%s): %v", tc.args, raw, err)
			}
		}
		if out != "" {
			t.Errorf("qbctl %v printed %q before failing", tc.args, out)
		}
	}
	out, _, err := qb("queue", "delete", "cli-q1")
	if err != nil || out != "deleted queue \"cli-q1\"\n" {
		t.Errorf("delete: %q %v", out, err)
	}
}

func showJSON(t *testing.T, qb func(...string) (string, string, error), args ...string) map[string]any {
	t.Helper()
	out, _, err := qb(append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: not a JSON object: %v\n%s", args, err, out)
	}
	return m
}

// show -o json uses the SDK's property names, and the file it writes creates an equal
// entity (create --from-file) or changes one (update --from-file); flags win over it.
func TestShowJSONRoundTrips(t *testing.T) {
	qb := adminNode(t, nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		kind       string
		src, dst   []string
		flags      []string
		want       map[string]any
		changeKey  string
		changeFlag []string
		changed    any
	}{
		{"queue", []string{"jobs"}, []string{"jobs2"},
			[]string{"--lock-duration", "30s", "--max-delivery-count", "3", "--dead-letter-on-expiration", "true", "--default-ttl", "PT2H", "--user-metadata", "m"},
			map[string]any{"LockDuration": "PT30S", "MaxDeliveryCount": 3.0, "DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT2H", "UserMetadata": "m", "Status": "Active"},
			"MaxDeliveryCount", []string{"--max-delivery-count", "7"}, 7.0},
		{"topic", []string{"events"}, []string{"events2"},
			[]string{"--duplicate-window", "1m", "--requires-duplicate-detection", "true", "--support-ordering", "false"},
			map[string]any{"DuplicateDetectionHistoryTimeWindow": "PT1M", "RequiresDuplicateDetection": true, "SupportOrdering": false},
			"UserMetadata", []string{"--user-metadata", "x"}, "x"},
		{"subscription", []string{"events", "audit"}, []string{"events", "audit2"},
			[]string{"--lock-duration", "45s", "--dead-letter-on-filter-errors", "true", "--requires-session", "true", "--status", "SendDisabled"},
			map[string]any{"LockDuration": "PT45S", "EnableDeadLetteringOnFilterEvaluationExceptions": true, "RequiresSession": true, "Topic": "events", "Name": "audit",
				"Status": "SendDisabled"},
			"Status", []string{"--status", "receivedisabled"}, "ReceiveDisabled"},
	} {
		if _, _, err := qb(append(append([]string{tc.kind, "create"}, tc.src...), tc.flags...)...); err != nil {
			t.Fatalf("%s create: %v", tc.kind, err)
		}
		src := showJSON(t, qb, append([]string{tc.kind, "show"}, tc.src...)...)
		for k, v := range tc.want {
			if src[k] != v {
				t.Errorf("%s show: %s = %v, want %v", tc.kind, k, src[k], v)
			}
		}
		for k := range src {
			if k != strings.ToUpper(k[:1])+k[1:] {
				t.Errorf("%s show: key %q is not the SDK's CamelCase", tc.kind, k)
			}
		}
		file := filepath.Join(dir, tc.kind+".json")
		out, _, _ := qb(append(append([]string{tc.kind, "show"}, tc.src...), "-o", "json")...)
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := qb(append(append([]string{tc.kind, "create"}, tc.dst...), "--from-file", file)...); err != nil {
			t.Fatalf("%s create --from-file: %v", tc.kind, err)
		}
		dst := showJSON(t, qb, append([]string{tc.kind, "show"}, tc.dst...)...)
		for k, v := range src {
			if k != "Name" && dst[k] != v {
				t.Errorf("%s created from the file: %s = %v, want %v", tc.kind, k, dst[k], v)
			}
		}
		// update --from-file with a flag that wins over the file.
		if _, _, err := qb(append(append(append([]string{tc.kind, "update"}, tc.dst...), "-f", file), tc.changeFlag...)...); err != nil {
			t.Fatalf("%s update --from-file: %v", tc.kind, err)
		}
		if got := showJSON(t, qb, append([]string{tc.kind, "show"}, tc.dst...)...); got[tc.changeKey] != tc.changed {
			t.Errorf("%s update: %s = %v, want %v", tc.kind, tc.changeKey, got[tc.changeKey], tc.changed)
		}
		// Without names, the file's are used: the source entity exists already.
		if _, _, err := qb(tc.kind, "create", "--from-file", file); err == nil || !strings.Contains(err.Error(), "already exists (409)") {
			t.Errorf("%s create --from-file without names: %v", tc.kind, err)
		}
	}
	// A file with a property the kind does not have is refused, with the accepted names.
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"LockDuration": "PT1M", "Frobs": 1}`), 0o600)
	if _, _, err := qb("queue", "create", "q3", "-f", bad); err == nil || !strings.Contains(err.Error(), "Frobs: unknown property") ||
		!strings.Contains(hintOf(err), "LockDuration") {
		t.Errorf("unknown property: %v (hint %q)", err, hintOf(err))
	}
	_ = os.WriteFile(bad, []byte(`{"LockDuration": "PT1M"}`), 0o600)
	if _, _, err := qb("topic", "create", "t3", "-f", bad); err == nil || !strings.Contains(err.Error(), "LockDuration: not a topic property") {
		t.Errorf("queue property for a topic: %v", err)
	}
	// Lists use the SDK's names too.
	out, _, err := qb("queue", "list", "-o", "json")
	var list []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || list[0]["Name"] != "jobs" ||
		list[0]["ActiveMessageCount"] != 0.0 {
		t.Errorf("queue list: %v %s", err, out)
	}
}

// rule list -o json gives each filter and action as an object, and rule create
// --from-file reads rule show -o json back.
func TestRuleJSONIsStructured(t *testing.T) {
	qb := adminNode(t, nil)
	for _, args := range [][]string{
		{"topic", "create", "events"}, {"subscription", "create", "events", "eu"},
		{"rule", "create", "events", "eu", "region", "--sql", "region = 'eu'", "--action", "SET routed = true"},
		{"rule", "create", "events", "eu", "vip", "--correlation-id", "vip", "--property", "tier=1", "--property", "zone=north"},
		{"rule", "delete", "events", "eu", "$Default"},
	} {
		if _, _, err := qb(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	out, _, err := qb("rule", "list", "events", "eu", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rules []struct {
		Name   string
		Filter map[string]any
		Action map[string]any
	}
	if err := json.Unmarshal([]byte(out), &rules); err != nil || len(rules) != 2 {
		t.Fatalf("rule list: %v\n%s", err, out)
	}
	if r := rules[0]; r.Name != "region" || r.Filter["Type"] != "SqlFilter" || r.Filter["Expression"] != "region = 'eu'" ||
		r.Action["Type"] != "SqlRuleAction" || r.Action["Expression"] != "SET routed = true" {
		t.Errorf("sql rule: %+v", r)
	}
	props, _ := rules[1].Filter["ApplicationProperties"].(map[string]any)
	if r := rules[1]; r.Name != "vip" || r.Filter["Type"] != "CorrelationFilter" || r.Filter["CorrelationID"] != "vip" ||
		props["tier"] != 1.0 || props["zone"] != "north" || r.Action != nil {
		t.Errorf("correlation rule: %+v", r)
	}
	dir := t.TempDir()
	for _, name := range []string{"region", "vip"} {
		out, _, err := qb("rule", "show", "events", "eu", name, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name+".json")
		_ = os.WriteFile(file, []byte(out), 0o600)
		if _, _, err := qb("rule", "create", "events", "eu", name+"-copy", "--from-file", file); err != nil {
			t.Fatalf("rule create --from-file: %v", err)
		}
		copied, _, _ := qb("rule", "show", "events", "eu", name+"-copy", "-o", "json")
		if strings.Replace(copied, name+"-copy", name, 1) != out {
			t.Errorf("rule %s copied through a file:\n%s\nwant\n%s", name, copied, out)
		}
	}
}

// Away from a terminal, every progress line is a whole line.
func TestProgressLinesEndWithANewline(t *testing.T) {
	for _, total := range []int{0, 7, 1000} {
		var b bytes.Buffer
		p := newProgress(&b, total)
		for i := 1; i <= max(total, 250); i++ {
			p.set(i)
		}
		p.finish()
		if b.Len() == 0 || !strings.HasSuffix(b.String(), "\n") || strings.Contains(b.String(), "\r") {
			t.Errorf("total %d: %q", total, b.String())
		}
		if lines := strings.Count(b.String(), "\n"); lines > 12 {
			t.Errorf("total %d: %d lines", total, lines)
		}
	}
}

// Completion asks the node for entity names.
func TestCompletionOfEntityNames(t *testing.T) {
	qb := adminNode(t, nil)
	for _, args := range [][]string{{"queue", "create", "jobs"}, {"queue", "create", "mail"}, {"topic", "create", "events"},
		{"subscription", "create", "events", "audit"}, {"rule", "create", "events", "audit", "vip", "--correlation-id", "v"}} {
		if _, _, err := qb(args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "show", ""}, "jobs mail"},
		{[]string{"queue", "delete", "jobs", ""}, ""},
		{[]string{"queue", "create", ""}, ""},
		{[]string{"subscription", "show", ""}, "events"},
		{[]string{"subscription", "show", "events", ""}, "audit"},
		{[]string{"subscription", "create", "events", ""}, ""},
		{[]string{"rule", "delete", "events", "audit", ""}, "$Default vip"},
		{[]string{"peek", ""}, "jobs mail events/Subscriptions/"},
		{[]string{"dlq", "purge", "events/"}, "events/Subscriptions/audit"},
		{[]string{"send", ""}, "jobs mail events"},
	} {
		out, _, err := qb(append([]string{cobra.ShellCompRequestCmd}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "Completion ended") {
				got = append(got, l)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// A partitioned entity shows 16 times the size it was created with; created from that
// file, its copy shows the same.
func TestPartitionedEntityRoundTrips(t *testing.T) {
	qb := adminNode(t, nil)
	if _, _, err := qb("queue", "create", "big", "--partitioned", "true", "--max-size-mb", "2048"); err != nil {
		t.Fatal(err)
	}
	src := showJSON(t, qb, "queue", "show", "big")
	if src["MaxSizeInMegabytes"] != 32768.0 || src["EnablePartitioning"] != true {
		t.Fatalf("partitioned queue: %v", src)
	}
	out, _, _ := qb("queue", "show", "big", "-o", "json")
	file := filepath.Join(t.TempDir(), "big.json")
	_ = os.WriteFile(file, []byte(out), 0o600)
	if _, _, err := qb("queue", "create", "big2", "-f", file); err != nil {
		t.Fatal(err)
	}
	if dst := showJSON(t, qb, "queue", "show", "big2"); dst["MaxSizeInMegabytes"] != 32768.0 || dst["EnablePartitioning"] != true {
		t.Errorf("copy: %v", dst)
	}
	if _, _, err := qb("queue", "update", "big2", "-f", file, "--user-metadata", "x"); err != nil {
		t.Fatal(err)
	}
	if dst := showJSON(t, qb, "queue", "show", "big2"); dst["MaxSizeInMegabytes"] != 32768.0 || dst["UserMetadata"] != "x" {
		t.Errorf("updated copy: %v", dst)
	}
}
