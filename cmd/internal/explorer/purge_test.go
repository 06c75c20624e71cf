package explorer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cmd/internal/explorer"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// The page's "Purge all messages" (POST /$ui/api/purge) purges as the SDKs'
// purgeMessages does, with progress: the queue's active and deferred messages and then
// its dead letters go; the message an SDK receiver holds locked stays and can still be
// completed, and so does the message scheduled for later (S-DEL-3). The same on a
// subscription, which leaves the topic's other subscriptions alone.
func TestPurgeEntity(t *testing.T) {
	e := start(t)
	e.queue("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []string{"a", "b", "c", "d"} {
		e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "orders"}, Body: b}, 200, nil)
	}
	e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "orders"}, Body: "later",
		ScheduledEnqueueTime: time.Now().Add(time.Hour).Format(time.RFC3339)}, 200, nil)
	rcv, err := e.client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	locked := testutil.DeadLetterDeferLock(t, rcv, 20*time.Second)

	// 1 active and 1 deferred from the queue, 1 from its dead-letter queue; the total is
	// what it held less the scheduled message.
	lines := e.redrive("/$ui/api/purge", explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}})
	if last := lines[len(lines)-1]; last.Done != 3 || last.DeadLettered != 1 || last.Total != 4 || last.Error != "" {
		t.Fatalf("purge: %+v, want 3 done (1 dead-lettered) of 4", lines)
	}
	var p peeked
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}}, 200, &p)
	if len(p.Messages) != 2 || p.Messages[0].SequenceNumber != *locked.SequenceNumber || p.Messages[1].State != "Scheduled" {
		t.Fatalf("after purge: %+v, want the locked message (seq %d) and the scheduled one", p.Messages, *locked.SequenceNumber)
	}
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}, DeadLetter: true}, 200, &p)
	if len(p.Messages) != 0 {
		t.Fatalf("after purge the dead-letter queue holds %d", len(p.Messages))
	}
	if err := rcv.CompleteMessage(ctx, locked, nil); err != nil {
		t.Fatalf("the locked message lost its lock in the purge: %v", err)
	}

	// A subscription: its messages and dead letters go, the other subscription's stay.
	if err := e.node.Store().Apply(ctx, &meta.CreateTopic{Name: "events", Properties: meta.DefaultTopicProperties()}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if err := e.node.Store().Apply(ctx, &meta.CreateSubscription{Topic: "events", Name: s, Properties: meta.DefaultSubscriptionProperties()}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "events"}, Body: "e"}, 200, nil)
	}
	sr, err := e.client.NewReceiverForSubscription("events", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(ctx)
	if err := sr.DeadLetterMessage(ctx, testutil.ReceiveN(t, sr, 1, 20*time.Second)[0], nil); err != nil {
		t.Fatal(err)
	}
	lines = e.redrive("/$ui/api/purge", explorer.RedriveRequest{Target: explorer.Target{Entity: "events", Subscription: "a"}})
	if last := lines[len(lines)-1]; last.Done != 2 || last.DeadLettered != 1 || last.Error != "" {
		t.Fatalf("subscription purge: %+v, want 2 done (1 dead-lettered)", lines)
	}
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "events", Subscription: "b"}}, 200, &p)
	if len(p.Messages) != 2 {
		t.Fatalf("purging subscription a left %d messages in b, want 2", len(p.Messages))
	}

	// An empty queue: nothing done.
	lines = e.redrive("/$ui/api/purge", explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}})
	if last := lines[len(lines)-1]; last.Done != 0 || last.Total != 0 || last.Error != "" {
		t.Fatalf("purge of an empty queue: %+v", lines)
	}
}

// A purge of what does not exist, or with a request it does not take, is refused
// before anything is deleted, with a JSON error.
func TestPurgeEntityRefusals(t *testing.T) {
	e := start(t)
	e.queue("q")
	for _, c := range []struct {
		name string
		body any
		code int
		says string
	}{
		{"missing queue", map[string]any{"entity": "nosuch"}, 404, `there is no queue or subscription "nosuch"`},
		{"missing subscription", map[string]any{"entity": "q", "subscription": "s"}, 404, "q/Subscriptions/s"},
		{"no entity", map[string]any{}, 400, `"entity" is required`},
		{"a limit", map[string]any{"entity": "q", "limit": 1}, 400, `unknown field "limit"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := e.do(http.MethodPost, "/$ui/api/purge", e.auth(), c.body)
			b, _ := io.ReadAll(resp.Body)
			var body struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != c.code || !strings.Contains(body.Message, c.says) {
				t.Errorf("%d %s, want %d saying %q", resp.StatusCode, b, c.code, c.says)
			}
		})
	}
	if resp := e.do(http.MethodPost, "/$ui/api/purge", "", map[string]any{"entity": "q"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
}
