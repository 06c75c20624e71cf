package bridge

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// ruleClient is a $management request/response pair on a subscription, as the
// JavaScript SDK's ServiceBusRuleManager opens it.
type ruleClient struct {
	t   *testing.T
	snd *goamqp.Sender
	rcv *goamqp.Receiver
	n   int
}

// serveAMQP serves the backend over AMQP on a loopback port (no authentication).
func serveAMQP(t *testing.T, b *Backend) string {
	t.Helper()
	cfg := amqp.DefaultConfig()
	cfg.Addresses = nil
	cfg.RequireAuth = false
	srv, err := amqp.New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

func newRuleClient(t *testing.T, ctx context.Context, addr, path string) *ruleClient {
	t.Helper()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, path+"/$management", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, path+"/$management", &goamqp.ReceiverOptions{Name: "rule-reply", TargetAddress: "rule-reply"})
	if err != nil {
		t.Fatal(err)
	}
	return &ruleClient{t: t, snd: snd, rcv: rcv}
}

// do sends one request and returns status, error condition and body.
func (rc *ruleClient) do(ctx context.Context, op string, body map[string]any) (int32, string, any) {
	rc.t.Helper()
	st, cond, _, v := rc.doDesc(ctx, op, body)
	return st, cond, v
}

// doDesc is do that also returns the status description.
func (rc *ruleClient) doDesc(ctx context.Context, op string, body map[string]any) (int32, string, string, any) {
	rc.t.Helper()
	rc.n++
	req := goamqp.NewMessage(nil)
	req.Value = body
	reply := "rule-reply"
	req.Properties = &goamqp.MessageProperties{MessageID: fmt.Sprintf("req-%d", rc.n), ReplyTo: &reply}
	req.ApplicationProperties = map[string]any{"operation": op, "com.microsoft:tracking-id": "t"}
	if err := rc.snd.Send(ctx, req, nil); err != nil {
		rc.t.Fatal(err)
	}
	resp, err := rc.rcv.Receive(ctx, nil)
	if err != nil {
		rc.t.Fatal(err)
	}
	if err := rc.rcv.AcceptMessage(ctx, resp); err != nil {
		rc.t.Fatal(err)
	}
	status, _ := resp.ApplicationProperties["statusCode"].(int32)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	return status, fmt.Sprint(resp.ApplicationProperties["errorCondition"]), desc, resp.Value
}

