package admin_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

const (
	rootKey  = "SAS_KEY_VALUE"
	rootName = "RootManageSharedAccessKey"
	// The SDK signs https://<Endpoint host>/...: the AMQP port, not the admin listener's.
	endpoint = "sb://127.0.0.1:5672"
)

// memStore backs the handler with a real meta.State under a mutex, and runtime counts
// the test controls.
type memStore struct {
	mu     sync.Mutex
	st     *meta.State
	now    func() time.Time
	counts map[admin.Entity]admin.RuntimeCounts // keys lower-case
	fail   error                                // returned by Apply when set
	rtFail error                                // returned by Runtime when set
}

func (m *memStore) Apply(_ context.Context, c meta.Command) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	return m.st.Apply(&meta.Entry{Now: m.now().UnixMilli(), Cmd: c})
}

func (m *memStore) Read(_ context.Context, fn func(*meta.State)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(m.st)
	return nil
}

func (m *memStore) Runtime(_ context.Context, e admin.Entity) (admin.RuntimeCounts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rtFail != nil {
		return admin.RuntimeCounts{}, m.rtFail
	}
	return m.counts[admin.Entity{Name: strings.ToLower(e.Name), Subscription: strings.ToLower(e.Subscription)}], nil
}

func (m *memStore) setCounts(e admin.Entity, c admin.RuntimeCounts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[e] = c
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	store *memStore
	clock *clock
	srv   *httptest.Server
	ac    *sbadmin.Client
	ready error
}

// rewrite is a policy.Transporter that sends the SDK's https://<endpoint>/ requests to
// the test server over plain HTTP on 127.0.0.1 (protocol.md §10 option 3).
type rewrite struct{ srv *httptest.Server }

func (t rewrite) Do(req *http.Request) (*http.Response, error) {
	u, _ := url.Parse(t.srv.URL)
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host = "http", u.Host
	return t.srv.Client().Do(r)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{clock: &clock{t: time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)}}
	e.store = &memStore{st: meta.New(), now: e.clock.Now, counts: map[admin.Entity]admin.RuntimeCounts{}}
	for _, c := range []meta.Command{
		&meta.SetNamespace{Name: "sbemulatorns"},
		&meta.PutSASKey{Key: meta.SASKey{Name: rootName, PrimaryKey: rootKey, Rights: meta.RightManage | meta.RightSend | meta.RightListen}},
		&meta.PutSASKey{Key: meta.SASKey{Name: "listener", PrimaryKey: "listen-key", Rights: meta.RightListen}},
	} {
		if err := e.store.Apply(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	cfg := admin.DefaultConfig()
	cfg.Store, cfg.Now = e.store, e.clock.Now
	cfg.Ready = func() error { return e.ready }
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h) // 127.0.0.1:0
	t.Cleanup(e.srv.Close)
	e.ac = e.client(t, rootName, rootKey)
	return e
}

func (e *env) client(t *testing.T, keyName, key string) *sbadmin.Client {
	t.Helper()
	cs := "Endpoint=" + endpoint + ";SharedAccessKeyName=" + keyName + ";SharedAccessKey=" + key + ";UseDevelopmentEmulator=true"
	ac, err := sbadmin.NewClientFromConnectionString(cs, &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: rewrite{e.srv},
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

func statusOf(t *testing.T, err error) int {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("not a ResponseError: %v", err)
	}
	return re.StatusCode
}

func wantStatus(t *testing.T, err error, code int, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d", code)
	}
	if got := statusOf(t, err); got != code {
		t.Fatalf("status %d, want %d: %v", got, code, err)
	}
	for _, s := range append(contains, "TrackingId:", "SystemTracker:", "Timestamp:") {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error does not mention %q:\n%v", s, err)
		}
	}
}

var ctx = context.Background()

// S-ENT-2 defaults as the admin client sees them.
func TestQueueDefaults(t *testing.T) {
	e := newEnv(t)
	resp, err := e.ac.CreateQueue(ctx, "plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sbadmin.QueueProperties{
		LockDuration:                        to.Ptr("PT1M"),
		MaxSizeInMegabytes:                  to.Ptr(int32(1024)),
		RequiresDuplicateDetection:          to.Ptr(false),
		RequiresSession:                     to.Ptr(false),
		DefaultMessageTimeToLive:            to.Ptr(meta.NeverISO),
		DeadLetteringOnMessageExpiration:    to.Ptr(false),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT10M"),
		MaxDeliveryCount:                    to.Ptr(int32(10)),
		EnableBatchedOperations:             to.Ptr(true),
		Status:                              to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:                    to.Ptr(meta.NeverISO),
		EnablePartitioning:                  to.Ptr(false),
		MaxMessageSizeInKilobytes:           to.Ptr(int64(256)),
	}
	if !equalJSON(resp.QueueProperties, want) {
		t.Fatalf("create response:\n got %s\nwant %s", js(resp.QueueProperties), js(want))
	}
}

