package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// topic creates a topic and its subscriptions (with default rules) and returns its name.
func (e *env) topic(t *testing.T, prefix string, props *admin.TopicProperties, subs ...string) string {
	t.Helper()
	tp := name(prefix)
	if _, err := e.admin.CreateTopic(testCtx(t), tp, &admin.CreateTopicOptions{Properties: props}); err != nil {
		t.Fatalf("create topic %s: %v", tp, err)
	}
	for _, s := range subs {
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, s, nil); err != nil {
			t.Fatalf("create subscription %s/%s: %v", tp, s, err)
		}
	}
	return tp
}

// replaceRules swaps a subscription's $Default rule for the given ones.
func (e *env) replaceRules(t *testing.T, topic, sub string, rules ...admin.RuleProperties) {
	t.Helper()
	if _, err := e.admin.DeleteRule(testCtx(t), topic, sub, "$Default", nil); err != nil {
		t.Fatalf("delete $Default of %s: %v", sub, err)
	}
	for _, r := range rules {
		if _, err := e.admin.CreateRule(testCtx(t), topic, sub, &admin.CreateRuleOptions{Name: to.Ptr(r.Name), Filter: r.Filter, Action: r.Action}); err != nil {
			t.Fatalf("create rule %s on %s: %v", r.Name, sub, err)
		}
	}
}

// drain receives (and completes) everything a subscription has, checking nothing more
// arrives, and returns the bodies.
func drain(t *testing.T, r *azservicebus.Receiver, want int) []*azservicebus.ReceivedMessage {
	t.Helper()
	msgs := receiveN(t, r, want, 10*time.Second)
	for _, m := range msgs {
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, r, 500*time.Millisecond)
	return msgs
}

