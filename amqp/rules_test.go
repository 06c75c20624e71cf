package amqp

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	goamqp "github.com/Azure/go-amqp"
)

// A Backend without the RuleManager capability answers the rule operations 501
// not-implemented, with the condition the SDKs map errors from.
func TestRuleOperationsNeedTheCapability(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "t1/Subscriptions/s1/$management", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "t1/Subscriptions/s1/$management", &goamqp.ReceiverOptions{Name: "reply", TargetAddress: "reply"})
	if err != nil {
		t.Fatal(err)
	}
	req := goamqp.NewMessage(nil)
	req.Value = map[string]any{"top": int32(10), "skip": int32(0)}
	req.Properties = &goamqp.MessageProperties{MessageID: "r1", ReplyTo: ptrTo("reply")}
	req.ApplicationProperties = map[string]any{"operation": "com.microsoft:enumerate-rules"}
	if err := snd.Send(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ap := resp.ApplicationProperties; ap["statusCode"] != int32(501) || fmt.Sprint(ap["errorCondition"]) != condNotImplemented {
		t.Fatalf("response %v", ap)
	}
}

// The rule-description shapes the SDKs send: JavaScript (no rule-name inside, null
// correlation fields, the 7.x action map and the older bare-string action), .NET (the
// rule name repeated inside), and what is refused.
func TestParseRuleDescription(t *testing.T) {
	sql := func(e string) Map { return Map{{Key: "expression", Value: e}} }
	for _, c := range []struct {
		name string
		d    Map
		want RuleDescription
		bad  bool
	}{
		{name: "sql with action", d: Map{{Key: "sql-filter", Value: sql("a = 1")}, {Key: "sql-rule-action", Value: sql("SET b = 2")}},
			want: RuleDescription{Name: "r", Filter: RuleFilter{Kind: RuleFilterSQL, SQL: "a = 1"}, Action: "SET b = 2"}},
		{name: "legacy string action", d: Map{{Key: "sql-filter", Value: sql("a = 1")}, {Key: "sql-rule-action", Value: "SET b = 2"}},
			want: RuleDescription{Name: "r", Filter: RuleFilter{Kind: RuleFilterSQL, SQL: "a = 1"}, Action: "SET b = 2"}},
		{name: "true", d: Map{{Key: "sql-filter", Value: sql("1=1")}, {Key: "rule-name", Value: "r"}},
			want: RuleDescription{Name: "r", Filter: RuleFilter{Kind: RuleFilterTrue}}},
		{name: "false", d: Map{{Key: "sql-filter", Value: sql("1=0")}}, want: RuleDescription{Name: "r", Filter: RuleFilter{Kind: RuleFilterFalse}}},
		{name: "correlation", d: Map{{Key: "correlation-filter", Value: Map{{Key: "correlation-id", Value: nil},
			{Key: "label", Value: "l"}, {Key: "reply-to-session-id", Value: "rs"}, {Key: "properties", Value: Map{{Key: "k", Value: int64(1)}}}}}},
			want: RuleDescription{Name: "r", Filter: RuleFilter{Kind: RuleFilterCorrelation, Subject: "l", ReplyToSessionID: "rs",
				Properties: []Property{{Key: "k", Value: int64(1)}}}}},
		{name: "no filter", d: Map{{Key: "sql-rule-action", Value: sql("SET b = 2")}}, bad: true},
		{name: "two filters", d: Map{{Key: "sql-filter", Value: sql("a = 1")}, {Key: "correlation-filter", Value: Map{{Key: "to", Value: "x"}}}}, bad: true},
		{name: "expression not a string", d: Map{{Key: "sql-filter", Value: Map{{Key: "expression", Value: int32(1)}}}}, bad: true},
		{name: "correlation field not a string", d: Map{{Key: "correlation-filter", Value: Map{{Key: "to", Value: int32(1)}}}}, bad: true},
		{name: "compound property", d: Map{{Key: "correlation-filter", Value: Map{{Key: "properties", Value: Map{{Key: "k", Value: List{1}}}}}}}, bad: true},
		{name: "another name inside", d: Map{{Key: "sql-filter", Value: sql("1=1")}, {Key: "rule-name", Value: "other"}}, bad: true},
	} {
		got, err := parseRuleDescription("r", c.d)
		if c.bad {
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("%s: %v, want a bad request", c.name, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}
