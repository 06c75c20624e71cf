package ops

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func sendN(t *testing.T, c *azservicebus.Client, entity string, n int, mk func(i int) *azservicebus.Message) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	s, err := c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	batch, err := s.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	flush := func() {
		if batch.NumMessages() == 0 {
			return
		}
		if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
			t.Fatal(err)
		}
		batch, _ = s.NewMessageBatch(ctx, nil)
	}
	for i := 0; i < n; i++ {
		m := mk(i)
		if err := batch.AddMessage(m, nil); err != nil {
			flush()
			if err := batch.AddMessage(m, nil); err != nil {
				t.Fatal(err)
			}
		}
		if batch.NumMessages() == 100 {
			flush()
		}
	}
	flush()
}

// The emulator's Config.json (every field of its schema, comments, an unknown
// field) loads unchanged at start-up and the entities it declares exist with those
// properties.
func TestConfigJSONLoadsAtStartup(t *testing.T) {
	n := harness.Start(t, "--config-json", repoFile(t, "cluster/meta/testdata/Config.json"))
	ctx := ctxT(t, 60*time.Second)
	ac := n.AdminClient(t)
	q, err := ac.GetQueue(ctx, "orders", nil)
	if err != nil || q == nil {
		t.Fatalf("queue orders: %v %v", q, err)
	}
	if *q.LockDuration != "PT45S" || *q.MaxDeliveryCount != 7 || !*q.RequiresSession ||
		!*q.RequiresDuplicateDetection || !*q.DeadLetteringOnMessageExpiration || *q.DefaultMessageTimeToLive != "PT1H" {
		t.Errorf("orders properties: lock %v mdc %v session %v dup %v dlqexp %v ttl %v", *q.LockDuration,
			*q.MaxDeliveryCount, *q.RequiresSession, *q.RequiresDuplicateDetection,
			*q.DeadLetteringOnMessageExpiration, *q.DefaultMessageTimeToLive)
	}
	sub, err := ac.GetSubscription(ctx, "audit/events", "all", nil)
	if err != nil || sub == nil {
		t.Fatalf("subscription all: %v %v", sub, err)
	}
	if *sub.MaxDeliveryCount != 5 || *sub.LockDuration != "PT2M" || !*sub.RequiresSession {
		t.Errorf("subscription all: mdc %v lock %v session %v", *sub.MaxDeliveryCount, *sub.LockDuration, *sub.RequiresSession)
	}
	r, err := ac.GetRule(ctx, "audit/events", "sql", "sql-filter-1", nil)
	if err != nil || r == nil {
		t.Fatalf("rule sql-filter-1: %v %v", r, err)
	}
	if f, ok := r.Filter.(*admin.SQLFilter); !ok || f.Expression != "sys.MessageId = '123456' AND userProp1 = 'value1'" {
		t.Errorf("rule filter = %#v", r.Filter)
	}
	// The declared entities are usable at once.
	sendN(t, n.Client(t), "minimal", 3, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(fmt.Sprint(i))}
	})
	rt, err := ac.GetQueueRuntimeProperties(ctx, "minimal", nil)
	if err != nil || rt.ActiveMessageCount != 3 {
		t.Fatalf("minimal active count = %v, %v; want 3", rt, err)
	}
}

// A Config.json with an invalid value fails start-up with a message naming the
// field.
func TestConfigJSONInvalidValueFailsStartup(t *testing.T) {
	out, err := harness.RunToExit(t, "--config-json", repoFile(t, "test/ops/testdata/bad-lock-duration.json"))
	if err == nil {
		t.Fatalf("quorumbus started with an invalid Config.json:\n%s", out)
	}
	if !strings.Contains(out, "Queues[0].Properties.LockDuration") {
		t.Fatalf("error does not name the field:\n%s", out)
	}
}

