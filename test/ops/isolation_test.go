package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Per-test isolation by entity name prefix, against a running node: two test runs
// share the namespace, each names its entities with its own prefix, and each resets or
// removes only its own (docs/compatibility.md, "Isolating test suites").
func TestPrefixIsolation(t *testing.T) {
	n := harness.Start(t)
	ac := n.AdminClient(t)
	c := n.Client(t)
	ctx := ctxT(t, 60*time.Second)
	for _, q := range []string{"runA-orders", "runB-orders"} {
		if _, err := ac.CreateQueue(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
		s, err := c.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("m")}, nil); err != nil {
			t.Fatal(err)
		}
		s.Close(ctx)
	}
	if _, err := ac.CreateTopic(ctx, "runA-events", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "runA-events", "s", nil); err != nil {
		t.Fatal(err)
	}
	if out := qbctl(t, n, "namespace", "purge", "--prefix", "runA-"); !strings.Contains(out, "purged 1 message(s) from the entities named runA-*") {
		t.Fatalf("prefix purge: %s", out)
	}
	for q, want := range map[string]int32{"runA-orders": 0, "runB-orders": 1} {
		rt, err := ac.GetQueueRuntimeProperties(ctx, q, nil)
		if err != nil || rt.ActiveMessageCount != want {
			t.Fatalf("%s after purging runA-: %+v %v, want %d active", q, rt, err, want)
		}
	}
	var res struct {
		Prefix  string   `json:"Prefix"`
		Deleted []string `json:"Deleted"`
	}
	qbctlJSON(t, n, &res, "namespace", "delete-entities", "--prefix", "runa-")
	if strings.Join(res.Deleted, ",") != "runA-orders,runA-events" {
		t.Fatalf("deleted %v", res.Deleted)
	}
	if q, err := ac.GetQueue(ctx, "runA-orders", nil); err != nil || q != nil {
		t.Fatalf("runA-orders still there: %v %v", q, err)
	}
	if q, err := ac.GetQueue(ctx, "runB-orders", nil); err != nil || q == nil {
		t.Fatalf("runB-orders gone: %v", err)
	}
	if _, err := n.Qbctl(t, "namespace", "delete-entities"); err == nil {
		t.Fatal("delete-entities without --prefix succeeded")
	}
}
