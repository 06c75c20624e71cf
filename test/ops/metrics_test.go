package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

func scrape(t *testing.T, n *harness.Node) harness.Metrics {
	t.Helper()
	m, err := harness.ScrapeMetrics(n.Admin, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMetricsAfterKnownWorkload: a real node, a known
// workload through the official SDK (send 10; receive 6, complete 3, dead-letter 2,
// abandon 1; leave the rest), then /metrics shows exactly those counts and counters for
// the queue, the node's AMQP connection and the error a refused receive caused, and the
// health endpoints answer in the shapes operators and the emulator's users expect.
func TestMetricsAfterKnownWorkload(t *testing.T) {
	n := harness.Start(t, "--pprof")
	ctx := ctxT(t, 90*time.Second)
	ac := n.AdminClient(t)
	const q = "metered"
	if _, err := ac.CreateQueue(ctx, q, nil); err != nil {
		t.Fatal(err)
	}
	c := n.Client(t)
	const sent, completed, deadLettered, abandoned = 10, 3, 2, 1
	sendN(t, c, q, sent, func(i int) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(fmt.Sprintf("m%02d", i))}
	})
	r, err := c.NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var got []*azservicebus.ReceivedMessage
	for len(got) < completed+deadLettered+abandoned {
		ms, err := r.ReceiveMessages(ctx, completed+deadLettered+abandoned-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	for i, m := range got {
		switch {
		case i < completed:
			err = r.CompleteMessage(ctx, m, nil)
		case i < completed+deadLettered:
			err = r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: toPtr("metrics-test")})
		default:
			err = r.AbandonMessage(ctx, m, nil)
		}
		if err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	// A refused receive: the entity does not exist (amqp:not-found).
	bad, err := c.NewReceiverForQueue("no-such-queue", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.ReceiveMessages(ctx, 1, nil); err == nil {
		t.Fatal("receive from a missing queue succeeded")
	}
	_ = bad.Close(ctx)

	want := []struct {
		name string
		want float64
	}{
		{"quorumbus_entity_active_messages", sent - completed - deadLettered},
		{"quorumbus_entity_dead_letter_messages", deadLettered},
		{"quorumbus_entity_scheduled_messages", 0},
		{"quorumbus_entity_deferred_messages", 0},
		{"quorumbus_entity_incoming_messages_total", sent},
		{"quorumbus_entity_outgoing_messages_total", completed + deadLettered + abandoned},
		{"quorumbus_entity_completed_messages_total", completed},
		{"quorumbus_entity_abandoned_messages_total", abandoned},
		{"quorumbus_entity_dead_lettered_messages_total", deadLettered},
		{"quorumbus_entity_expired_messages_total", 0},
	}
	// The SDK may return from a settlement before the broker applied it (a disposition
	// it sends settled), so the counts are awaited rather than read once.
	testutil.WaitFor(t, 20*time.Second, func() error {
		mfs := scrape(t, n)
		var errs []error
		for _, w := range want {
			if v, err := mfs.Sum(w.name, "entity", q); err != nil || v != w.want {
				errs = append(errs, fmt.Errorf("%s{entity=%q} = %v (%v), want %v", w.name, q, v, err, w.want))
			}
		}
		return errors.Join(errs...)
	})
	mfs := scrape(t, n)
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"quorumbus_entity_size_bytes", []string{"entity", q}, 1},
		{"quorumbus_entity_oldest_message_age_seconds", []string{"entity", q}, 0},
		{"quorumbus_partition_is_leader", []string{"entity", q}, 1},
		{"quorumbus_partition_proposals_total", []string{"entity", q}, 1},
		{"quorumbus_partition_applied_index", []string{"entity", q}, 1},
		{"quorumbus_partition_batch_commands_count", nil, 1},
		{"quorumbus_amqp_connections", nil, 1},
		{"quorumbus_amqp_links", []string{"role", "receiver"}, 1},
		{"quorumbus_amqp_errors_total", []string{"condition", "amqp:not-found"}, 1},
		{"quorumbus_cluster_members", []string{"state", "alive"}, 1},
		{"quorumbus_node_ready", nil, 1},
		{"go_goroutines", nil, 1},
		{"quorumbus_process_resident_memory_bytes", nil, 1},
	} {
		v, err := mfs.Sum(strings.TrimSuffix(c.name, "_count"), c.labels...)
		if err != nil || v < c.min {
			t.Errorf("%s%v = %v (%v), want at least %v", c.name, c.labels, v, err, c.min)
		}
	}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "quorumbus_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("series %s is outside the quorumbus_ namespace", name)
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if l := lp.GetName(); l == "lock_token" || l == "message_id" || l == "sequence_number" {
					t.Errorf("%s has a per-message label %s", name, l)
				}
			}
		}
	}

	// Health: process alive, ready, the emulator's /health shape, and pprof (--pprof).
	for _, h := range []struct {
		path, body string
	}{
		{"/healthz", `"status":"healthy"`},
		{"/readyz", `"status":"healthy"`},
		{"/health", `{"message":"Service is healthy.","status":"healthy"}`},
		{"/debug/pprof/", "goroutine"},
	} {
		resp, err := http.Get("http://" + n.Admin + h.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), h.body) {
			t.Errorf("GET %s: %d %.200s, want 200 with %s", h.path, resp.StatusCode, b, h.body)
		}
		if h.path == "/health" {
			var body map[string]string
			if err := json.Unmarshal(b, &body); err != nil || len(body) != 2 {
				t.Errorf("/health body %s is not the emulator's two fields", b)
			}
		}
	}
}

func toPtr[T any](v T) *T { return &v }

// TestHealthJSONLogs: with --log-format json every line the node writes is one slog
// JSON object (time, level, msg), hashicorp/raft's and memberlist's included (their
// component attribute names them), so a log pipeline can parse all of them. Its output
// is a pipe, so there is no banner for people either (docs/configuration.md).
func TestHealthJSONLogs(t *testing.T) {
	n := harness.Start(t, "--log-format", "json", "--log-level", "debug")
	ctx := ctxT(t, 60*time.Second)
	if _, err := n.AdminClient(t).CreateQueue(ctx, "logged", nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	raft, own := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(n.Log()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("not a JSON object: %q", line)
			continue
		}
		if obj["time"] == nil || obj["level"] == nil || obj["msg"] == nil {
			t.Errorf("not a slog line (time, level, msg): %q", line)
			continue
		}
		if c, _ := obj["component"].(string); strings.HasPrefix(c, "raft.") {
			raft++
		} else {
			own++
		}
	}
	if raft == 0 || own == 0 {
		t.Errorf("%d raft and %d node JSON lines at debug level, want some of each:\n%s", raft, own, n.Log())
	}
}