func TestQueueLifecycle(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateQueue(ctx, "fwd", nil); err != nil {
		t.Fatal(err)
	}
	authRules := []sbadmin.AuthorizationRule{{
		AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightListen},
		KeyName:      to.Ptr("queue-listener"),
		PrimaryKey:   to.Ptr("pk"),
		SecondaryKey: to.Ptr("sk"),
	}}
	props := sbadmin.QueueProperties{
		LockDuration:                        to.Ptr("PT45S"),
		MaxSizeInMegabytes:                  to.Ptr(int32(4096)),
		RequiresDuplicateDetection:          to.Ptr(true),
		RequiresSession:                     to.Ptr(true),
		DefaultMessageTimeToLive:            to.Ptr(meta.NeverISO),
		DeadLetteringOnMessageExpiration:    to.Ptr(true),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT4H"),
		MaxDeliveryCount:                    to.Ptr(int32(100)),
		EnableBatchedOperations:             to.Ptr(false),
		Status:                              to.Ptr(sbadmin.EntityStatusReceiveDisabled),
		AutoDeleteOnIdle:                    to.Ptr("P30D"),
		EnablePartitioning:                  to.Ptr(true),
		ForwardTo:                           to.Ptr(endpoint + "/fwd"),
		ForwardDeadLetteredMessagesTo:       to.Ptr("fwd"),
		UserMetadata:                        to.Ptr("some <metadata> & more"),
		AuthorizationRules:                  authRules,
		MaxMessageSizeInKilobytes:           to.Ptr(int64(1024)),
	}
	created, err := e.ac.CreateQueue(ctx, "Orders", &sbadmin.CreateQueueOptions{Properties: &props})
	if err != nil {
		t.Fatal(err)
	}
	// A partitioned entity reports 16 times the size it was created with, as Service Bus
	// Standard does (TestAdminClient_CreateQueue_Standard of the SDK's live tests).
	props.MaxSizeInMegabytes = to.Ptr(int32(4096 * 16))
	if !equalJSON(created.QueueProperties, props) {
		t.Fatalf("create response:\n got %s\nwant %s", js(created.QueueProperties), js(props))
	}
	got, err := e.ac.GetQueue(ctx, "orders", nil) // case-insensitive
	if err != nil || got == nil {
		t.Fatalf("get: %v %v", got, err)
	}
	if !equalJSON(got.QueueProperties, props) {
		t.Fatalf("get:\n got %s\nwant %s", js(got.QueueProperties), js(props))
	}
	// The metadata holds the partitioned queue with the handler's partition count.
	e.store.Read(ctx, func(s *meta.State) {
		q, _ := s.Queue("ORDERS")
		if q.Name != "Orders" || q.Properties.PartitionCount != 16 || q.Properties.LockDuration != 45*time.Second || q.Properties.MaxSizeInMegabytes != 4096 {
			t.Errorf("stored: %+v", q)
		}
	})

	// Update (If-Match: *) -> 200; the response and a later get show the change.
	e.clock.Advance(time.Minute)
	upd := got.QueueProperties
	upd.LockDuration = to.Ptr("PT2M")
	upd.MaxDeliveryCount = to.Ptr(int32(3))
	upd.UserMetadata = nil // absent: kept
	u, err := e.ac.UpdateQueue(ctx, "Orders", upd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *u.LockDuration != "PT2M" || *u.MaxDeliveryCount != 3 || *u.UserMetadata != "some <metadata> & more" || *u.MaxSizeInMegabytes != 4096*16 {
		t.Fatalf("update response: %s", js(u.QueueProperties))
	}
	rt, err := e.ac.GetQueueRuntimeProperties(ctx, "Orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rt.CreatedAt.Equal(e.clock.Now().Add(-time.Minute)) || !rt.UpdatedAt.Equal(e.clock.Now()) {
		t.Fatalf("times: created %v updated %v", rt.CreatedAt, rt.UpdatedAt)
	}

	// S-ENT-2: RequiresSession is fixed at creation.
	upd.RequiresSession = to.Ptr(false)
	_, err = e.ac.UpdateQueue(ctx, "Orders", upd, nil)
	wantStatus(t, err, 400, "The value for the RequiresSession property of an existing Queue cannot be changed")

	// Duplicate create -> 409, also across kinds (queues and topics share names).
	_, err = e.ac.CreateQueue(ctx, "ORDERS", nil)
	wantStatus(t, err, 409)
	_, err = e.ac.CreateTopic(ctx, "orders", nil)
	wantStatus(t, err, 409)

	// Update of a missing queue -> 404.
	_, err = e.ac.UpdateQueue(ctx, "missing", sbadmin.QueueProperties{}, nil)
	wantStatus(t, err, 404)

	// Delete, then Get returns nil, nil (404); a second delete is 404.
	if _, err := e.ac.DeleteQueue(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if g, err := e.ac.GetQueue(ctx, "Orders", nil); g != nil || err != nil {
		t.Fatalf("get after delete: %v %v", g, err)
	}
	if r, err := e.ac.GetQueueRuntimeProperties(ctx, "Orders", nil); r != nil || err != nil {
		t.Fatalf("runtime after delete: %v %v", r, err)
	}
	_, err = e.ac.DeleteQueue(ctx, "orders", nil)
	wantStatus(t, err, 404)
}

// S-ENT-2 bounds: 400 with the field and the bound in the message.
func TestBadProperties(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		props sbadmin.QueueProperties
		want  string
	}{
		{sbadmin.QueueProperties{LockDuration: to.Ptr("PT1S")}, `LockDuration: "PT1S" is below the minimum 5s`},
		{sbadmin.QueueProperties{LockDuration: to.Ptr("PT6M")}, `LockDuration: "PT6M" is above the maximum 5m`},
		{sbadmin.QueueProperties{LockDuration: to.Ptr("soon")}, `LockDuration: "soon" is not an ISO 8601 duration`},
		{sbadmin.QueueProperties{MaxDeliveryCount: to.Ptr(int32(0))}, `MaxDeliveryCount: 0 is below the minimum 1`},
		{sbadmin.QueueProperties{DuplicateDetectionHistoryTimeWindow: to.Ptr("P8D")}, `DuplicateDetectionHistoryTimeWindow: "P8D" is above the maximum 7d`},
		{sbadmin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr(int64(200000))}, `MaxMessageSizeInKilobytes: 200000 is above the maximum 102400`},
		{sbadmin.QueueProperties{AutoDeleteOnIdle: to.Ptr("PT1M")}, `AutoDeleteOnIdle: "PT1M" is below the minimum 5m`},
		{sbadmin.QueueProperties{Status: to.Ptr(sbadmin.EntityStatus("Sleeping"))}, `Status: "Sleeping" is not one of`},
		{sbadmin.QueueProperties{ForwardTo: to.Ptr("nowhere")}, `ForwardTo: the target entity "nowhere" does not exist`},
	} {
		_, err := e.ac.CreateQueue(ctx, "q", &sbadmin.CreateQueueOptions{Properties: &tc.props})
		wantStatus(t, err, 400, tc.want)
	}
	_, err := e.ac.CreateQueue(ctx, "bad//name", nil)
	wantStatus(t, err, 400, "must not contain an empty segment")
	// Service Bus names start and end with a letter or digit ("-start" was
	// accepted).
	for _, name := range []string{"-start", "end-", "_q", "q."} {
		_, err = e.ac.CreateQueue(ctx, name, nil)
		wantStatus(t, err, 400, fmt.Sprintf("Name: %q must start and end with a letter or digit", name))
		_, err = e.ac.CreateTopic(ctx, name, nil)
		wantStatus(t, err, 400, fmt.Sprintf("Name: %q must start and end with a letter or digit", name))
	}
	_, err = e.ac.CreateQueue(ctx, "a/Subscriptions", nil)
	if err == nil {
		t.Fatal("a queue named with a Subscriptions segment was created")
	}
	_, err = e.ac.CreateTopic(ctx, "t", &sbadmin.CreateTopicOptions{Properties: &sbadmin.TopicProperties{DefaultMessageTimeToLive: to.Ptr("PT0S")}})
	wantStatus(t, err, 400, "DefaultMessageTimeToLive")
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	_, err = e.ac.CreateSubscription(ctx, "t", "s", &sbadmin.CreateSubscriptionOptions{Properties: &sbadmin.SubscriptionProperties{LockDuration: to.Ptr("PT1S")}})
	wantStatus(t, err, 400, `LockDuration: "PT1S" is below the minimum 5s`)
	_, err = e.ac.CreateSubscription(ctx, "t", "bad/name", nil)
	if err == nil {
		t.Fatal("subscription with '/' created")
	}
	_, err = e.ac.CreateSubscription(ctx, "t", "-s", nil)
	wantStatus(t, err, 400, `Name: "-s" must start and end with a letter or digit`)
	_, err = e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("r_")})
	wantStatus(t, err, 400, `"r_" must start and end with a letter or digit`)
	_, err = e.ac.CreateRule(ctx, "t", "missing", &sbadmin.CreateRuleOptions{Name: to.Ptr("r")})
	wantStatus(t, err, 404)
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	// Wrong key -> 401.
	_, err := e.client(t, rootName, "wrong").CreateQueue(ctx, "q", nil)
	wantStatus(t, err, 401, "invalid signature")
	// Unknown key name -> 401.
	_, err = e.client(t, "nobody", rootKey).GetQueue(ctx, "q", nil)
	wantStatus(t, err, 401, "not known")
	// A key without Manage -> 401, worded per operation as Service Bus words it (the
	// SDK's TestAdminClient_LackPermissions_* match the texts); a GET of a missing
	// entity is still "not found" (nil).
	lp := e.client(t, "listener", "listen-key")
	if q, err := lp.GetQueue(ctx, "q", nil); err != nil || q != nil {
		t.Fatalf("missing queue without Manage: %v %v", q, err)
	}
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	_, err = lp.GetTopic(ctx, "t", nil)
	wantStatus(t, err, 401, "Manage,EntityRead claims required for this operation")
	_, err = lp.CreateQueue(ctx, "q", nil)
	wantStatus(t, err, 401, "Authorization failed for specified action: Manage,EntityWrite")
	_, err = lp.DeleteTopic(ctx, "t", nil)
	wantStatus(t, err, 401, "Authorization failed for specified action: Manage,EntityDelete.")
	_, err = lp.GetSubscription(ctx, "t", "s", nil)
	wantStatus(t, err, 401, "401 SubCode=40100: Unauthorized : Unauthorized access for 'GetSubscription'")
	_, err = lp.NewListSubscriptionsPager("t", nil).NextPage(ctx)
	wantStatus(t, err, 401, "Unauthorized access for 'EnumerateSubscriptions' operation")
	_, err = lp.CreateSubscription(ctx, "t", "s", nil)
	wantStatus(t, err, 401, "Unauthorized access for 'CreateOrUpdateSubscription'")
	// No Authorization header at all -> 401.
	resp, err := http.Get(e.srv.URL + "/q?api-version=2024-05")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no token: %d", resp.StatusCode)
	}

	// An entity-level Manage key works for its entity only.
	if _, err := e.ac.CreateQueue(ctx, "owned", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		AuthorizationRules: []sbadmin.AuthorizationRule{{KeyName: to.Ptr("owner"), PrimaryKey: to.Ptr("owner-key"),
			AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightManage, sbadmin.AccessRightSend, sbadmin.AccessRightListen}}},
	}}); err != nil {
		t.Fatal(err)
	}
	owner := e.client(t, "owner", "owner-key")
	if q, err := owner.GetQueue(ctx, "owned", nil); err != nil || q == nil {
		t.Fatalf("entity key on its entity: %v %v", q, err)
	}
	_, err = owner.CreateQueue(ctx, "other", nil)
	wantStatus(t, err, 401)
}

