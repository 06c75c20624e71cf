package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

// rawDo sends a signed request and returns the status and body.
func (e *env) rawDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	query := "?api-version=2024-05"
	if p, q, ok := strings.Cut(path, "?"); ok { // a path with its own query parameters
		path, query = p, "?"+q+"&api-version=2024-05"
	}
	req, _ := http.NewRequest(method, e.srv.URL+path+query, strings.NewReader(body))
	req.Header.Set("Authorization", sign("https://127.0.0.1:5672"+path+query, rootName, rootKey))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var buf bytes.Buffer // compact, so tests match "k":v whatever the indentation
		if json.Compact(&buf, b) == nil {
			b = buf.Bytes()
		}
	}
	return resp.StatusCode, string(b)
}

// What the JavaScript SDK (@azure/service-bus 7.9.5) needs from the ATOM answers: a
// delete answers an empty body, each feed entry's <id> is the entity's own URL (the
// SDK takes names from it), and quotes are not written as &#39;/&#34;.
func TestJSCompatibleAtom(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"a", "b"} {
		if _, err := e.ac.CreateQueue(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
	}
	code, body := e.rawDo(t, http.MethodGet, "/$Resources/Queues", "")
	if code != 200 || !strings.Contains(body, "<id>https://") || !strings.Contains(body, "/a?api-version=2024-05</id>") ||
		!strings.Contains(body, "/b?api-version=2024-05</id>") {
		t.Fatalf("feed entry ids: %d %s", code, body)
	}
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("r"),
		Filter: &sbadmin.SQLFilter{Expression: `color = 'red' AND note = "x"`}}); err != nil {
		t.Fatal(err)
	}
	code, body = e.rawDo(t, http.MethodGet, "/t/Subscriptions/s/Rules", "")
	if code != 200 || !strings.Contains(body, `color = 'red' AND note = "x"`) || strings.Contains(body, "&#") ||
		!strings.Contains(body, "/t/Subscriptions/s/Rules/r?api-version=2024-05</id>") {
		t.Fatalf("rules feed: %d %s", code, body)
	}
	code, body = e.rawDo(t, http.MethodDelete, "/a", "")
	if code != 200 || body != "" {
		t.Fatalf("delete: %d %q, want 200 and an empty body", code, body)
	}
}

