package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// PUT /$config brings the namespace to a Config.json: creations and updates, deletions
// only with ?prune=true, nothing when it already matches; the SDK sees the result.
func TestApplyConfig(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.ac.CreateQueue(ctx, "stray", nil); err != nil {
		t.Fatal(err)
	}
	file := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
	  "Queues": [{"Name": "jobs", "Properties": {"MaxDeliveryCount": 4}}],
	  "Topics": [{"Name": "events", "Subscriptions": [{"Name": "eu"}]}]}]}}`
	code, body := e.rawDo(t, http.MethodPut, "/$config", file)
	if code != 200 || !strings.Contains(body, `"create queue jobs"`) || !strings.Contains(body, `"create subscription events/Subscriptions/eu"`) {
		t.Fatalf("first apply: %d %s", code, body)
	}
	if q, err := e.ac.GetQueue(ctx, "jobs", nil); err != nil || q == nil || *q.MaxDeliveryCount != 4 {
		t.Fatalf("jobs: %+v %v", q, err)
	}
	if code, body = e.rawDo(t, http.MethodPut, "/$config", file); code != 200 || !strings.Contains(body, `"applied":[]`) {
		t.Fatalf("second apply of the same file: %d %s", code, body)
	}
	edited := strings.Replace(file, `"MaxDeliveryCount": 4`, `"MaxDeliveryCount": 7`, 1)
	if code, body = e.rawDo(t, http.MethodPut, "/$config", edited); code != 200 || body != `{"applied":["update queue jobs"],"warnings":[]}` {
		t.Fatalf("edited: %d %s", code, body)
	}
	if q, _ := e.ac.GetQueue(ctx, "jobs", nil); q == nil || *q.MaxDeliveryCount != 7 {
		t.Fatalf("jobs after the edit: %+v", q)
	}
	if q, _ := e.ac.GetQueue(ctx, "stray", nil); q == nil {
		t.Fatal("stray deleted without prune")
	}
	if code, body = e.rawDo(t, http.MethodPut, "/$config?prune=true", edited); code != 200 || body != `{"applied":["delete queue stray"],"warnings":[]}` {
		t.Fatalf("prune: %d %s", code, body)
	}
	if q, _ := e.ac.GetQueue(ctx, "stray", nil); q != nil {
		t.Fatal("stray still there after prune")
	}
	if code, body = e.rawDo(t, http.MethodPut, "/$config", `{"UserConfig": {"Namespaces": [{"Name": "x", "Queues": [{"Name": "q", "Properties": {"LockDuration": "PT1S"}}]}]}}`); code != 400 || !strings.Contains(body, "LockDuration") {
		t.Fatalf("a bad file: %d %s", code, body)
	}
	if code, _ = e.rawDo(t, http.MethodPost, "/$config", file); code != 405 {
		t.Fatalf("POST: %d", code)
	}
}