// The three rule operations with the exact bodies the JavaScript SDK (7.x
// managementClient addRule/removeRule/getRules) sends, over a real node: rules land in
// the replicated metadata (where the administration API reads them), a duplicate is
// 409 entity-already-exists, a bad SQL filter is 400 with the admin API's reason, a
// missing rule 404, and the listing is the described-type shape the SDK decodes.
func TestRuleManagementOverAMQP(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []meta.Command{
		&meta.CreateTopic{Name: "t", Properties: meta.DefaultTopicProperties()},
		&meta.CreateSubscription{Topic: "t", Name: "s", Properties: meta.DefaultSubscriptionProperties()},
		&meta.CreateQueue{Name: "q", Properties: meta.DefaultQueueProperties()},
	} {
		if err := n.Store().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	addr := serveAMQP(t, b)
	rc := newRuleClient(t, ctx, addr, "t/Subscriptions/s")

	// Skip past $Default; nothing there yet.
	if st, _, _ := rc.do(ctx, "com.microsoft:enumerate-rules", map[string]any{"top": int32(10), "skip": int32(1)}); st != 204 {
		t.Fatalf("enumerate with only $Default past skip: status %d, want 204", st)
	}
	if st, cond, _ := rc.do(ctx, "com.microsoft:remove-rule", map[string]any{"rule-name": "$Default"}); st != 200 {
		t.Fatalf("remove $Default: %d %s", st, cond)
	}
	adds := []struct {
		name string
		desc map[string]any
	}{
		{"sql", map[string]any{
			"sql-filter":      map[string]any{"expression": "color = 'red' AND size > 2"},
			"sql-rule-action": map[string]any{"expression": "SET tagged = 'yes'"},
		}},
		{"corr", map[string]any{"correlation-filter": map[string]any{
			"correlation-id": "cid", "message-id": nil, "to": nil, "reply-to": nil, "label": "lbl",
			"session-id": nil, "reply-to-session-id": nil, "content-type": "text/plain",
			"properties": map[string]any{"region": "eu", "n": int64(3)},
		}}},
		{"all", map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}},
		{"none", map[string]any{"sql-filter": map[string]any{"expression": "1=0"}}},
	}
	for _, a := range adds {
		if st, cond, _ := rc.do(ctx, "com.microsoft:add-rule", map[string]any{"rule-name": a.name, "rule-description": a.desc}); st != 200 {
			t.Fatalf("add %s: %d %s", a.name, st, cond)
		}
	}
	// The metadata store has them, as the administration API reads it.
	var got []meta.Rule
	_ = n.Store().Read(ctx, func(s *meta.State) {
		sub, _ := s.Subscription("t", "s")
		got = sub.Rules
	})
	if len(got) != 4 || got[0].Spec.Filter.Kind != rule.FilterSQL || got[0].Spec.Action.SQL != "SET tagged = 'yes'" ||
		got[1].Spec.Filter.Correlation.Subject != "lbl" || len(got[1].Spec.Filter.Correlation.Properties) != 2 ||
		got[2].Spec.Filter.Kind != rule.FilterTrue || got[3].Spec.Filter.Kind != rule.FilterFalse {
		t.Fatalf("metadata rules: %+v", got)
	}

	for _, c := range []struct {
		op     string
		body   map[string]any
		status int32
		cond   string
	}{
		{"com.microsoft:add-rule", map[string]any{"rule-name": "SQL", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}}, 409, "com.microsoft:entity-already-exists"},
		{"com.microsoft:add-rule", map[string]any{"rule-name": "bad", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "color = = 'x'"}}}, 400, "amqp:decode-error"},
		{"com.microsoft:add-rule", map[string]any{"rule-name": "bad name!", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}}, 400, "amqp:decode-error"},
		{"com.microsoft:add-rule", map[string]any{"rule-name": "nofilter", "rule-description": map[string]any{}}, 400, "amqp:decode-error"},
		{"com.microsoft:add-rule", map[string]any{"rule-name": "emptycorr", "rule-description": map[string]any{"correlation-filter": map[string]any{"label": nil}}}, 400, "amqp:decode-error"},
		{"com.microsoft:remove-rule", map[string]any{"rule-name": "missing"}, 404, "amqp:not-found"},
	} {
		if st, cond, _ := rc.do(ctx, c.op, c.body); st != c.status || cond != c.cond {
			t.Errorf("%s %v: %d %s, want %d %s", c.op, c.body, st, cond, c.status, c.cond)
		}
	}

	// The refusal says what the administration API would: which field and why.
	if _, _, d, _ := rc.doDesc(ctx, "com.microsoft:add-rule", map[string]any{"rule-name": "bad",
		"rule-description": map[string]any{"sql-filter": map[string]any{"expression": "color = = 'x'"}}}); !strings.Contains(d, "Filter.SqlExpression") || !strings.Contains(d, "TrackingId:") {
		t.Errorf("bad SQL description: %q", d)
	}

	st, _, body := rc.do(ctx, "com.microsoft:enumerate-rules", map[string]any{"top": int32(2), "skip": int32(1)})
	if st != 200 {
		t.Fatalf("enumerate: %d", st)
	}
	rules, _ := body.(map[string]any)["rules"].([]any)
	if len(rules) != 2 {
		t.Fatalf("enumerate top 2 skip 1: %v", body)
	}
	desc := func(r any) []any {
		d, v := described(t, r.(map[string]any)["rule-description"])
		if d != uint64(0x13700000004) || len(v) != 4 {
			t.Fatalf("rule description: %v %#v", d, v)
		}
		return v
	}
	corr := desc(rules[0])
	fd, fields := described(t, corr[0])
	if fd != uint64(0x1370000009) || corr[2] != "corr" || len(fields) != 9 || fields[0] != "cid" || fields[4] != "lbl" ||
		fields[1] != nil || fields[7] != "text/plain" || fmt.Sprint(fields[8]) != "map[n:3 region:eu]" {
		t.Errorf("correlation rule: %#v filter %#v", corr, fields)
	}
	if ad, _ := described(t, corr[1]); ad != uint64(0x13700000005) {
		t.Errorf("no action: %v", ad)
	}
	if _, ok := corr[3].(time.Time); !ok {
		t.Errorf("created-at: %#v", corr[3])
	}
	all := desc(rules[1])
	if td, _ := described(t, all[0]); td != uint64(0x1370000007) || all[2] != "all" {
		t.Errorf("true filter: %#v", all)
	}
	_, _, body = rc.do(ctx, "com.microsoft:enumerate-rules", map[string]any{"top": int32(1<<31 - 1), "skip": int32(0)})
	listed := body.(map[string]any)["rules"].([]any)
	if len(listed) != 4 {
		t.Fatalf("enumerate all: %d rules", len(listed))
	}
	sqlRule := desc(listed[0])
	sfd, sf := described(t, sqlRule[0])
	sad, sa := described(t, sqlRule[1])
	if sfd != uint64(0x1370000006) || sf[0] != "color = 'red' AND size > 2" || sf[1] != int32(20) ||
		sad != uint64(0x13700000006) || sa[0] != "SET tagged = 'yes'" {
		t.Errorf("sql rule: filter %v %#v action %v %#v", sfd, sf, sad, sa)
	}
	if fd, _ := described(t, desc(listed[3])[0]); fd != uint64(0x1370000008) {
		t.Errorf("false filter: %v", fd)
	}

	if st, cond, _ := rc.do(ctx, "com.microsoft:remove-rule", map[string]any{"rule-name": "CORR"}); st != 200 {
		t.Fatalf("remove: %d %s", st, cond)
	}
	// A queue has no rules.
	qc := newRuleClient(t, ctx, addr, "q")
	if st, cond, _ := qc.do(ctx, "com.microsoft:enumerate-rules", map[string]any{"top": int32(1), "skip": int32(0)}); st != 400 {
		t.Errorf("rules of a queue: %d %s, want 400", st, cond)
	}
}

// described reads a value go-amqp decoded as its (internal) DescribedType.
func described(t *testing.T, v any) (any, []any) {
	t.Helper()
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() != reflect.Struct || !rv.FieldByName("Descriptor").IsValid() {
		t.Fatalf("not a described value: %#v", v)
	}
	list, _ := rv.FieldByName("Value").Interface().([]any)
	return rv.FieldByName("Descriptor").Interface(), list
}
