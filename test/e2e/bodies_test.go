package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// spillBody is message i's 1 KiB body: its number, then filler that differs per message.
func spillBody(i int) []byte {
	b := []byte(fmt.Sprintf("%08d|", i))
	return append(b, bytes.Repeat([]byte{byte('a' + i%26)}, 1024-len(b))...)
}

// A node with a 1 MiB memory budget and a 4 MiB disk budget for bodies, driven through
// the SDK: a backlog past the memory budget goes to disk and comes back intact, also after
// a restart; with both budgets full a send fails with the quota condition and a message
// that names the budgets (the condition S-SEND-6 gives a full queue), and once the
// backlog is received sends are accepted again.
func TestBodiesPastMemoryBudget(t *testing.T) {
	n := harness.Start(t, "--body-memory-budget-mb", "1", "--body-disk-budget-mb", "4")
	e := &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}
	q := e.queue(t, "spill", &admin.QueueProperties{EnablePartitioning: to.Ptr(false)})

	// Fill until the node refuses: 1 + 4 MiB of ~1.1 KiB stored messages.
	s := e.sender(t, q)
	sent := 0
	var refusal error
	for sent < 20_000 && refusal == nil {
		b, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := sent; i < sent+100; i++ {
			if err := b.AddMessage(&azservicebus.Message{Body: spillBody(i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if refusal = s.SendMessageBatch(testCtx(t), b, nil); refusal == nil {
			sent += 100
		}
	}
	var ae *amqp.Error
	if !errors.As(refusal, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded ||
		!strings.Contains(ae.Description, "message storage is full") || !strings.Contains(ae.Description, "TrackingId") {
		t.Fatalf("after %d messages: %v; want %s naming full message storage, with a TrackingId", sent, refusal, amqp.ErrCondResourceLimitExceeded)
	}
	if sent < 3500 || sent > 5000 {
		t.Fatalf("refused after %d messages of 1 KiB, want about 4 600 (1 MiB in memory, 4 MiB on disk)", sent)
	}
	m := bodyMetrics(t, n)
	if m["quorumbus_bodies_disk_bytes"] < 3<<20 || m["quorumbus_bodies_memory_bytes"] > 1<<20+200<<10 || m["quorumbus_bodies_refused_sends_total"] < 1 {
		t.Fatalf("metrics %v: want over 3 MiB on disk, about 1 MiB in memory, a refused send", m)
	}

	// The backlog survives a restart (rebuilt from the Raft log and snapshots, bodies
	// spilled again) and comes back in order with every body intact.
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	n.Restart()
	e = &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}
	r := e.receiver(t, q, nil)
	for got := 0; got < sent; {
		msgs, err := r.ReceiveMessages(testCtx(t), min(500, sent-got), waitForAll(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range msgs {
			if !bytes.Equal(msg.Body, spillBody(got)) {
				t.Fatalf("message %d: body %.20q..., want message %d's", got, msg.Body, got)
			}
			if err := r.CompleteMessage(testCtx(t), msg, nil); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
	if m := bodyMetrics(t, n); m["quorumbus_bodies_read_total"] < float64(sent)*3/4 {
		t.Fatalf("metrics %v: want most of the %d deliveries read from disk", m, sent)
	}

	// Room again: the node accepts sends once the completed bodies' files are released.
	s = e.sender(t, q)
	testutil.WaitFor(t, 60*time.Second, func() error {
		return s.SendMessage(testCtx(t), &azservicebus.Message{Body: spillBody(0)}, nil)
	})
}

// scrape returns the node's /metrics page.
func scrape(t *testing.T, n *harness.Node) []byte {
	t.Helper()
	resp, err := http.Get("http://" + n.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return b
}

var bodyMetricRE = regexp.MustCompile(`(?m)^(quorumbus_bodies_[a-z_]+) (\S+)$`)

// bodyMetrics returns the node's quorumbus_bodies_* series from /metrics.
func bodyMetrics(t *testing.T, n *harness.Node) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range bodyMetricRE.FindAllSubmatch(scrape(t, n), -1) {
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			t.Fatal(err)
		}
		out[string(m[1])] = v
	}
	if len(out) == 0 {
		t.Fatalf("/metrics has no quorumbus_bodies_ series")
	}
	return out
}
