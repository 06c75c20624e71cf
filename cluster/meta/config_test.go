package meta

import (
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

func loadInto(t *testing.T, data []byte) (*State, *EmulatorConfig, []string) {
	t.Helper()
	cfg, warns, err := LoadEmulatorConfig(data)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	s := New()
	for i, c := range cfg.Plan(s) {
		if err := s.Apply(&Entry{Now: int64(i + 1), Cmd: c}); err != nil {
			t.Fatalf("apply %s: %v", c.Op(), err)
		}
	}
	return s, cfg, warns
}

// The official emulator's own sample loads unchanged (comments included).
func TestLoadEmulatorSampleConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/emulator/Config.json")
	if err != nil {
		t.Fatal(err)
	}
	s, cfg, warns := loadInto(t, data)
	if len(warns) != 0 {
		t.Errorf("warnings: %q", warns)
	}
	if cfg.Namespace != "sbemulatorns" || s.Namespace().Name != "sbemulatorns" || cfg.LoggingType != "File" {
		t.Fatalf("namespace %q logging %q", cfg.Namespace, cfg.LoggingType)
	}
	q, ok := s.Queue("queue.1")
	if !ok || q.Properties.MaxDeliveryCount != 3 || q.Properties.LockDuration != time.Minute ||
		q.Properties.DefaultMessageTimeToLive != time.Hour || q.Properties.DuplicateDetectionHistoryTimeWindow != 20*time.Second {
		t.Fatalf("queue.1: %+v", q)
	}
	subs, ok := s.Subscriptions("topic.1")
	if !ok || len(subs) != 4 {
		t.Fatalf("subscriptions: %+v", subs)
	}
	if r := subs[0].Rules; len(r) != 1 || r[0].Spec.Name != "app-prop-filter-1" || r[0].Spec.Filter.Correlation.ContentType != "application/json" {
		t.Fatalf("subscription.1 rules: %+v", r)
	}
	if r := subs[1].Rules; len(r) != 1 || r[0].Spec.Filter.Correlation.Properties[0] != (rule.Property{Key: "prop1", Value: rule.Value{Kind: rule.KindString, S: "value1"}}) {
		t.Fatalf("subscription.2 rules: %+v", r)
	}
	// S-TOP-1: no Rules -> $Default.
	if r := subs[2].Rules; len(r) != 1 || r[0].Spec.Name != "$Default" || r[0].Spec.Filter.Kind != rule.FilterTrue {
		t.Fatalf("subscription.3 rules: %+v", r)
	}
	if r := subs[3].Rules; len(r) != 1 || r[0].Spec.Filter.SQL != "sys.MessageId = '123456' AND userProp1 = 'value1'" ||
		r[0].Spec.Action.SQL != "SET sys.To = 'Entity'" {
		t.Fatalf("subscription.4 rules: %+v", r)
	}
}

