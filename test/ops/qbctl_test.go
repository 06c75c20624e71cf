package ops

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

func qbctl(t *testing.T, n *harness.Node, args ...string) string {
	t.Helper()
	out, err := n.Qbctl(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func qbctlJSON(t *testing.T, n *harness.Node, v any, args ...string) {
	t.Helper()
	out := qbctl(t, n, append([]string{"--output", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("qbctl %v: %v\n%s", args, err, out)
	}
}

// qbctl against a running node: status, entity and rule management, peek, and
// dead-letter inspect / resubmit of 1000 messages / purge.
func TestQbctl(t *testing.T) {
	n := harness.Start(t)

	status := qbctl(t, n, "status")
	for _, want := range []string{"healthz", "readyz", "namespace", "quorumbus"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}

	// Queues: create with properties, show, update, list, delete.
	qbctl(t, n, "queue", "create", "jobs", "--lock-duration", "30s", "--max-delivery-count", "3",
		"--default-ttl", "2s", "--dead-letter-on-expiration", "true")
	var q map[string]any
	qbctlJSON(t, n, &q, "queue", "show", "jobs")
	if q["LockDuration"] != "PT30S" || q["MaxDeliveryCount"] != float64(3) || q["DeadLetteringOnMessageExpiration"] != true {
		t.Fatalf("queue show: %v", q)
	}
	qbctl(t, n, "queue", "create", "scratch")
	var list []map[string]any
	qbctlJSON(t, n, &list, "queue", "list")
	if len(list) != 2 || list[0]["Name"] != "jobs" || list[1]["Name"] != "scratch" {
		t.Fatalf("queue list: %v", list)
	}
	qbctl(t, n, "queue", "delete", "scratch")
	qbctlJSON(t, n, &list, "queue", "list")
	if len(list) != 1 {
		t.Fatalf("queue list after delete: %v", list)
	}

	// Topics, subscriptions and rules.
	qbctl(t, n, "topic", "create", "events")
	qbctl(t, n, "subscription", "create", "events", "eu", "--max-delivery-count", "4")
	qbctl(t, n, "rule", "create", "events", "eu", "region", "--sql", "region = 'eu'", "--action", "SET routed = true")
	qbctl(t, n, "rule", "create", "events", "eu", "vip", "--correlation-id", "vip", "--property", "tier=1")
	qbctl(t, n, "rule", "delete", "events", "eu", "$Default")
	var rules []struct {
		Name   string
		Filter map[string]any
		Action map[string]any
	}
	qbctlJSON(t, n, &rules, "rule", "list", "events", "eu")
	if len(rules) != 2 || rules[0].Filter["Type"] != "SqlFilter" || rules[0].Filter["Expression"] != "region = 'eu'" ||
		rules[0].Action["Expression"] != "SET routed = true" || rules[1].Filter["Type"] != "CorrelationFilter" ||
		rules[1].Filter["CorrelationID"] != "vip" || rules[1].Filter["ApplicationProperties"].(map[string]any)["tier"] != float64(1) {
		t.Fatalf("rule list: %+v", rules)
	}
	var subs []map[string]any
	qbctlJSON(t, n, &subs, "subscription", "list", "events")
	if len(subs) != 1 || subs[0]["Name"] != "eu" {
		t.Fatalf("subscription list: %v", subs)
	}

	// 1000 messages expire into the dead-letter queue (entity TTL 2s, S-TTL-4).
	c := n.Client(t)
	const total = 1000
	sendN(t, c, "jobs", total, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(fmt.Sprintf("job-%d", i)), MessageID: to.Ptr(fmt.Sprint(i))}
	})
	ctx := ctxT(t, 120*time.Second)
	ac := n.AdminClient(t)
	testutil.WaitFor(t, 60*time.Second, func() error { // the TTLs pass
		rt, err := ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
		if err != nil {
			t.Fatal(err)
		}
		if rt.DeadLetterMessageCount != total || rt.ActiveMessageCount != 0 {
			return fmt.Errorf("messages not all expired to the DLQ: active %d dead-letter %d", rt.ActiveMessageCount, rt.DeadLetterMessageCount)
		}
		return nil
	})
	var dl []map[string]any
	qbctlJSON(t, n, &dl, "dlq", "inspect", "jobs", "--count", "5")
	if len(dl) != 5 || dl[0]["DeadLetterReason"] != "TTLExpiredException" {
		t.Fatalf("dlq inspect: %v", dl)
	}
	var peeked []map[string]any
	qbctlJSON(t, n, &peeked, "peek", "jobs")
	if len(peeked) != 0 {
		t.Fatalf("peek of an expired queue: %v", peeked)
	}

	// Resubmit all 1000 after raising the TTL so they stay.
	qbctl(t, n, "queue", "update", "jobs", "--default-ttl", "1h")
	out := qbctl(t, n, "dlq", "resubmit", "jobs")
	if !strings.Contains(out, fmt.Sprintf("resubmitted %d message(s)", total)) {
		t.Fatalf("resubmit said: %s", out)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.ActiveMessageCount != total || rt.DeadLetterMessageCount != 0 {
		t.Fatalf("after resubmit: active %d dead-letter %d", rt.ActiveMessageCount, rt.DeadLetterMessageCount)
	}
	qbctlJSON(t, n, &peeked, "peek", "jobs", "--count", "3")
	if len(peeked) != 3 || !strings.HasPrefix(peeked[0]["Body"].(string), "job-") {
		t.Fatalf("peek after resubmit: %v", peeked)
	}
	// The resubmitted copies carry no dead-letter properties.
	r, err := c.NewReceiverForQueue("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.PeekMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 || got[0].DeadLetterReason != nil {
		t.Fatalf("resubmitted copy: %v %v", got, err)
	}

	// Purge: dead-letter 10 by hand, then purge them.
	msgs, err := r.ReceiveMessages(ctx, 10, nil)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("receive: %v", err)
	}
	for _, m := range msgs {
		if err := r.DeadLetterMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	out = qbctl(t, n, "dlq", "purge", "jobs")
	if !strings.Contains(out, fmt.Sprintf("purged %d message(s)", len(msgs))) {
		t.Fatalf("purge said: %s", out)
	}
	rt, err = ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
	if err != nil || rt.DeadLetterMessageCount != 0 || rt.ActiveMessageCount != int32(total-len(msgs)) {
		t.Fatalf("after purge: %+v %v", rt, err)
	}
}

// Runtime counts through the admin API after sends, schedules and dead-letters.
func TestRuntimeCounts(t *testing.T) {
	n := harness.Start(t)
	ctx := ctxT(t, 60*time.Second)
	ac := n.AdminClient(t)
	if _, err := ac.CreateQueue(ctx, "counts", nil); err != nil {
		t.Fatal(err)
	}
	c := n.Client(t)
	sendN(t, c, "counts", 7, func(i int) *azservicebus.Message { return &azservicebus.Message{Body: []byte("x")} })
	s, err := c.NewSender("counts", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}, {Body: []byte("later")}},
		time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("counts", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := r.DeadLetterMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, "counts", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := int32(7 - len(msgs))
	if rt.ActiveMessageCount != want || rt.ScheduledMessageCount != 2 || rt.DeadLetterMessageCount != int32(len(msgs)) ||
		rt.TotalMessageCount != 9 || rt.SizeInBytes <= 0 {
		t.Fatalf("runtime: active %d (want %d) scheduled %d dead-letter %d total %d size %d", rt.ActiveMessageCount, want,
			rt.ScheduledMessageCount, rt.DeadLetterMessageCount, rt.TotalMessageCount, rt.SizeInBytes)
	}
}

// qbctl send and receive: the smoke test the Helm chart's test pod runs with nothing but
// the image's binaries (create on first send, --expect skips older messages).
func TestQbctlSendReceive(t *testing.T) {
	n := harness.Start(t)
	qbctl(t, n, "send", "smoke", "--create", "--body", "old")
	qbctl(t, n, "send", "smoke", "--create", "--body", "run-2", "--message-id", "m2")
	out := qbctl(t, n, "receive", "smoke", "--expect", "run-2", "--timeout", "30s")
	if !strings.Contains(out, "old") || !strings.Contains(out, "run-2") || !strings.Contains(out, "m2") {
		t.Fatalf("receive --expect:\n%s", out)
	}
	if out, err := n.Qbctl(t, "receive", "smoke", "--expect", "run-3", "--timeout", "2s"); err == nil ||
		!strings.Contains(err.Error(), `no message with body "run-3"`) {
		t.Fatalf("receive of a body never sent: %v\n%s", err, out)
	}
	if _, err := n.Qbctl(t, "send", "missing", "--body", "x"); err == nil {
		t.Fatal("send to a queue that does not exist, without --create, succeeded")
	}

	// node drain --self drains the node at --admin-addr, whatever its ID.
	var st map[string]any
	qbctlJSON(t, n, &st, "node", "drain", "--self")
	if st["OK"] != true || st["Node"] == "" {
		t.Fatalf("node drain --self: %v", st)
	}
	if _, err := n.Qbctl(t, "node", "drain", "--self", "other"); err == nil {
		t.Fatal("node drain --self with a node ID accepted")
	}
}

// qbctl key creates namespace keys with fewer rights; their connection strings work for
// what they allow and are refused, with Service Bus's words, for the rest.
func TestQbctlKeys(t *testing.T) {
	n := harness.Start(t)
	qbctl(t, n, "queue", "create", "jobs")
	var created map[string]any
	qbctlJSON(t, n, &created, "key", "create", "sender", "--rights", "Send")
	cs, _ := created["ConnectionString"].(string)
	if !strings.Contains(cs, "SharedAccessKeyName=sender;") || !strings.Contains(cs, "UseDevelopmentEmulator=true") {
		t.Fatalf("created: %v", created)
	}
	if out := qbctl(t, n, "key", "list"); !strings.Contains(out, "sender") || !strings.Contains(out, "RootManageSharedAccessKey") {
		t.Fatalf("list:\n%s", out)
	}
	c, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctxT(t, 10*time.Second))
	s, err := c.NewSender("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctxT(t, 20*time.Second), &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatalf("send with a Send key: %v", err)
	}
	r, err := c.NewReceiverForQueue("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ReceiveMessages(ctxT(t, 20*time.Second), 1, nil)
	if err == nil || !strings.Contains(err.Error(), "'Listen' claim(s) are required") {
		t.Fatalf("receive with a Send key: %v", err)
	}
	qbctl(t, n, "key", "delete", "sender")
	if out := qbctl(t, n, "key", "list"); strings.Contains(out, "sender") {
		t.Fatalf("after delete:\n%s", out)
	}
}

// What users of the official emulator ask for: reset a queue (--reset: active, scheduled,
// deferred and dead-lettered messages), purge a subscription, and reset the whole
// namespace; entities stay. purge_test.go has the batch-delete purge without --reset.
func TestQbctlPurge(t *testing.T) {
	n := harness.Start(t)
	qbctl(t, n, "queue", "create", "jobs")
	qbctl(t, n, "queue", "create", "other")
	qbctl(t, n, "topic", "create", "events")
	qbctl(t, n, "subscription", "create", "events", "a")
	qbctl(t, n, "subscription", "create", "events", "b")
	c := n.Client(t)
	ctx := ctxT(t, 60*time.Second)
	s, err := c.NewSender("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveMessages(ctx, 2, nil)
	if err != nil || len(ms) == 0 {
		t.Fatalf("receive: %v %d", err, len(ms))
	}
	if err := r.DeadLetterMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	if len(ms) > 1 {
		if err := r.DeferMessage(ctx, ms[1], nil); err != nil {
			t.Fatal(err)
		}
	}
	if out := qbctl(t, n, "queue", "purge", "jobs", "--reset"); !strings.Contains(out, "purged 6 message(s) from jobs") {
		t.Fatalf("queue purge: %s", out)
	}
	ac := n.AdminClient(t)
	rt, err := ac.GetQueueRuntimeProperties(ctx, "jobs", nil)
	if err != nil || rt.TotalMessageCount != 0 || rt.DeadLetterMessageCount != 0 || rt.ScheduledMessageCount != 0 {
		t.Fatalf("after purge: %+v %v", rt, err)
	}
	ts, err := c.NewSender("events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.SendMessage(ctx, &azservicebus.Message{Body: []byte("e")}, nil); err != nil {
		t.Fatal(err)
	}
	if out := qbctl(t, n, "subscription", "purge", "events", "a"); !strings.Contains(out, "purged 1 message(s) from events/Subscriptions/a") {
		t.Fatalf("subscription purge: %s", out)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("again")}, nil); err != nil {
		t.Fatal(err)
	}
	if out := qbctl(t, n, "namespace", "purge"); !strings.Contains(out, "purged 2 message(s) from the namespace") {
		t.Fatalf("namespace purge: %s", out)
	}
	if q, err := ac.GetQueue(ctx, "jobs", nil); err != nil || q == nil {
		t.Fatalf("queue gone after purge: %v", err)
	}
	if _, err := n.Qbctl(t, "queue", "purge", "missing"); err == nil {
		t.Fatal("purge of a missing queue succeeded")
	}
}