// TestTopics covers topics and subscription rules (S-TOP-1).
func TestTopics(t *testing.T) {
	e := newEnv(t)

	// S-TOP-1: a new subscription has rule $Default = true filter, and every
	// subscription gets its own copy of each message.
	t.Run("DefaultRuleFanOut", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "fan", nil, "s1", "s2")
		rule, err := e.admin.GetRule(testCtx(t), tp, "s1", "$Default", nil)
		if err != nil {
			t.Fatal(err)
		}
		if rule == nil {
			t.Fatalf("no $Default rule")
		}
		if _, ok := rule.Filter.(*admin.TrueFilter); !ok {
			if f, ok := rule.Filter.(*admin.SQLFilter); !ok || f.Expression != "1=1" {
				t.Fatalf("$Default filter is %#v, want TrueFilter", rule.Filter)
			}
		}
		send(t, e.sender(t, tp), &azservicebus.Message{Body: []byte("hello"), ApplicationProperties: map[string]any{"k": "v"}})
		r1, r2 := e.subReceiver(t, tp, "s1", nil), e.subReceiver(t, tp, "s2", nil)
		m1 := drain(t, r1, 1)[0]
		m2 := drain(t, r2, 1)[0]
		if string(m1.Body) != "hello" || string(m2.Body) != "hello" || m2.ApplicationProperties["k"] != "v" {
			t.Fatalf("copies: %q %q %v", m1.Body, m2.Body, m2.ApplicationProperties)
		}
		// Settling one copy leaves the other subscription's copy alone (done above by
		// completing s1 before receiving s2).
	})

	// S-TOP-1: SQL and correlation filters split a stream of messages across three
	// subscriptions; a SQL action (SET, REMOVE of application properties) modifies only
	// that subscription's copy.
	t.Run("FiltersSplitStream", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "split", nil, "high", "eu", "tagged")
		e.replaceRules(t, tp, "high", admin.RuleProperties{Name: "prio",
			Filter: &admin.SQLFilter{Expression: "priority > @min AND sys.Label <> 'test'", Parameters: map[string]any{"@min": int64(5)}}})
		e.replaceRules(t, tp, "eu", admin.RuleProperties{Name: "corr",
			Filter: &admin.CorrelationFilter{Subject: to.Ptr("order"), ApplicationProperties: map[string]any{"region": "eu"}}},
			admin.RuleProperties{Name: "bycorr", Filter: &admin.CorrelationFilter{CorrelationID: to.Ptr("vip")}})
		e.replaceRules(t, tp, "tagged", admin.RuleProperties{Name: "us",
			Filter: &admin.SQLFilter{Expression: "region = 'us' OR region LIKE 'a%'"},
			Action: &admin.SQLAction{Expression: "SET routed = 'yes'; REMOVE secret"}})

		type in struct {
			name     string
			subject  string
			corr     string
			region   string
			priority int64
		}
		stream := []in{
			{"m0", "order", "", "eu", 1},     // eu
			{"m1", "order", "", "us", 9},     // high, tagged
			{"m2", "test", "", "eu", 9},      // none: high excludes Label 'test', eu wants Subject order
			{"m3", "order", "vip", "", 7},    // high, eu (by correlation id)
			{"m4", "invoice", "", "asia", 0}, // tagged (LIKE)
			{"m5", "order", "", "EU", 0},     // none: correlation filters compare exactly
		}
		s := e.sender(t, tp)
		for _, m := range stream {
			msg := &azservicebus.Message{Body: []byte(m.name), Subject: to.Ptr(m.subject),
				ApplicationProperties: map[string]any{"priority": m.priority, "secret": "x"}}
			if m.region != "" {
				msg.ApplicationProperties["region"] = m.region
			}
			if m.corr != "" {
				msg.CorrelationID = to.Ptr(m.corr)
			}
			send(t, s, msg)
		}
		want := map[string]string{"high": "[m1 m3]", "eu": "[m0 m3]", "tagged": "[m1 m4]"}
		counts := map[string]int{"high": 2, "eu": 2, "tagged": 2}
		for _, sub := range []string{"high", "eu", "tagged"} {
			msgs := drain(t, e.subReceiver(t, tp, sub, nil), counts[sub])
			if got := fmt.Sprint(bodies(msgs)); got != want[sub] {
				t.Errorf("subscription %s got %v, want %v", sub, got, want[sub])
			}
			for _, m := range msgs {
				switch sub {
				case "tagged":
					if m.ApplicationProperties["routed"] != "yes" {
						t.Errorf("tagged copy of %s: routed=%v", m.Body, m.ApplicationProperties["routed"])
					}
					if _, ok := m.ApplicationProperties["secret"]; ok {
						t.Errorf("tagged copy of %s still has the removed property", m.Body)
					}
				default:
					if _, ok := m.ApplicationProperties["routed"]; ok || m.ApplicationProperties["secret"] != "x" {
						t.Errorf("%s copy of %s was changed by another subscription's action: %v subject %v", sub, m.Body, m.ApplicationProperties, deref(m.Subject))
					}
				}
			}
		}
	})

	// S-TOP-1: rules apply at send time: a rule added later does not pull in messages
	// sent before it, and a topic with no matching subscription accepts and drops sends.
	t.Run("RulesApplyAtSendTime", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "sendtime", nil, "s")
		e.replaceRules(t, tp, "s", admin.RuleProperties{Name: "none", Filter: &admin.FalseFilter{}})
		s := e.sender(t, tp)
		send(t, s, body("before"))
		if _, err := e.admin.CreateRule(testCtx(t), tp, "s", &admin.CreateRuleOptions{Name: to.Ptr("all"), Filter: &admin.TrueFilter{}}); err != nil {
			t.Fatal(err)
		}
		send(t, s, body("after"))
		msgs := drain(t, e.subReceiver(t, tp, "s", nil), 1)
		if string(msgs[0].Body) != "after" {
			t.Fatalf("got %q", msgs[0].Body)
		}
	})

	// S-TTL-1: a subscription copy expires at EnqueuedTime + min(message TTL,
	// subscription default, topic default).
	t.Run("SubscriptionTTL", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "subttl", &admin.TopicProperties{DefaultMessageTimeToLive: to.Ptr("PT40S")})
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "short", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{DefaultMessageTimeToLive: to.Ptr("PT20S")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "long", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{DefaultMessageTimeToLive: to.Ptr("PT1H")}}); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, tp), &azservicebus.Message{Body: []byte("x"), TimeToLive: to.Ptr(time.Hour)})
		for sub, want := range map[string]time.Duration{"short": 20 * time.Second, "long": 40 * time.Second} {
			m := drain(t, e.subReceiver(t, tp, sub, nil), 1)[0]
			if got := m.ExpiresAt.Sub(*m.EnqueuedTime); got != want {
				t.Errorf("subscription %s: effective TTL %v, want %v", sub, got, want)
			}
		}
	})

	// S-ENT-1, S-DLQ-1, S-LOCK-6: a subscription has its own dead-letter sub-queue.
	t.Run("SubscriptionDLQ", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "subdlq", nil, "a", "b")
		send(t, e.sender(t, tp), body("x"))
		ra := e.subReceiver(t, tp, "a", nil)
		m := receiveOne(t, ra, 10*time.Second)
		if err := ra.DeadLetterMessage(testCtx(t), m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("why")}); err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, e.subReceiver(t, tp, "a", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}), 10*time.Second)
		if string(d.Body) != "x" || deref(d.DeadLetterReason) != "why" {
			t.Fatalf("subscription DLQ got %q reason %v", d.Body, deref(d.DeadLetterReason))
		}
		expectNothing(t, e.subReceiver(t, tp, "b", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}), 500*time.Millisecond)
		drain(t, e.subReceiver(t, tp, "b", nil), 1)
	})

	// S-SES-1, S-SES-2, S-TOP-1: session-enabled subscriptions.
	t.Run("SessionSubscription", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "subsess", nil)
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "s", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{RequiresSession: to.Ptr(true)}}); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, tp), sessMsg("x", "1"), sessMsg("y", "2"), sessMsg("x", "3"))
		r, err := e.c.AcceptSessionForSubscription(testCtx(t), tp, "s", "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		msgs := receiveN(t, r, 2, 10*time.Second)
		if fmt.Sprint(bodies(msgs)) != "[1 3]" {
			t.Fatalf("session x got %v", bodies(msgs))
		}
		next, err := e.c.AcceptNextSessionForSubscription(testCtx(t), tp, "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close(context.Background())
		if next.SessionID() != "y" {
			t.Fatalf("accept-next got %q", next.SessionID())
		}
		var ids []string
		pager := e.c.NewListSessionsForSubscriptionPager(tp, "s", nil)
		for pager.More() {
			page, err := pager.NextPage(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, page.Sessions...)
		}
		slices.Sort(ids)
		if fmt.Sprint(ids) != "[x y]" {
			t.Fatalf("sessions %v", ids)
		}
	})

	// S-SCH-1 on a topic: a scheduled message reaches the subscriptions at its time, and
	// cancelling removes it from every subscription.
	t.Run("ScheduleOnTopic", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "tsched", nil, "a", "b")
		s := e.sender(t, tp)
		at := time.Now().Add(3 * time.Second)
		seqs, err := s.ScheduleMessages(testCtx(t), []*azservicebus.Message{body("keep"), body("cancel")}, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CancelScheduledMessages(testCtx(t), seqs[1:], nil); err != nil {
			t.Fatal(err)
		}
		for _, sub := range []string{"a", "b"} {
			r := e.subReceiver(t, tp, sub, nil)
			m := receiveOne(t, r, 10*time.Second)
			if string(m.Body) != "keep" || time.Now().Before(at) {
				t.Fatalf("%s got %q at %v (scheduled %v)", sub, m.Body, time.Now(), at)
			}
			expectNothing(t, r, 500*time.Millisecond)
		}
	})
	// S-TOP-1: a subscription created with a DefaultRule starts with exactly that rule;
	// a filter that fails to evaluate sends the copy to the subscription's DLQ with reason
	// FilterEvaluationException when EnableDeadLetteringOnFilterEvaluationExceptions is set.
	t.Run("DefaultRuleAndFilterErrors", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "defrule", nil)
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "eu", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{DefaultRule: &admin.RuleProperties{Name: "onlyeu",
				Filter: &admin.SQLFilter{Expression: "region = 'eu'"}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "div", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{
				EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(true),
				DefaultRule: &admin.RuleProperties{Name: "ratio", Filter: &admin.SQLFilter{Expression: "10 / n > 1"}}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := e.admin.GetRule(testCtx(t), tp, "eu", "$Default", nil); err != nil || r != nil {
			t.Errorf("subscription created with a DefaultRule also has $Default (%v, %v)", r, err)
		}
		if r, err := e.admin.GetRule(testCtx(t), tp, "eu", "onlyeu", nil); err != nil || r == nil {
			t.Fatalf("rule onlyeu: %v, %v", r, err)
		}
		s := e.sender(t, tp)
		for _, m := range []struct {
			b      string
			region string
			n      int64
		}{{"eu-5", "eu", 5}, {"us-2", "us", 2}, {"eu-0", "eu", 0}} {
			send(t, s, &azservicebus.Message{Body: []byte(m.b), ApplicationProperties: map[string]any{"region": m.region, "n": m.n}})
		}
		if got := fmt.Sprint(bodies(drain(t, e.subReceiver(t, tp, "eu", nil), 2))); got != "[eu-5 eu-0]" {
			t.Errorf("eu got %v", got)
		}
		if got := fmt.Sprint(bodies(drain(t, e.subReceiver(t, tp, "div", nil), 2))); got != "[eu-5 us-2]" {
			t.Errorf("div got %v", got)
		}
		d := drain(t, e.subReceiver(t, tp, "div", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}), 1)[0]
		if string(d.Body) != "eu-0" || deref(d.DeadLetterReason) != "FilterEvaluationException" {
			t.Errorf("div DLQ got %q reason %v", d.Body, deref(d.DeadLetterReason))
		}
	})

	// S-DLQ-1, S-ENT-1: the dead-letter sub-queue of a session-enabled subscription is
	// received without sessions; S-LOCK-5 in a session: MaxDeliveryCount applies.
	t.Run("SessionDLQ", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "sessdlq", nil)
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "s", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{RequiresSession: to.Ptr(true), MaxDeliveryCount: to.Ptr[int32](2)}}); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, tp), sessMsg("x", "poison"), sessMsg("x", "bad"))
		r, err := e.c.AcceptSessionForSubscription(testCtx(t), tp, "s", "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		for i := 1; i <= 2; i++ {
			m := receiveOne(t, r, 10*time.Second)
			if string(m.Body) != "poison" || m.DeliveryCount != uint32(i) {
				t.Fatalf("delivery %d: %q count %d", i, m.Body, m.DeliveryCount)
			}
			if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "bad" {
			t.Fatalf("after max deliveries got %q", m.Body)
		}
		if err := r.DeadLetterMessage(testCtx(t), m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("manual")}); err != nil {
			t.Fatal(err)
		}
		ds := drain(t, e.subReceiver(t, tp, "s", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}), 2)
		if deref(ds[0].DeadLetterReason) != "MaxDeliveryCountExceeded" || deref(ds[1].DeadLetterReason) != "manual" {
			t.Errorf("DLQ reasons %v, %v", deref(ds[0].DeadLetterReason), deref(ds[1].DeadLetterReason))
		}
		if deref(ds[0].SessionID) != "x" {
			t.Errorf("dead-lettered session message lost its SessionID: %v", deref(ds[0].SessionID))
		}
	})
	// S-TOP-1: SQL filters see system properties and application properties of every
	// wire type as sent (int32, int64, float64, bool, string, timestamp).
	t.Run("SQLFilterTypes", func(t *testing.T) {
		t.Parallel()
		filters := map[string]string{
			"i32":      "small = 7",
			"i64gt":    "big > 4000000000",
			"dbl":      "ratio > 0.2 AND ratio < 0.3",
			"flag":     "flag = TRUE",
			"in":       "color IN ('red', 'blue')",
			"like":     "name LIKE 'ab\\_%' ESCAPE '\\'",
			"exists":   "EXISTS(small) AND NOT EXISTS(missing)",
			"isnull":   "missing IS NULL AND sys.ReplyTo IS NULL",
			"sysid":    "sys.MessageId = 'mid' AND sys.CorrelationId = 'cid' AND sys.To = 'dest' AND sys.ContentType = 'ct'",
			"arith":    "small * 2 + 1 = 15 AND big % 10 = 0",
			"notmatch": "color = 'green' OR small > 100",
		}
		subs := make([]string, 0, len(filters))
		for sub := range filters {
			subs = append(subs, sub)
		}
		tp := e.topic(t, "sqltypes", nil, subs...)
		for sub, f := range filters {
			e.replaceRules(t, tp, sub, admin.RuleProperties{Name: "f", Filter: &admin.SQLFilter{Expression: f}})
		}
		send(t, e.sender(t, tp), &azservicebus.Message{Body: []byte("m"), MessageID: to.Ptr("mid"), CorrelationID: to.Ptr("cid"),
			To: to.Ptr("dest"), ContentType: to.Ptr("ct"), ApplicationProperties: map[string]any{
				"small": int32(7), "big": int64(5_000_000_000), "ratio": 0.25, "flag": true,
				"color": "blue", "name": "ab_cd", "when": time.Now()}})
		for _, sub := range subs {
			want := 1
			if sub == "notmatch" {
				want = 0
			}
			got := receiveUpTo(t, e.subReceiver(t, tp, sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}), 1, 2*time.Second)
			if len(got) != want {
				t.Errorf("filter %q (%s): %d copies, want %d", filters[sub], sub, len(got), want)
			}
		}
	})
	// S-TOP-1: a rule action that SETs system properties (sys.Label = Subject,
	// sys.CorrelationId) changes that subscription's copy only.
	t.Run("ActionSetsSystemProperties", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "sysset", nil, "s", "plain")
		e.replaceRules(t, tp, "s", admin.RuleProperties{Name: "set",
			Filter: &admin.TrueFilter{},
			Action: &admin.SQLAction{Expression: "SET sys.Label = 'changed'; SET sys.CorrelationId = 'c2'; SET user.tag = 'yes'"}})
		send(t, e.sender(t, tp), &azservicebus.Message{Body: []byte("x"), Subject: to.Ptr("orig"), CorrelationID: to.Ptr("c1")})
		m := drain(t, e.subReceiver(t, tp, "s", nil), 1)[0]
		if m.ApplicationProperties["tag"] != "yes" {
			t.Errorf("application property not set: %v", m.ApplicationProperties)
		}
		if deref(m.Subject) != "changed" || deref(m.CorrelationID) != "c2" || string(m.Body) != "x" {
			t.Errorf("copy has Subject %v CorrelationID %v body %q, want changed / c2 / x", deref(m.Subject), deref(m.CorrelationID), m.Body)
		}
		p := drain(t, e.subReceiver(t, tp, "plain", nil), 1)[0]
		if deref(p.Subject) != "orig" || deref(p.CorrelationID) != "c1" {
			t.Errorf("other subscription's copy changed: Subject %v CorrelationID %v", deref(p.Subject), deref(p.CorrelationID))
		}
	})

	// S-LOCK-7, S-LOCK-11 on a subscription: peek from a sequence number, defer and
	// receive by sequence number.
	t.Run("SubscriptionDeferAndPeek", func(t *testing.T) {
		t.Parallel()
		tp := e.topic(t, "subdefer", nil, "s")
		send(t, e.sender(t, tp), body("a"), body("b"), body("c"))
		r := e.subReceiver(t, tp, "s", nil)
		p := peekAll(t, r)
		from := *p[1].SequenceNumber
		p2, err := r.PeekMessages(testCtx(t), 5, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil || fmt.Sprint(bodies(p2)) != "[b c]" {
			t.Fatalf("peek from: %v %v", bodies(p2), err)
		}
		m := receiveOne(t, r, 10*time.Second)
		if err := r.DeferMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		ds, err := r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err != nil || len(ds) != 1 {
			t.Fatalf("deferred: %v %d", err, len(ds))
		}
		if err := r.CompleteMessage(testCtx(t), ds[0], nil); err != nil {
			t.Fatal(err)
		}
	})
	// S-FWD-1: ForwardTo moves each message into another entity (here a topic's
	// subscription forwards to a queue), and ForwardDeadLetteredMessagesTo moves
	// dead-lettered messages, which then carry DeadLetterSource.
	t.Run("Forwarding", func(t *testing.T) {
		t.Parallel()
		target := e.queue(t, "fwdtarget", nil)
		dlTarget := e.queue(t, "fwddl", nil)
		src := e.queue(t, "fwdsrc", &admin.QueueProperties{ForwardDeadLetteredMessagesTo: to.Ptr(dlTarget)})
		tp := e.topic(t, "fwdtopic", nil)
		if _, err := e.admin.CreateSubscription(testCtx(t), tp, "fwd", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr(target)}}); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, tp), &azservicebus.Message{Body: []byte("via-topic"), ApplicationProperties: map[string]any{"k": int64(1)}})
		if got := receiveUpTo(t, e.receiver(t, target, nil), 1, 5*time.Second); len(got) != 1 {
			left := receiveUpTo(t, e.subReceiver(t, tp, "fwd", nil), 1, 2*time.Second)
			t.Errorf("ForwardTo: nothing arrived in the target queue; %d message(s) stayed in the subscription", len(left))
		}

		send(t, e.sender(t, src), body("doomed"))
		r := e.receiver(t, src, nil)
		if err := r.DeadLetterMessage(testCtx(t), receiveOne(t, r, 10*time.Second), &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad")}); err != nil {
			t.Fatal(err)
		}
		got := receiveUpTo(t, e.receiver(t, dlTarget, nil), 1, 5*time.Second)
		if len(got) != 1 {
			left := receiveUpTo(t, e.dlq(t, src), 1, 2*time.Second)
			t.Fatalf("ForwardDeadLetteredMessagesTo: nothing arrived in the target; %d message(s) in the source's own DLQ", len(left))
		}
		d := got[0]
		if string(d.Body) != "doomed" || deref(d.DeadLetterReason) != "bad" {
			t.Fatalf("forwarded dead letter %q reason %v", d.Body, deref(d.DeadLetterReason))
		}
		if d.DeadLetterSource == nil || !strings.EqualFold(*d.DeadLetterSource, src) {
			t.Errorf("DeadLetterSource = %v, want %q", deref(d.DeadLetterSource), src)
		}
		expectNothing(t, e.dlq(t, src), 500*time.Millisecond)
	})
}