// S-DUR-1: entities, keys, messages, a deferred message, dead-lettered messages
// and session state survive kill -9 of the node; the same connection string still works.
func TestRestartAfterKill9KeepsEverything(t *testing.T) {
	n := harness.Start(t)
	ctx := ctxT(t, 120*time.Second)
	ac := n.AdminClient(t)
	if _, err := ac.CreateQueue(ctx, "work", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "sessions", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: to.Ptr(true)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateTopic(ctx, "news", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "news", "all", nil); err != nil {
		t.Fatal(err)
	}
	c := n.Client(t)
	const total = 500
	sendN(t, c, "work", total, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(fmt.Sprint(i)), ApplicationProperties: map[string]any{"i": int64(i)}}
	})
	sendN(t, c, "news", 10, func(i int) *azservicebus.Message { return &azservicebus.Message{Body: []byte("n")} })
	// Dead-letter 2 and defer 1 of the first 3 messages.
	r, err := c.NewReceiverForQueue("work", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 3, nil)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("receive: %d %v", len(msgs), err)
	}
	for _, m := range msgs[:2] {
		if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad"), ErrorDescription: to.Ptr("kept")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DeferMessage(ctx, msgs[2], nil); err != nil {
		t.Fatal(err)
	}
	deferredSeq := *msgs[2].SequenceNumber
	sendN(t, c, "sessions", 1, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte("s"), SessionID: to.Ptr("s1")}
	})
	sr, err := c.AcceptSessionForQueue(ctx, "sessions", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("checkpoint-7"), nil); err != nil {
		t.Fatal(err)
	}
	sr.Close(ctx)

	n.Kill()
	n.Restart()

	ctx = ctxT(t, 120*time.Second)
	ac = n.AdminClient(t)
	for _, q := range []string{"work", "sessions"} {
		if got, err := ac.GetQueue(ctx, q, nil); err != nil || got == nil {
			t.Fatalf("queue %s after restart: %v %v", q, got, err)
		}
	}
	if got, err := ac.GetSubscription(ctx, "news", "all", nil); err != nil || got == nil {
		t.Fatalf("subscription after restart: %v %v", got, err)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.ActiveMessageCount != total-3 || rt.DeadLetterMessageCount != 2 {
		t.Errorf("work after restart: active %d dead-letter %d, want %d and 2", rt.ActiveMessageCount, rt.DeadLetterMessageCount, total-3)
	}
	c = n.Client(t)
	r, err = c.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for len(seen) < total-3 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			i := m.ApplicationProperties["i"].(int64)
			if seen[i] {
				t.Fatalf("message %d delivered twice", i)
			}
			seen[i] = true
		}
	}
	if len(seen) != total-3 {
		t.Fatalf("received %d of %d messages after restart", len(seen), total-3)
	}
	peekR, err := c.NewReceiverForQueue("work", nil)
	if err != nil {
		t.Fatal(err)
	}
	def, err := peekR.ReceiveDeferredMessages(ctx, []int64{deferredSeq}, nil)
	if err != nil || len(def) != 1 {
		t.Fatalf("deferred message after restart: %d %v", len(def), err)
	}
	dlq, err := c.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := dlq.PeekMessages(ctx, 10, nil)
	if err != nil || len(dl) != 2 || dl[0].DeadLetterReason == nil || *dl[0].DeadLetterReason != "bad" {
		t.Fatalf("dead-letter queue after restart: %d %v", len(dl), err)
	}
	sr, err = c.AcceptSessionForQueue(ctx, "sessions", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	state, err := sr.GetSessionState(ctx, nil)
	if err != nil || string(state) != "checkpoint-7" {
		t.Fatalf("session state after restart = %q, %v", state, err)
	}
}

// SIGTERM stops the node gracefully, and a restart keeps every entity and
// message (with no snapshot forced: the log replays).
func TestGracefulStopAndRestart(t *testing.T) {
	n := harness.Start(t)
	ctx := ctxT(t, 60*time.Second)
	if _, err := n.AdminClient(t).CreateQueue(ctx, "keep", nil); err != nil {
		t.Fatal(err)
	}
	sendN(t, n.Client(t), "keep", 50, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(fmt.Sprint(i))}
	})
	if err := n.Stop(); err != nil {
		t.Errorf("SIGTERM: the node exited with %v, want a clean exit:\n%s", err, n.Log())
	}
	n.Restart()
	rt, err := n.AdminClient(t).GetQueueRuntimeProperties(ctx, "keep", nil)
	if err != nil || rt == nil || rt.ActiveMessageCount != 50 {
		t.Fatalf("after a graceful restart: %+v %v", rt, err)
	}
}

// Deleting an entity removes its partition groups and their data; an entity
// created again under the same name starts empty.
func TestDeleteRemovesPartitionData(t *testing.T) {
	n := harness.Start(t)
	ctx := ctxT(t, 60*time.Second)
	ac := n.AdminClient(t)
	if _, err := ac.CreateQueue(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	sendN(t, n.Client(t), "gone", 5, func(i int) *azservicebus.Message { return &azservicebus.Message{Body: []byte("x")} })
	dir := filepath.Join(n.Dir, "partitions", "gone")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("partition directory: %v", err)
	}
	if _, err := ac.DeleteQueue(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error { // the reconciler removes the directory
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return fmt.Errorf("%s still exists after the delete (stat: %v)", dir, err)
		}
		return nil
	})
	if q, err := ac.GetQueue(ctx, "gone", nil); err != nil || q != nil {
		t.Fatalf("GetQueue after delete = %v, %v; want nil, nil", q, err)
	}
	if _, err := ac.CreateQueue(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, "gone", nil)
	if err != nil || rt.ActiveMessageCount != 0 {
		t.Fatalf("re-created queue: %+v %v; want empty", rt, err)
	}
}

// What users of the official emulator ask for: Config.json given inline (the value of
// --config-json / QUORUMBUS_CONFIG_JSON is the JSON itself), its namespace name served,
// and a log line saying what was loaded.
func TestConfigJSONInlineNamespaceAndLogLine(t *testing.T) {
	b, err := os.ReadFile(repoFile(t, "cluster/meta/testdata/Config.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := harness.Start(t, "--config-json", string(b), "--log-level", "info")
	ctx := ctxT(t, 60*time.Second)
	ns, err := n.AdminClient(t).GetNamespaceProperties(ctx, nil)
	if err != nil || ns.Name != "sbemulatorns" {
		t.Fatalf("namespace: %+v %v", ns, err)
	}
	if q, err := n.AdminClient(t).GetQueue(ctx, "orders", nil); err != nil || q == nil {
		t.Fatalf("queue orders: %v %v", q, err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if log := n.Log(); !strings.Contains(log, "Config.json loaded") || !strings.Contains(log, "namespace=sbemulatorns") {
		t.Fatalf("no load line in the log:\n%s", log)
	}
}
