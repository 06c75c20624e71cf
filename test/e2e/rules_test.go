package e2e

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// TestRulesOverAMQP: subscription rules managed on the subscription's $management link
// (what the .NET, Java and JavaScript SDKs' ServiceBusRuleManager sends; the Go SDK has
// none, so go-amqp sends the JavaScript SDK's bodies) filter what the subscription gets,
// and the administration API sees them (S-TOP-1).
func TestRulesOverAMQP(t *testing.T) {
	e := newEnv(t)
	tp := e.topic(t, "rules-amqp", nil, "red", "other")
	sub := tp + "/Subscriptions/red"
	m := e.rawMgmt(t, sub)
	if st := m.call(t, "com.microsoft:remove-rule", map[string]any{"rule-name": "$Default"}); st != 200 {
		t.Fatalf("remove $Default: %d", st)
	}
	if st := m.call(t, "com.microsoft:add-rule", map[string]any{"rule-name": "reds",
		"rule-description": map[string]any{
			"sql-filter":      map[string]any{"expression": "color = 'red'"},
			"sql-rule-action": map[string]any{"expression": "SET seen = 'yes'"},
		}}); st != 200 {
		t.Fatalf("add-rule: %d", st)
	}
	if st := m.call(t, "com.microsoft:add-rule", map[string]any{"rule-name": "reds",
		"rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}}); st != 409 {
		t.Errorf("add-rule twice: %d, want 409", st)
	}

	r, err := e.admin.GetRule(testCtx(t), tp, "red", "reds", nil)
	if err != nil || r == nil {
		t.Fatalf("admin GetRule: %v", err)
	}
	if f, ok := r.Filter.(*admin.SQLFilter); !ok || f.Expression != "color = 'red'" {
		t.Errorf("admin sees filter %#v", r.Filter)
	}
	if a, ok := r.Action.(*admin.SQLAction); !ok || a.Expression != "SET seen = 'yes'" {
		t.Errorf("admin sees action %#v", r.Action)
	}
	pager := e.admin.NewListRulesPager(tp, "red", nil)
	var names []string
	for pager.More() {
		page, err := pager.NextPage(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, ru := range page.Rules {
			names = append(names, ru.Name)
		}
	}
	if len(names) != 1 || names[0] != "reds" {
		t.Errorf("admin lists rules %v, want [reds]", names)
	}

	s := e.sender(t, tp)
	send(t, s,
		&azservicebus.Message{Body: []byte("r1"), ApplicationProperties: map[string]any{"color": "red"}},
		&azservicebus.Message{Body: []byte("b1"), ApplicationProperties: map[string]any{"color": "blue"}},
		&azservicebus.Message{Body: []byte("r2"), ApplicationProperties: map[string]any{"color": "red"}})
	got := drain(t, e.subReceiver(t, tp, "red", nil), 2)
	if b := bodies(got); len(b) != 2 || b[0] != "r1" || b[1] != "r2" || got[0].ApplicationProperties["seen"] != "yes" {
		t.Errorf("red subscription got %v %v", b, got[0].ApplicationProperties)
	}
	if b := bodies(drain(t, e.subReceiver(t, tp, "other", nil), 3)); len(b) != 3 {
		t.Errorf("the other subscription (with $Default) got %v", b)
	}

	// Removing the rule over AMQP: nothing matches any more, and the admin API agrees.
	if st := m.call(t, "com.microsoft:remove-rule", map[string]any{"rule-name": "reds"}); st != 200 {
		t.Fatalf("remove-rule: %d", st)
	}
	if st := m.call(t, "com.microsoft:remove-rule", map[string]any{"rule-name": "reds"}); st != 404 {
		t.Errorf("remove-rule twice: %d, want 404", st)
	}
	if st := m.call(t, "com.microsoft:enumerate-rules", map[string]any{"top": int32(100), "skip": int32(0)}); st != 204 {
		t.Errorf("enumerate-rules with none: %d, want 204", st)
	}
	// The Go admin client answers a 404 with (nil, nil).
	if r, err := e.admin.GetRule(testCtx(t), tp, "red", "reds", nil); err != nil || r != nil {
		t.Errorf("admin after remove: %+v %v, want no rule", r, err)
	}
	send(t, s, &azservicebus.Message{Body: []byte("r3"), ApplicationProperties: map[string]any{"color": "red"}})
	expectNothing(t, e.subReceiver(t, tp, "red", nil), 500*time.Millisecond)
}
