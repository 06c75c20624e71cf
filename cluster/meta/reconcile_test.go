package meta

import (
	"fmt"
	"strings"
	"testing"
)

const reconcileBase = `{"UserConfig": {"Namespaces": [{"Name": "ns",
  "Queues": [{"Name": "jobs", "Properties": {"MaxDeliveryCount": 10}}, {"Name": "old"}],
  "Topics": [{"Name": "events", "Subscriptions": [
    {"Name": "eu", "Rules": [{"Name": "region", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "region = 'eu'"}}}]},
    {"Name": "audit"}]}]}]}}`

// The file after an edit: jobs's MaxDeliveryCount changed, queue "old" gone, queue "new"
// added, eu's rule changed and a second added, subscription "audit" gone.
const reconcileEdited = `{"UserConfig": {"Namespaces": [{"Name": "ns",
  "Queues": [{"Name": "jobs", "Properties": {"MaxDeliveryCount": 5}}, {"Name": "new"}],
  "Topics": [{"Name": "events", "Subscriptions": [
    {"Name": "eu", "Rules": [{"Name": "region", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "region = 'EU'"}}},
      {"Name": "vip", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": "vip"}}}]}]}]}]}}`

func loadCfg(t *testing.T, s string) *EmulatorConfig {
	t.Helper()
	c, _, err := LoadEmulatorConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func applyAll(t *testing.T, s *State, cmds []Command) {
	t.Helper()
	for _, c := range cmds {
		if err := s.Apply(&Entry{Cmd: c}); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
}

func describeCmds(cmds []Command) string {
	var b []string
	for _, c := range cmds {
		switch x := c.(type) {
		case *CreateQueue:
			b = append(b, "create queue "+x.Name)
		case *UpdateQueue:
			b = append(b, fmt.Sprintf("update queue %s MaxDeliveryCount=%d", x.Name, x.Properties.MaxDeliveryCount))
		case *DeleteQueue:
			b = append(b, "delete queue "+x.Name)
		case *CreateRule:
			b = append(b, "create rule "+x.Rule.Name)
		case *UpdateRule:
			b = append(b, "update rule "+x.Rule.Name)
		case *DeleteRule:
			b = append(b, "delete rule "+x.Name)
		case *DeleteSubscription:
			b = append(b, "delete subscription "+x.Name)
		default:
			b = append(b, fmt.Sprintf("%T", c))
		}
	}
	return strings.Join(b, "; ")
}

// Reconcile creates what is missing, updates what differs, deletes only with prune, and
// finds nothing to do once applied (every deploy re-applies the same file).
func TestReconcile(t *testing.T) {
	s := New()
	base := loadCfg(t, reconcileBase)
	cmds, warns := base.Reconcile(s, true)
	if len(cmds) != len(base.Commands()) || len(warns) != 0 {
		t.Fatalf("on an empty state: %s, warnings %v; want the creations %d", describeCmds(cmds), warns, len(base.Commands()))
	}
	applyAll(t, s, cmds)
	if again, _ := base.Reconcile(s, true); len(again) != 0 {
		t.Fatalf("applied, yet: %s", describeCmds(again))
	}

	edited := loadCfg(t, reconcileEdited)
	cmds, _ = edited.Reconcile(s, false)
	if got, want := describeCmds(cmds), "update queue jobs MaxDeliveryCount=5; create queue new; update rule region; create rule vip"; got != want {
		t.Fatalf("without prune: %s\nwant %s", got, want)
	}
	cmds, _ = edited.Reconcile(s, true)
	if got := describeCmds(cmds); !strings.HasSuffix(got, "create rule vip; delete queue old; delete subscription audit") {
		t.Fatalf("with prune: %s", got)
	}
	applyAll(t, s, cmds)
	if again, _ := edited.Reconcile(s, true); len(again) != 0 {
		t.Fatalf("applied, yet: %s", describeCmds(again))
	}
	if q, _ := s.Queue("jobs"); q.Properties.MaxDeliveryCount != 5 {
		t.Errorf("jobs: %+v", q.Properties)
	}
	if r, ok := s.Rule("events", "eu", "region"); !ok || !strings.Contains(fmt.Sprint(r.Spec), "EU") {
		t.Errorf("rule region: %+v", r)
	}

	// A fixed property declared otherwise is kept, with a warning.
	sessions := loadCfg(t, strings.Replace(reconcileEdited, `"MaxDeliveryCount": 5`, `"MaxDeliveryCount": 5, "RequiresSession": true`, 1))
	cmds, warns = sessions.Reconcile(s, false)
	if len(cmds) != 0 || len(warns) != 1 || !strings.Contains(warns[0], "RequiresSession") {
		t.Fatalf("fixed property: %s, warnings %v", describeCmds(cmds), warns)
	}
}