// Every field of Config-schema.json, with the values the sample sets.
func TestLoadSampleConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/Config.json")
	if err != nil {
		t.Fatal(err)
	}
	s, cfg, warns := loadInto(t, data)
	want := []string{"UserConfig.Namespaces[0].Topics[0].Properties.Colour: unknown field, ignored"}
	if !reflect.DeepEqual(warns, want) {
		t.Errorf("warnings %q, want %q", warns, want)
	}
	if cfg.LoggingType != "File,Console" {
		t.Errorf("logging %q", cfg.LoggingType)
	}

	o, _ := s.Queue("orders")
	wantQ := DefaultQueueProperties()
	wantQ.DeadLetteringOnMessageExpiration, wantQ.DefaultMessageTimeToLive = true, time.Hour
	wantQ.DuplicateDetectionHistoryTimeWindow, wantQ.ForwardDeadLetteredMessagesTo = 5*time.Minute, "orders.dead"
	wantQ.LockDuration, wantQ.MaxDeliveryCount = 45*time.Second, 7
	wantQ.RequiresDuplicateDetection, wantQ.RequiresSession = true, true
	if !reflect.DeepEqual(o.Properties, wantQ) {
		t.Errorf("orders:\n got %+v\nwant %+v", o.Properties, wantQ)
	}
	if d, _ := s.Queue("orders.dead"); d.Properties.ForwardTo != "audit/events" {
		t.Errorf("orders.dead: %+v", d.Properties)
	}
	if m, _ := s.Queue("minimal"); !reflect.DeepEqual(m.Properties, DefaultQueueProperties()) {
		t.Errorf("minimal: %+v", m.Properties)
	}

	tp, ok := s.Topic("audit/events")
	if !ok || tp.Properties.DefaultMessageTimeToLive != 48*time.Hour ||
		tp.Properties.DuplicateDetectionHistoryTimeWindow != 20*time.Second || !tp.Properties.RequiresDuplicateDetection {
		t.Errorf("topic: %+v", tp)
	}
	all, _ := s.Subscription("audit/events", "all")
	wantS := DefaultSubscriptionProperties()
	wantS.DeadLetteringOnMessageExpiration, wantS.DefaultMessageTimeToLive = true, 30*time.Minute
	wantS.LockDuration, wantS.MaxDeliveryCount = 2*time.Minute, 5
	wantS.ForwardDeadLetteredMessagesTo, wantS.ForwardTo, wantS.RequiresSession = "minimal", "orders", true
	if !reflect.DeepEqual(all.Properties, wantS) {
		t.Errorf("all:\n got %+v\nwant %+v", all.Properties, wantS)
	}
	corr, _ := s.Subscription("audit/events", "correlated")
	if len(corr.Rules) != 2 {
		t.Fatalf("correlated rules: %+v", corr.Rules)
	}
	wantC := rule.Correlation{ContentType: "application/json", CorrelationID: "id1", Subject: "subject1",
		MessageID: "msgid1", ReplyTo: "someQueue", ReplyToSessionID: "sessionId", SessionID: "session1", To: "xyz",
		Properties: []rule.Property{ // sorted by key
			{Key: "count", Value: rule.Value{Kind: rule.KindLong, N: 3}},
			{Key: "flag", Value: rule.Value{Kind: rule.KindBool, N: 1}},
			{Key: "prop1", Value: rule.Value{Kind: rule.KindString, S: "value1"}},
			{Key: "ratio", Value: rule.Value{Kind: rule.KindDouble, N: math.Float64bits(0.5)}},
		}}
	if got := corr.Rules[0].Spec; got.Name != "every-field" || got.Filter.Kind != rule.FilterCorrelation || !reflect.DeepEqual(got.Filter.Correlation, wantC) {
		t.Errorf("every-field:\n got %+v\nwant %+v", got.Filter.Correlation, wantC)
	}
	if got := corr.Rules[1].Spec.Filter.Correlation.To; got != "http://example.com/a//b" {
		t.Errorf("comment stripping touched a string: %q", got)
	}
	sq, _ := s.Subscription("audit/events", "sql")
	if r := sq.Rules[0].Spec; r.Name != "sql-filter-1" || r.Filter.Kind != rule.FilterSQL ||
		r.Filter.SQL != "sys.MessageId = '123456' AND userProp1 = 'value1'" || r.Action.SQL != "SET sys.To = 'Entity'" {
		t.Errorf("sql rule: %+v", r)
	}

	// Plan leaves existing entities alone and creates only what is missing.
	if p := cfg.Plan(s); len(p) != 0 {
		t.Errorf("plan on a loaded state: %d commands", len(p))
	}
	if err := s.Apply(&Entry{Now: 100, Cmd: &DeleteSubscription{Topic: "audit/events", Name: "sql"}}); err != nil {
		t.Fatal(err)
	}
	if p := cfg.Plan(s); len(p) != 1 || p[0].(*CreateSubscription).Name != "sql" {
		t.Errorf("plan after a delete: %+v", p)
	}
}

