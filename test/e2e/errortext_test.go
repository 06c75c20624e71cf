package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// internalPrefix is how the broker's packages begin their error texts ("rule: ",
// "fsm: "): fine in a log line, noise in what a client is told.
var internalPrefix = regexp.MustCompile(`\b(meta|metagroup|cluster|partition|fsm|rule|admin|placement|transport|wire|sas): `)

// TestErrorTextsHaveNoInternalPrefixes: what a client reads in an AMQP error (a
// $management response's statusDescription, a refused send's description) says what
// is wrong without the broker's package prefixes; a rule with a SQL error was answered
// "Filter.SqlExpression: rule: SQL syntax error ...".
func TestErrorTextsHaveNoInternalPrefixes(t *testing.T) {
	e := newEnv(t)
	tp := e.topic(t, "errtext", nil, "s")
	m := e.rawMgmt(t, tp+"/Subscriptions/s")
	st, desc := m.callDesc(t, "com.microsoft:add-rule", map[string]any{"rule-name": "bad",
		"rule-description": map[string]any{"sql-filter": map[string]any{"expression": "a = = 1"}}})
	if st != 400 || !strings.Contains(desc, "SQL syntax error at position 5") {
		t.Fatalf("add-rule with a SQL syntax error: %d %q", st, desc)
	}
	if p := internalPrefix.FindString(desc); p != "" {
		t.Errorf("add-rule's description shows the internal prefix %q: %s", p, desc)
	}

	q := e.queue(t, "errtext", &admin.QueueProperties{Status: to.Ptr(admin.EntityStatusSendDisabled)})
	err := e.isolated(t).sender(t, q).SendMessage(testCtx(t), &azservicebus.Message{Body: []byte("x")}, nil)
	if err == nil {
		t.Fatal("a send to a SendDisabled queue went through")
	}
	if p := internalPrefix.FindString(err.Error()); p != "" {
		t.Errorf("a refused send shows the internal prefix %q: %v", p, err)
	}
}