func TestExpiredToken(t *testing.T) {
	e := newEnv(t)
	// The SDK signs with the real clock and a 2 h lifetime; move the broker's clock
	// past that.
	e.clock.mu.Lock()
	e.clock.t = time.Now().Add(3 * time.Hour)
	e.clock.mu.Unlock()
	_, err := e.ac.GetNamespaceProperties(ctx, nil)
	wantStatus(t, err, 401, "ExpiredToken")
}

func TestNamespaceProperties(t *testing.T) {
	e := newEnv(t)
	p, err := e.ac.GetNamespaceProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "sbemulatorns" || p.SKU != "Standard" || !p.CreatedTime.Equal(e.clock.Now()) || p.ModifiedTime.IsZero() {
		t.Fatalf("%+v", p)
	}
}

func TestListPaging(t *testing.T) {
	e := newEnv(t)
	names := []string{"a1", "B2", "c3", "d4", "E5"}
	for _, n := range names {
		if _, err := e.ac.CreateQueue(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ac.CreateTopic(ctx, "t-"+n, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int32{0, 2, 5, 10} {
		var got []string
		pager := e.ac.NewListQueuesPager(&sbadmin.ListQueuesOptions{MaxPageSize: size})
		for pager.More() {
			p, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range p.Queues {
				got = append(got, q.QueueName)
				if *q.LockDuration != "PT1M" {
					t.Fatalf("%+v", q)
				}
			}
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Fatalf("page size %d: %v", size, got)
		}
	}
	var topics []string
	pager := e.ac.NewListTopicsPager(&sbadmin.ListTopicsOptions{MaxPageSize: 3})
	for pager.More() {
		p, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range p.Topics {
			topics = append(topics, x.TopicName)
		}
	}
	if len(topics) != 5 || topics[0] != "t-a1" {
		t.Fatalf("topics %v", topics)
	}
	e.store.setCounts(admin.Entity{Name: "c3"}, admin.RuntimeCounts{Active: 7})
	var rts []string
	rp := e.ac.NewListQueuesRuntimePropertiesPager(&sbadmin.ListQueuesRuntimePropertiesOptions{MaxPageSize: 2})
	for rp.More() {
		p, err := rp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range p.QueueRuntimeProperties {
			if q.QueueName == "c3" && q.ActiveMessageCount != 7 {
				t.Fatalf("c3 counts %+v", q)
			}
			rts = append(rts, q.QueueName)
		}
	}
	if len(rts) != 5 {
		t.Fatalf("runtime list %v", rts)
	}
	tp := e.ac.NewListTopicsRuntimePropertiesPager(nil)
	n := 0
	for tp.More() {
		p, err := tp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.TopicRuntimeProperties)
	}
	if n != 5 {
		t.Fatalf("topic runtime list: %d", n)
	}
}

func TestTopicSubscriptionLifecycle(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateQueue(ctx, "target", nil); err != nil {
		t.Fatal(err)
	}
	tprops := sbadmin.TopicProperties{
		MaxSizeInMegabytes:                  to.Ptr(int32(2048)),
		RequiresDuplicateDetection:          to.Ptr(true),
		DefaultMessageTimeToLive:            to.Ptr("P7D"),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT30M"),
		EnableBatchedOperations:             to.Ptr(false),
		Status:                              to.Ptr(sbadmin.EntityStatusSendDisabled),
		AutoDeleteOnIdle:                    to.Ptr("PT1H"),
		EnablePartitioning:                  to.Ptr(false),
		SupportOrdering:                     to.Ptr(false),
		UserMetadata:                        to.Ptr("topic meta"),
		MaxMessageSizeInKilobytes:           to.Ptr(int64(512)),
	}
	ct, err := e.ac.CreateTopic(ctx, "events/all", &sbadmin.CreateTopicOptions{Properties: &tprops})
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(ct.TopicProperties, tprops) {
		t.Fatalf("create topic:\n got %s\nwant %s", js(ct.TopicProperties), js(tprops))
	}
	gt, err := e.ac.GetTopic(ctx, "EVENTS/ALL", nil)
	if err != nil || gt == nil || !equalJSON(gt.TopicProperties, tprops) {
		t.Fatalf("get topic: %v %s", err, js(gt))
	}
	upd := gt.TopicProperties
	upd.Status = to.Ptr(sbadmin.EntityStatusActive)
	if u, err := e.ac.UpdateTopic(ctx, "events/all", upd, nil); err != nil || *u.Status != sbadmin.EntityStatusActive {
		t.Fatalf("update topic: %v", err)
	}
	upd.RequiresDuplicateDetection = to.Ptr(false)
	_, err = e.ac.UpdateTopic(ctx, "events/all", upd, nil)
	wantStatus(t, err, 400, "RequiresDuplicateDetection")

	sprops := sbadmin.SubscriptionProperties{
		LockDuration:                                    to.Ptr("PT3M"),
		RequiresSession:                                 to.Ptr(true),
		DefaultMessageTimeToLive:                        to.Ptr("PT2H"),
		DeadLetteringOnMessageExpiration:                to.Ptr(true),
		EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(true),
		MaxDeliveryCount:                                to.Ptr(int32(4)),
		// The v1.11 client never sends a subscription's Status (newSubscriptionEnvelope
		// leaves it out), so it reads back as the default.
		Status:                        to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:              to.Ptr("PT10M"),
		ForwardTo:                     to.Ptr("target"),
		ForwardDeadLetteredMessagesTo: to.Ptr(endpoint + "/target"),
		EnableBatchedOperations:       to.Ptr(false),
		UserMetadata:                  to.Ptr("sub meta"),
	}
	cs, err := e.ac.CreateSubscription(ctx, "events/all", "Sub1", &sbadmin.CreateSubscriptionOptions{Properties: &sprops})
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(cs.SubscriptionProperties, sprops) || cs.SubscriptionName != "Sub1" {
		t.Fatalf("create sub:\n got %s\nwant %s", js(cs.SubscriptionProperties), js(sprops))
	}
	gs, err := e.ac.GetSubscription(ctx, "events/all", "sub1", nil)
	if err != nil || gs == nil || !equalJSON(gs.SubscriptionProperties, sprops) {
		t.Fatalf("get sub: %v %s", err, js(gs))
	}
	_, err = e.ac.CreateSubscription(ctx, "events/all", "SUB1", nil)
	wantStatus(t, err, 409)

	// A default rule description replaces $Default (S-TOP-1).
	_, err = e.ac.CreateSubscription(ctx, "events/all", "sub2", &sbadmin.CreateSubscriptionOptions{Properties: &sbadmin.SubscriptionProperties{
		DefaultRule: &sbadmin.RuleProperties{Name: "only-red", Filter: &sbadmin.CorrelationFilter{
			ApplicationProperties: map[string]any{"color": "red"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ruleNames []string
	rp := e.ac.NewListRulesPager("events/all", "sub2", nil)
	for rp.More() {
		p, err := rp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rules {
			ruleNames = append(ruleNames, r.Name)
		}
	}
	if strings.Join(ruleNames, ",") != "only-red" {
		t.Fatalf("sub2 rules %v", ruleNames)
	}
	// Without one, $Default = TrueFilter.
	if _, err := e.ac.CreateSubscription(ctx, "events/all", "sub3", nil); err != nil {
		t.Fatal(err)
	}
	r, err := e.ac.GetRule(ctx, "events/all", "sub3", "$Default", nil)
	if err != nil || r == nil {
		t.Fatalf("$Default: %v", err)
	}
	if _, ok := r.Filter.(*sbadmin.TrueFilter); !ok || r.Action != nil {
		t.Fatalf("$Default: %#v %#v", r.Filter, r.Action)
	}

	var subs []string
	sp := e.ac.NewListSubscriptionsPager("events/all", &sbadmin.ListSubscriptionsOptions{MaxPageSize: 2})
	for sp.More() {
		p, err := sp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Subscriptions {
			subs = append(subs, s.SubscriptionName)
		}
	}
	if strings.Join(subs, ",") != "Sub1,sub2,sub3" {
		t.Fatalf("subscriptions %v", subs)
	}
	srp := e.ac.NewListSubscriptionsRuntimePropertiesPager("events/all", nil)
	n := 0
	for srp.More() {
		p, err := srp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.SubscriptionRuntimeProperties)
	}
	if n != 3 {
		t.Fatalf("subscription runtime list: %d", n)
	}

	us := gs.SubscriptionProperties
	us.MaxDeliveryCount = to.Ptr(int32(9))
	if u, err := e.ac.UpdateSubscription(ctx, "events/all", "sub1", us, nil); err != nil || *u.MaxDeliveryCount != 9 {
		t.Fatalf("update sub: %v", err)
	}
	us.RequiresSession = to.Ptr(false)
	_, err = e.ac.UpdateSubscription(ctx, "events/all", "sub1", us, nil)
	wantStatus(t, err, 400, "RequiresSession")

	if _, err := e.ac.DeleteSubscription(ctx, "events/all", "sub3", nil); err != nil {
		t.Fatal(err)
	}
	if g, err := e.ac.GetSubscription(ctx, "events/all", "sub3", nil); g != nil || err != nil {
		t.Fatalf("deleted sub: %v %v", g, err)
	}
	// Deleting the topic deletes its subscriptions.
	if _, err := e.ac.DeleteTopic(ctx, "events/all", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateTopic(ctx, "events/all", nil); err != nil {
		t.Fatal(err)
	}
	if g, err := e.ac.GetSubscription(ctx, "events/all", "sub1", nil); g != nil || err != nil {
		t.Fatalf("subscription survived its topic: %v %v", g, err)
	}
	if g, err := e.ac.GetTopic(ctx, "nope", nil); g != nil || err != nil {
		t.Fatalf("missing topic: %v %v", g, err)
	}
	_, err = e.ac.DeleteTopic(ctx, "nope", nil)
	wantStatus(t, err, 404)
}

// S-TOP-1: rules of every kind round-trip through the admin client.
func TestRules(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	corr := &sbadmin.CorrelationFilter{
		ContentType: to.Ptr("application/json"), CorrelationID: to.Ptr("cid"), MessageID: to.Ptr("mid"),
		ReplyTo: to.Ptr("rt"), ReplyToSessionID: to.Ptr("rts"), SessionID: to.Ptr("sid"), Subject: to.Ptr("subj"), To: to.Ptr("to"),
		ApplicationProperties: map[string]any{"s": "v", "i": int64(42), "b": true, "d": 1.5, "when": when},
	}
	for _, tc := range []struct {
		name   string
		filter sbadmin.RuleFilter
		action sbadmin.RuleAction
	}{
		{"corr", corr, nil},
		{"true", &sbadmin.TrueFilter{}, nil},
		{"false", &sbadmin.FalseFilter{}, nil},
	} {
		cr, err := e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr(tc.name), Filter: tc.filter, Action: tc.action})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := sbadmin.RuleProperties{Name: tc.name, Filter: tc.filter, Action: tc.action}
		if !equalJSON(cr.RuleProperties, want) {
			t.Fatalf("%s create:\n got %s\nwant %s", tc.name, js(cr.RuleProperties), js(want))
		}
		g, err := e.ac.GetRule(ctx, "t", "s", tc.name, nil)
		if err != nil || g == nil || !equalJSON(g.RuleProperties, want) {
			t.Fatalf("%s get: %v\n got %s\nwant %s", tc.name, err, js(g), js(want))
		}
	}
	// The stored correlation filter has typed values.
	e.store.Read(ctx, func(s *meta.State) {
		r, _ := s.Rule("t", "s", "corr")
		c := r.Spec.Filter.Correlation
		if c.Subject != "subj" || len(c.Properties) != 5 {
			t.Fatalf("%+v", c)
		}
		for _, p := range c.Properties {
			want := map[string]rule.Kind{"s": rule.KindString, "i": rule.KindInt, "b": rule.KindBool, "d": rule.KindDouble, "when": rule.KindTimestamp}[p.Key]
			if p.Value.Kind != want {
				t.Errorf("property %s kind %s, want %s", p.Key, p.Value.Kind, want)
			}
		}
	})
	_, err := e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("TRUE"), Filter: &sbadmin.FalseFilter{}})
	wantStatus(t, err, 409)
	_, err = e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("empty"), Filter: &sbadmin.CorrelationFilter{}})
	wantStatus(t, err, 400, "correlation filter must set at least one property")

	// Update a rule (If-Match).
	u, err := e.ac.UpdateRule(ctx, "t", "s", sbadmin.RuleProperties{Name: "false", Filter: &sbadmin.TrueFilter{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Filter.(*sbadmin.TrueFilter); !ok {
		t.Fatalf("update: %#v", u.Filter)
	}
	_, err = e.ac.UpdateRule(ctx, "t", "s", sbadmin.RuleProperties{Name: "nope", Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, 404)

	var names []string
	pager := e.ac.NewListRulesPager("t", "s", &sbadmin.ListRulesOptions{MaxPageSize: 2})
	for pager.More() {
		p, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rules {
			names = append(names, r.Name)
		}
	}
	if strings.Join(names, ",") != "$Default,corr,true,false" {
		t.Fatalf("rules %v", names)
	}
	// Topic runtime properties count filters: true/false/SQL as SQL, correlation apart.
	trt, err := e.ac.GetTopicRuntimeProperties(ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if trt.SubscriptionCount != 1 || trt.SQLFilterCount != 3 || trt.CorrelationFilterCount != 1 {
		t.Fatalf("%+v", trt)
	}
	if _, err := e.ac.DeleteRule(ctx, "t", "s", "corr", nil); err != nil {
		t.Fatal(err)
	}
	if g, err := e.ac.GetRule(ctx, "t", "s", "corr", nil); g != nil || err != nil {
		t.Fatalf("deleted rule: %v %v", g, err)
	}
	_, err = e.ac.DeleteRule(ctx, "t", "s", "corr", nil)
	wantStatus(t, err, 404)
}

// SQL filters and actions round-trip; SQL syntax errors are 400s.
func TestSQLRules(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	filter := &sbadmin.SQLFilter{Expression: "color = @c AND sys.Label = 'x'", Parameters: map[string]any{"@c": "red", "@n": int64(3)}}
	action := &sbadmin.SQLAction{Expression: "SET quantity = @q", Parameters: map[string]any{"@q": int64(7)}}
	cr, err := e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("sql"), Filter: filter, Action: action})
	if err != nil {
		t.Fatal(err)
	}
	want := sbadmin.RuleProperties{Name: "sql", Filter: filter, Action: action}
	if !equalJSON(cr.RuleProperties, want) {
		t.Fatalf("create:\n got %s\nwant %s", js(cr.RuleProperties), js(want))
	}
	g, err := e.ac.GetRule(ctx, "t", "s", "sql", nil)
	if err != nil || g == nil || !equalJSON(g.RuleProperties, want) {
		t.Fatalf("get: %v %s", err, js(g))
	}
	// A subscription whose default rule is SQL.
	if _, err := e.ac.CreateSubscription(ctx, "t", "s2", &sbadmin.CreateSubscriptionOptions{Properties: &sbadmin.SubscriptionProperties{
		DefaultRule: &sbadmin.RuleProperties{Filter: &sbadmin.SQLFilter{Expression: "a > 1"}, Action: &sbadmin.SQLAction{Expression: "SET b = 2"}}}}); err != nil {
		t.Fatal(err)
	}
	d, err := e.ac.GetRule(ctx, "t", "s2", "$Default", nil)
	if err != nil || d == nil || d.Filter.(*sbadmin.SQLFilter).Expression != "a > 1" || d.Action.(*sbadmin.SQLAction).Expression != "SET b = 2" {
		t.Fatalf("default sql rule: %v %s", err, js(d))
	}
	_, err = e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &sbadmin.SQLFilter{Expression: "a = = 1"}})
	wantStatus(t, err, 400, "Filter.SqlExpression: SQL syntax error at position 5")
	noPrefix(t, err)
	_, err = e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad2"), Filter: &sbadmin.TrueFilter{}, Action: &sbadmin.SQLAction{Expression: "SET"}})
	wantStatus(t, err, 400, "Action.SqlExpression: SQL syntax error")
	noPrefix(t, err)
	_, err = e.ac.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad3"), Filter: &sbadmin.SQLFilter{Expression: "a = @x"}})
	wantStatus(t, err, 400, "Filter.SqlExpression: SQL error at position 5: parameter @x is not defined")
	noPrefix(t, err)
}

// noPrefix fails unless err's text, as a user reads it, is free of the broker's
// package prefixes ("rule: ", "meta: ").
func noPrefix(t *testing.T, err error) {
	t.Helper()
	if m := regexp.MustCompile(`\b(meta|cluster|partition|fsm|rule|admin|sas): `).FindString(err.Error()); m != "" {
		t.Errorf("the error shows the internal prefix %q:\n%v", m, err)
	}
}

// Runtime properties carry the store's counts and every field the client dereferences.
func TestRuntimeProperties(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := e.ac.CreateSubscription(ctx, "t", s, nil); err != nil {
			t.Fatal(err)
		}
	}
	created := e.clock.Now()
	accessed := created.Add(5 * time.Second)
	e.store.setCounts(admin.Entity{Name: "q"}, admin.RuntimeCounts{Active: 5, DeadLetter: 2, Scheduled: 3,
		Transfer: 1, TransferDeadLetter: 4, Total: 16, SizeBytes: 1234, AccessedAt: accessed})
	e.store.setCounts(admin.Entity{Name: "t"}, admin.RuntimeCounts{Scheduled: 6, SizeBytes: 999})
	e.store.setCounts(admin.Entity{Name: "t", Subscription: "b"}, admin.RuntimeCounts{Active: 8, DeadLetter: 1})

	q, err := e.ac.GetQueueRuntimeProperties(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.ActiveMessageCount != 5 || q.DeadLetterMessageCount != 2 || q.ScheduledMessageCount != 3 ||
		q.TransferMessageCount != 1 || q.TransferDeadLetterMessageCount != 4 || q.TotalMessageCount != 16 ||
		q.SizeInBytes != 1234 || !q.AccessedAt.Equal(accessed) || !q.CreatedAt.Equal(created) || !q.UpdatedAt.Equal(created) {
		t.Fatalf("queue runtime: %+v", q.QueueRuntimeProperties)
	}
	tp, err := e.ac.GetTopicRuntimeProperties(ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tp.ScheduledMessageCount != 6 || tp.SizeInBytes != 999 || tp.SubscriptionCount != 2 ||
		tp.SQLFilterCount != 2 || tp.CorrelationFilterCount != 0 || !tp.AccessedAt.Equal(created) || !tp.CreatedAt.Equal(created) {
		t.Fatalf("topic runtime: %+v", tp.TopicRuntimeProperties)
	}
	// Subscription runtime: the client dereferences MessageCount and the counters with
	// no nil checks, so a zero subscription must still carry them.
	for _, s := range []struct {
		name           string
		active, dl, mc int64
	}{{"a", 0, 0, 0}, {"b", 8, 1, 9}} {
		sr, err := e.ac.GetSubscriptionRuntimeProperties(ctx, "t", s.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if int64(sr.ActiveMessageCount) != s.active || int64(sr.DeadLetterMessageCount) != s.dl || sr.TotalMessageCount != s.mc ||
			!sr.CreatedAt.Equal(created) || !sr.AccessedAt.Equal(created) {
			t.Fatalf("subscription %s runtime: %+v", s.name, sr.SubscriptionRuntimeProperties)
		}
	}
	if r, err := e.ac.GetSubscriptionRuntimeProperties(ctx, "t", "zz", nil); r != nil || err != nil {
		t.Fatalf("missing subscription runtime: %v %v", r, err)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	get := func(p string) (int, string) {
		resp, err := http.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if c, b := get("/healthz"); c != 200 || !strings.Contains(b, `"healthy"`) {
		t.Fatalf("healthz %d %s", c, b)
	}
	if c, _ := get("/health"); c != 200 {
		t.Fatalf("health %d", c)
	}
	if c, _ := get("/readyz"); c != 200 {
		t.Fatalf("readyz %d", c)
	}
	e.ready = errors.New("metadata group has no leader")
	if c, b := get("/readyz"); c != 503 || !strings.Contains(b, "no leader") {
		t.Fatalf("readyz not ready: %d %s", c, b)
	}
	// /health has the official emulator's shape (HealthCheckApiSchema.md).
	if c, b := get("/health"); c != 503 || strings.TrimSpace(b) != `{"message":"Service not available. Please try after some time.","status":"unhealthy"}` {
		t.Fatalf("health not ready: %d %s", c, b)
	}
	e.ready = nil
	if c, b := get("/health"); c != 200 || strings.TrimSpace(b) != `{"message":"Service is healthy.","status":"healthy"}` {
		t.Fatalf("health: %d %s", c, b)
	}
	// With a token, /healthz is an entity path like any other.
	if _, err := e.ac.CreateQueue(ctx, "healthz", nil); err != nil {
		t.Fatal(err)
	}
	if q, err := e.ac.GetQueue(ctx, "healthz", nil); err != nil || q == nil {
		t.Fatalf("queue healthz: %v %v", q, err)
	}
}

func TestStoreUnavailable(t *testing.T) {
	e := newEnv(t)
	e.store.mu.Lock()
	e.store.fail = admin.ErrUnavailable
	e.store.mu.Unlock()
	_, err := e.ac.CreateQueue(ctx, "q", nil)
	wantStatus(t, err, 503)
}

func TestConfigValidate(t *testing.T) {
	if _, err := admin.New(nil); err == nil {
		t.Fatal("nil config without a store accepted")
	}
	cfg := admin.DefaultConfig()
	cfg.Store = &memStore{st: meta.New()}
	cfg.PartitionCount = 33
	if _, err := admin.New(cfg); err == nil {
		t.Fatal("PartitionCount 33 accepted")
	}
}

// The filter and action type is a namespaced attribute: any prefix bound to the
// XMLSchema-instance namespace works (protocol.md §10), and a wrong description kind is
// a 400.
func TestRawXMLPrefixes(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ac.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	put := func(path, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+path+"?api-version=2024-05", strings.NewReader(body))
		req.Header.Set("Authorization", sign("https://127.0.0.1:5672"+path+"?api-version=2024-05", rootName, rootKey))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	code, body := put("/t/Subscriptions/s/Rules/r1", `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">`+
		`<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:foo="http://www.w3.org/2001/XMLSchema-instance">`+
		`<Filter foo:type="CorrelationFilter"><Label>x</Label><Properties><KeyValueOfstringanyType><Key>n</Key>`+
		`<Value foo:type="bar:long" xmlns:bar="http://www.w3.org/2001/XMLSchema">9000000000</Value></KeyValueOfstringanyType></Properties></Filter>`+
		`<Action foo:type="EmptyRuleAction"/><Name>r1</Name></RuleDescription></content></entry>`)
	if code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	e.store.Read(ctx, func(s *meta.State) {
		r, ok := s.Rule("t", "s", "r1")
		if !ok || r.Spec.Filter.Kind != rule.FilterCorrelation || r.Spec.Filter.Correlation.Subject != "x" ||
			r.Spec.Filter.Correlation.Properties[0].Value != (rule.Value{Kind: rule.KindLong, N: 9000000000}) {
			t.Fatalf("%+v", r)
		}
	})
	// An undeclared "i:" prefix is accepted too.
	code, body = put("/t/Subscriptions/s/Rules/r2", `<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">`+
		`<Filter i:type="FalseFilter"/><Name>r2</Name></RuleDescription>`)
	if code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	code, body = put("/t/Subscriptions/s/Rules/r3", `<RuleDescription><Filter><SqlExpression>1=1</SqlExpression></Filter></RuleDescription>`)
	if code != 400 || !strings.Contains(body, "no xsi:type") {
		t.Fatalf("untyped filter: %d %s", code, body)
	}
	code, body = put("/q", `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription/></content></entry>`)
	if code != 400 || !strings.Contains(body, "cannot be PUT") {
		t.Fatalf("wrong kind: %d %s", code, body)
	}
	code, body = put("/q", `<entry><content>`)
	if code != 400 || !strings.Contains(body, "not valid XML") {
		t.Fatalf("bad XML: %d %s", code, body)
	}
}

// sign makes a SAS token the way the SDK does (protocol.md §3).
func sign(uri, keyName, key string) string {
	sr := strings.ToLower(url.QueryEscape(uri))
	se := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return "SharedAccessSignature sr=" + sr + "&sig=" + sig + "&se=" + se + "&skn=" + keyName
}

func TestMethodsAndLimits(t *testing.T) {
	e := newEnv(t)
	do := func(method, path, body string) int {
		req, _ := http.NewRequest(method, e.srv.URL+path+"?api-version=2024-05", strings.NewReader(body))
		req.Header.Set("Authorization", sign("https://127.0.0.1:5672"+path+"?api-version=2024-05", rootName, rootKey))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodPost, "/q", "", 405},
		{http.MethodPut, "/$namespaceinfo", "<QueueDescription/>", 405},
		{http.MethodPut, "/$Resources/Queues", "<QueueDescription/>", 405},
		{http.MethodDelete, "/$Resources/Queues", "", 405},
		{http.MethodPut, "/big", "<QueueDescription><UserMetadata>" + strings.Repeat("x", 2<<20) + "</UserMetadata></QueueDescription>", 413},
		{http.MethodPut, "/q", "<QueueDescription><MaxDeliveryCount>many</MaxDeliveryCount></QueueDescription>", 400},
		{http.MethodPut, "/q", "<QueueDescription><RequiresSession>maybe</RequiresSession></QueueDescription>", 400},
		{http.MethodPut, "/q", "<QueueDescription><UserMetadata>" + strings.Repeat("x", 1025) + "</UserMetadata></QueueDescription>", 400},
		{http.MethodPut, "/q", "<QueueDescription><LockDuration>PT30S</LockDuration></QueueDescription>", 201},
		{http.MethodGet, "/q/Subscriptions", "", 404},            // q is a queue, not a topic
		{http.MethodGet, "/$Resources/Queues?%24top=x", "", 400}, // a $top that is not a number
	} {
		if got := do(tc.method, tc.path, tc.body); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
}