func TestLoadConfigWithoutSQL(t *testing.T) {
	s, cfg, warns := loadInto(t, []byte("\xef\xbb\xbf"+`{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Name":"q"}],
		"Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Correlation",
		"CorrelationFilter":{"Label":"x"},"SqlFilter":{"SqlExpression":"1=1"}}}]}]}]}],"Logging":{"Type":"Console"},"Extra":1}}`))
	if cfg.Namespace != "ns" || s.Kind("q") != KindQueue || s.Kind("t") != KindTopic {
		t.Fatal("entities missing")
	}
	want := []string{"UserConfig.Extra: unknown field, ignored",
		"UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.SqlFilter: ignored because FilterType is Correlation"}
	if !reflect.DeepEqual(warns, want) {
		t.Fatalf("warnings %q", warns)
	}
	r, _ := s.Rule("t", "s", "r")
	if r.Spec.Filter.Correlation.Subject != "x" {
		t.Fatalf("%+v", r)
	}
}

func TestStripJSONComments(t *testing.T) {
	in := "{\"a\": \"x // not a comment /* nor this */\", // comment\n \"b\": \"q\\\"//\", /* block\n */ \"c\": [1,2,],}"
	got := string(stripJSONComments([]byte(in)))
	want := "{\"a\": \"x // not a comment /* nor this */\",           \n \"b\": \"q\\\"//\",         \n    \"c\": [1,2 ] }"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	q := func(props string) string {
		return `{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Name":"a"},{"Name":"b"},{"Name":"q","Properties":{` + props + `}}],"Topics":[]}],"Logging":{"Type":"File"}}}`
	}
	const qp = "UserConfig.Namespaces[0].Queues[2].Properties."
	for _, tc := range []struct{ in, want string }{
		{q(`"LockDuration":"PT1S"`), qp + `LockDuration: "PT1S" is below the minimum 5s`},
		{q(`"LockDuration":"PT10M"`), qp + `LockDuration: "PT10M" is above the maximum 5m`},
		{q(`"LockDuration":"1 minute"`), qp + `LockDuration: "1 minute" is not an ISO 8601 duration (must start with P)`},
		{q(`"LockDuration":60`), qp + `LockDuration: expected a string, got 60`},
		{q(`"MaxDeliveryCount":0`), qp + `MaxDeliveryCount: 0 is below the minimum 1`},
		{q(`"MaxDeliveryCount":"3"`), qp + `MaxDeliveryCount: expected an integer, got "3"`},
		{q(`"MaxDeliveryCount":1.5`), qp + `MaxDeliveryCount: expected an integer, got 1.5`},
		{q(`"RequiresSession":"yes"`), qp + `RequiresSession: expected true or false, got "yes"`},
		{q(`"DuplicateDetectionHistoryTimeWindow":"PT5S"`), qp + `DuplicateDetectionHistoryTimeWindow: "PT5S" is below the minimum 20s`},
		{q(`"DefaultMessageTimeToLive":"PT0S"`), qp + `DefaultMessageTimeToLive: "PT0S" must be greater than zero`},
		{q(`"ForwardTo":"nowhere"`), qp + `ForwardTo: the target entity "nowhere" does not exist`},
		{q(`"Status":"Paused"`), qp + `Status: "Paused" is not one of Active, Disabled, SendDisabled, ReceiveDisabled`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Name":"a/"}]}]}}`, `UserConfig.Namespaces[0].Queues[0].Name: "a/" must start and end with a letter or digit`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Name":"a"},{"Name":"A"}]}]}}`, `UserConfig.Namespaces[0].Queues[1].Name: queue "a": meta: entity already exists (declared twice, names are case-insensitive)`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Properties":{}}]}]}}`, `UserConfig.Namespaces[0].Queues[0].Name: required`},
		{`{"UserConfig":{"Namespaces":[]}}`, `UserConfig.Namespaces: exactly one namespace is supported, got 0`},
		{`{"UserConfig":{"Namespaces":[{"Name":"a"},{"Name":"b"}]}}`, `UserConfig.Namespaces: exactly one namespace is supported, got 2`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns"}],"Logging":{"Type":"Syslog"}}}`, `UserConfig.Logging.Type: "Syslog" is not one of File, Console, File,Console, Console,File`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":{}}]}}`, `UserConfig.Namespaces[0].Queues: expected an array, got an object`},
		{`{}`, `UserConfig: required`},
		{`{"UserConfig": {"Namespaces": [}}`, `Config.json: line 1, column 33: invalid character '}' looking for beginning of value`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Properties":{"LockDuration":"PT1S"}}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Properties.LockDuration: "PT1S" is below the minimum 5s`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s/x"}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Name: "s/x" contains '/'; allowed are letters, digits, '.', '-' and '_'`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Regex"}}]}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.FilterType: "Regex" is not one of Correlation, Sql`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Correlation","CorrelationFilter":{}}}]}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.CorrelationFilter: a correlation filter must set at least one property`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Sql"}}]}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.SqlFilter: required when FilterType is Sql`},
		{`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Correlation","CorrelationFilter":{"Properties":{"k":[1]}}}}]}]}]}]}}`,
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.CorrelationFilter.Properties.k: expected a string, number or boolean, got an array`},
	} {
		_, _, err := LoadEmulatorConfig([]byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("input %s\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
	// Field errors are ValidationErrors where the bound comes from meta.
	_, _, err := LoadEmulatorConfig([]byte(q(`"LockDuration":"PT1S"`)))
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%v is not ErrInvalid", err)
	}
}

// SQL syntax errors name the rule's SqlExpression field.
func TestLoadConfigBadSQL(t *testing.T) {
	_, _, err := LoadEmulatorConfig([]byte(`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Sql","SqlFilter":{"SqlExpression":"a = = 1"}}}]}]}]}]}}`))
	if err == nil || !strings.HasPrefix(err.Error(), "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.SqlFilter.SqlExpression: ") {
		t.Fatalf("got %v", err)
	}
	_, _, err = LoadEmulatorConfig([]byte(`{"UserConfig":{"Namespaces":[{"Name":"ns","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Sql","SqlFilter":{"SqlExpression":"a = 1"},"Action":{"SqlExpression":"SET"}}}]}]}]}]}}`))
	if err == nil || !strings.HasPrefix(err.Error(), "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.Action.SqlExpression: ") {
		t.Fatalf("got %v", err)
	}
}