// Creation-only properties are refused with Service Bus's wording (SDK live tests
// TestAdminClient_UpdateQueue/_UpdateTopic/_UpdateSubscription).
func TestImmutablePropertyTexts(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	tp, err := e.ac.GetTopic(ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	tp.EnablePartitioning = to.Ptr(true)
	_, err = e.ac.UpdateTopic(ctx, "t", tp.TopicProperties, nil)
	wantStatus(t, err, 400, "Partitioning cannot be changed for Topic. ")
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	sp, err := e.ac.GetSubscription(ctx, "t", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	sp.RequiresSession = to.Ptr(true)
	_, err = e.ac.UpdateSubscription(ctx, "t", "s", sp.SubscriptionProperties, nil)
	wantStatus(t, err, 400, "The value for the RequiresSession property of an existing Subscription cannot be changed")
}

// /$keys creates namespace keys with fewer rights (Send, Listen), for the SDK tests that
// need limited-rights connection strings.
func TestNamespaceKeys(t *testing.T) {
	e := newEnv(t)
	code, body := e.rawDo(t, http.MethodPut, "/$keys/sender", `{"rights":["Send"],"primaryKey":"send-key"}`)
	if code != 200 || !strings.Contains(body, `"rights":["Send"]`) || !strings.Contains(body, `"primaryKey":"send-key"`) {
		t.Fatalf("put: %d %s", code, body)
	}
	code, body = e.rawDo(t, http.MethodPut, "/$keys/both", `{"rights":["Send","Listen"]}`)
	if code != 200 || !strings.Contains(body, `"primaryKey":"`) {
		t.Fatalf("put generated: %d %s", code, body)
	}
	e.store.Read(ctx, func(s *meta.State) {
		k, ok := s.SASKey("SENDER")
		if !ok || k.Rights != meta.RightSend || k.PrimaryKey != "send-key" {
			t.Errorf("stored %+v %v", k, ok)
		}
	})
	if code, body = e.rawDo(t, http.MethodGet, "/$keys", ""); code != 200 || !strings.Contains(body, `"name":"sender"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body = e.rawDo(t, http.MethodPut, "/$keys/bad", `{"rights":["Read"]}`); code != 400 {
		t.Fatalf("bad right: %d %s", code, body)
	}
	if code, _ = e.rawDo(t, http.MethodDelete, "/$keys/sender", ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ = e.rawDo(t, http.MethodGet, "/$keys/sender", ""); code != 404 {
		t.Fatalf("get deleted: %d", code)
	}
}

// AccessedAt as the SDK's live tests expect it (TestAdminClient_CreateQueue_Standard,
// _ListSubscriptionRuntimeProperties, _GetQueueRuntimeProperties): zero for a new queue,
// set for one that holds messages, always set for a subscription.
func TestAccessedAt(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"fresh", "used"} {
		if _, err := e.ac.CreateQueue(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.store.setCounts(admin.Entity{Name: "used"}, admin.RuntimeCounts{Active: 1, SizeBytes: 10})
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	fresh, err := e.ac.GetQueueRuntimeProperties(ctx, "fresh", nil)
	if err != nil || !fresh.AccessedAt.IsZero() {
		t.Fatalf("fresh queue: %v %v", fresh, err)
	}
	used, err := e.ac.GetQueueRuntimeProperties(ctx, "used", nil)
	if err != nil || used.AccessedAt.IsZero() {
		t.Fatalf("queue with messages: %v %v", used, err)
	}
	sub, err := e.ac.GetSubscriptionRuntimeProperties(ctx, "t", "s", nil)
	if err != nil || sub.AccessedAt.IsZero() {
		t.Fatalf("subscription: %v %v", sub, err)
	}
	// The activity the store recorded is what the API reports, for a fresh entity too.
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	e.store.setCounts(admin.Entity{Name: "fresh"}, admin.RuntimeCounts{AccessedAt: at})
	if fresh, err = e.ac.GetQueueRuntimeProperties(ctx, "fresh", nil); err != nil || !fresh.AccessedAt.Equal(at) {
		t.Fatalf("recorded access: %v %v, want %v", fresh.AccessedAt, err, at)
	}
}

// purgeStore adds the optional Purger capability to the test store.
type purgeStore struct {
	*memStore
	got []admin.Entity
}

func (p *purgeStore) Purge(_ context.Context, e admin.Entity) (int64, error) {
	p.got = append(p.got, e)
	return 3, nil
}

// POST .../$purge routes to the Store's Purger: a queue, a subscription, the namespace
// (every queue and topic); other methods and paths are refused.
func TestPurgeRoutes(t *testing.T) {
	e := newEnv(t)
	ps := &purgeStore{memStore: e.store}
	cfg := admin.DefaultConfig()
	cfg.Store, cfg.Now = ps, e.clock.Now
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = h
	for _, c := range []meta.Command{
		&meta.CreateQueue{Name: "q", Properties: meta.DefaultQueueProperties()},
		&meta.CreateTopic{Name: "t", Properties: meta.DefaultTopicProperties()},
		&meta.CreateSubscription{Topic: "t", Name: "s", Properties: meta.DefaultSubscriptionProperties()},
	} {
		if err := ps.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := e.rawDo(t, http.MethodPost, "/q/$purge", ""); code != 200 || !strings.Contains(body, `"purged":3`) {
		t.Fatalf("queue purge: %d %s", code, body)
	}
	if code, body := e.rawDo(t, http.MethodPost, "/t/Subscriptions/s/$purge", ""); code != 200 {
		t.Fatalf("subscription purge: %d %s", code, body)
	}
	if code, body := e.rawDo(t, http.MethodPost, "/$purge", ""); code != 200 || !strings.Contains(body, `"purged":6`) {
		t.Fatalf("namespace purge: %d %s", code, body)
	}
	want := []admin.Entity{{Name: "q"}, {Name: "t", Subscription: "s"}, {Name: "q"}, {Name: "t"}}
	if fmt.Sprint(ps.got) != fmt.Sprint(want) {
		t.Fatalf("purged %v, want %v", ps.got, want)
	}
	if code, _ := e.rawDo(t, http.MethodGet, "/q/$purge", ""); code != 405 {
		t.Fatalf("GET $purge: %d", code)
	}
	if code, _ := e.rawDo(t, http.MethodPost, "/missing/$purge", ""); code != 404 {
		t.Fatalf("missing entity: %d", code)
	}
	if code, _ := e.rawDo(t, http.MethodPost, "/t/Subscriptions/s/Rules/$purge", ""); code != 404 {
		t.Fatalf("rules path: %d", code)
	}
}

// Per-test isolation by entity name prefix: POST /$purge?prefix=P purges, and DELETE
// /$entities?prefix=P deletes, only the queues and topics whose names start with P
// (case-insensitively); other suites' entities are untouched.
func TestPrefixPurgeAndDelete(t *testing.T) {
	e := newEnv(t)
	ps := &purgeStore{memStore: e.store}
	cfg := admin.DefaultConfig()
	cfg.Store, cfg.Now = ps, e.clock.Now
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = h
	for _, c := range []meta.Command{
		&meta.CreateQueue{Name: "run1-q", Properties: meta.DefaultQueueProperties()},
		&meta.CreateTopic{Name: "RUN1-t", Properties: meta.DefaultTopicProperties()},
		&meta.CreateSubscription{Topic: "RUN1-t", Name: "s", Properties: meta.DefaultSubscriptionProperties()},
		&meta.CreateQueue{Name: "run2-q", Properties: meta.DefaultQueueProperties()},
		&meta.CreateQueue{Name: "run", Properties: meta.DefaultQueueProperties()},
	} {
		if err := ps.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := e.rawDo(t, http.MethodPost, "/$purge?prefix=run1-", ""); code != 200 || !strings.Contains(body, `"purged":6`) {
		t.Fatalf("prefix purge: %d %s", code, body)
	}
	if want := []admin.Entity{{Name: "run1-q"}, {Name: "RUN1-t"}}; fmt.Sprint(ps.got) != fmt.Sprint(want) {
		t.Fatalf("purged %v, want %v", ps.got, want)
	}
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodPost, "/$purge?prefix=", 400},         // empty: leave it out to mean everything
		{http.MethodPost, "/run2-q/$purge?prefix=r", 400}, // only the namespace purge takes a prefix
		{http.MethodDelete, "/$entities", 400},            // the prefix is required
		{http.MethodDelete, "/$entities?prefix=", 400},
		{http.MethodGet, "/$entities?prefix=run1-", 405},
	} {
		if code, body := e.rawDo(t, c.method, c.path, ""); code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.code)
		}
	}
	code, body := e.rawDo(t, http.MethodDelete, "/$entities?prefix=Run1-", "")
	if code != 200 || body != `{"deleted":["run1-q","RUN1-t"]}` {
		t.Fatalf("prefix delete: %d %s", code, body)
	}
	var left []string
	_ = ps.Read(ctx, func(s *meta.State) {
		for _, q := range s.Queues() {
			left = append(left, q.Name)
		}
		for _, t := range s.Topics() {
			left = append(left, t.Name)
		}
	})
	slices.Sort(left)
	if want := []string{"run", "run2-q"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if code, body := e.rawDo(t, http.MethodDelete, "/$entities?prefix=run1-", ""); code != 200 || body != `{"deleted":[]}` {
		t.Fatalf("nothing left to delete: %d %s", code, body)
	}
}
