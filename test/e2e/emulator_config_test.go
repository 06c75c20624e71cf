package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// The official emulator's Config.json (testdata/emulator-Config.json, unchanged, with its
// comments) creates its entities and rules at start-up, and they behave as configured:
// S-ENT-2 (properties), S-TOP-1 (correlation and SQL filters), S-LOCK-5 (MaxDeliveryCount 3).
func TestEmulatorConfigJSON(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("testdata", "emulator-Config.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := harness.Start(t, "--config-json", path)
	e := &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}

	t.Run("QueueProperties", func(t *testing.T) {
		q, err := e.admin.GetQueue(testCtx(t), "queue.1", nil)
		if err != nil || q == nil {
			t.Fatalf("queue.1: %v, %v", q, err)
		}
		if deref(q.MaxDeliveryCount) != int32(3) || deref(q.DefaultMessageTimeToLive) != "PT1H" || deref(q.LockDuration) != "PT1M" {
			t.Errorf("queue.1: MaxDeliveryCount %v TTL %v LockDuration %v", deref(q.MaxDeliveryCount), deref(q.DefaultMessageTimeToLive), deref(q.LockDuration))
		}
		send(t, e.sender(t, "queue.1"), body("x"))
		r := e.receiver(t, "queue.1", nil)
		for range 3 {
			m := receiveOne(t, r, 10*time.Second)
			if m.ExpiresAt.Sub(*m.EnqueuedTime) != time.Hour {
				t.Errorf("effective TTL %v, want 1h", m.ExpiresAt.Sub(*m.EnqueuedTime))
			}
			if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
		d := receiveOne(t, e.dlq(t, "queue.1"), 10*time.Second)
		if deref(d.DeadLetterReason) != "MaxDeliveryCountExceeded" {
			t.Errorf("reason %v", deref(d.DeadLetterReason))
		}
	})

	t.Run("TopicRules", func(t *testing.T) {
		s := e.sender(t, "topic.1")
		send(t, s,
			&azservicebus.Message{Body: []byte("json"), ContentType: to.Ptr("application/json")},
			&azservicebus.Message{Body: []byte("prop1"), ApplicationProperties: map[string]any{"prop1": "value1"}},
			&azservicebus.Message{Body: []byte("sql"), MessageID: to.Ptr("123456"), To: to.Ptr("orig"), ApplicationProperties: map[string]any{"userProp1": "value1"}},
			&azservicebus.Message{Body: []byte("sql-wrong-id"), MessageID: to.Ptr("999"), ApplicationProperties: map[string]any{"userProp1": "value1"}},
		)
		want := map[string][]string{
			"subscription.1": {"json"},
			"subscription.2": {"prop1"},
			"subscription.3": {"json", "prop1", "sql", "sql-wrong-id"},
			"subscription.4": {"sql"},
		}
		for sub, w := range want {
			msgs := drain(t, e.subReceiver(t, "topic.1", sub, nil), len(w))
			for _, m := range msgs {
				// subscription.4's action is "SET sys.To = 'Entity'"; other copies keep To.
				if string(m.Body) == "sql" {
					if want := map[bool]string{true: "Entity", false: "orig"}[sub == "subscription.4"]; deref(m.To) != want {
						t.Errorf("%s: To = %v, want %s", sub, deref(m.To), want)
					}
				}
			}
			got := bodies(msgs)
			slices.Sort(got)
			slices.Sort(w)
			if fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("%s got %v, want %v", sub, got, w)
			}
		}
	})
}