// The loader never panics, whatever the bytes.
func FuzzLoadEmulatorConfig(f *testing.F) {
	// Small seeds: Go's fuzzer crawls on multi-kilobyte seeds such as testdata/Config.json.
	f.Add([]byte(`{"UserConfig":{"Namespaces":[{"Name":"n","Queues":[{"Name":"q","Properties":{"ForwardTo":"t","MaxDeliveryCount":3}}],
"Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{"FilterType":"Sql","SqlFilter":{"SqlExpression":"a=1"},"Action":{"SqlExpression":"SET b=2"}}},
{"Name":"c","Properties":{"FilterType":"Correlation","CorrelationFilter":{"Label":"x","Properties":{"k":1.5}}}}]}]}]}],"Logging":{"Type":"File"}}} /* c */`))
	f.Add([]byte(`{"UserConfig":{"Namespaces":[{"Name":"n","Queues":[{"Name":"q","Properties":{"LockDuration":"PT1M"}}]}]}} // x`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, _, err := LoadEmulatorConfig(b)
		if err != nil {
			return
		}
		s := New()
		for _, c := range cfg.Plan(s) {
			if err := s.Apply(&Entry{Cmd: c}); err != nil {
				t.Fatalf("a validated config failed to apply: %v", err)
			}
		}
	})
}
