package admin

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// Request bodies come from the network: parsing never panics.
func FuzzParseDescription(f *testing.F) {
	f.Add(`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><LockDuration>PT45S</LockDuration><MaxDeliveryCount>3</MaxDeliveryCount><EnablePartitioning>true</EnablePartitioning><AuthorizationRules><AuthorizationRule><KeyName>k</KeyName><Rights><AccessRights>Listen</AccessRights></Rights></AuthorizationRule></AuthorizationRules></QueueDescription></content></entry>`)
	f.Add(`<RuleDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter i:type="CorrelationFilter"><Label>x</Label><Properties><KeyValueOfstringanyType><Key>k</Key><Value i:type="d:dateTime">2026-01-01T00:00:00Z</Value></KeyValueOfstringanyType></Properties></Filter><Action i:type="SqlRuleAction"><SqlExpression>SET a = 1</SqlExpression></Action><Name>r</Name></RuleDescription>`)
	f.Add(`<SubscriptionDescription><LockDuration>P1D</LockDuration><DefaultRuleDescription><Filter i:type="SqlFilter"><SqlExpression>1=1</SqlExpression></Filter></DefaultRuleDescription></SubscriptionDescription>`)
	f.Fuzz(func(t *testing.T, body string) {
		root, err := parseXML(strings.NewReader(body))
		if err != nil {
			return
		}
		d := root
		if root.name.Local == "entry" {
			d = root.child("content").firstElement()
		}
		if d == nil {
			return
		}
		_, _ = parseQueue(d, meta.DefaultQueueProperties(), 16)
		_, _ = parseTopic(d, meta.DefaultTopicProperties(), 16)
		_, _ = parseSubscription(d, meta.DefaultSubscriptionProperties())
		if sp, err := parseRule(d); err == nil {
			_ = meta.ValidateRule(sp)
			w := &xmlWriter{}
			writeRule(w, meta.Rule{Spec: sp})
			if _, err := parseXML(strings.NewReader(w.String())); err != nil {
				t.Fatalf("wrote unparsable XML %q: %v", w.String(), err)
			}
		}
	})
}

func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		path string
		want route
	}{
		{"/q1", route{kind: routeEntity, entity: "q1"}},
		{"/a/b/c", route{kind: routeEntity, entity: "a/b/c"}},
		{"/$namespaceinfo", route{kind: routeNamespace}},
		{"/$Resources/Queues", route{kind: routeListQueues}},
		{"/$resources/topics", route{kind: routeListTopics}},
		{"/t/Subscriptions", route{kind: routeListSubs, entity: "t"}},
		{"/a/b/subscriptions/", route{kind: routeListSubs, entity: "a/b"}},
		{"/t/Subscriptions/s", route{kind: routeSub, entity: "t", sub: "s"}},
		{"/t/Subscriptions/s/Rules/", route{kind: routeListRules, entity: "t", sub: "s"}},
		{"/t/Subscriptions/s/Rules", route{kind: routeListRules, entity: "t", sub: "s"}},
		{"/t/Subscriptions/s/Rules/$Default", route{kind: routeRule, entity: "t", sub: "s", rule: "$Default"}},
	} {
		got, err := parseRoute(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
		}
	}
	for _, p := range []string{"/", "/t/Subscriptions/s/Other/x", "/t/Subscriptions/s/Rules/r/x"} {
		if _, err := parseRoute(p); err == nil {
			t.Errorf("parseRoute(%q) accepted", p)
		}
	}
}

func TestResourcePath(t *testing.T) {
	for _, tc := range []struct{ sr, want string }{
		{"https%3a%2f%2f127.0.0.1%3a5672%2fq1%3fapi-version%3d2024-05", "q1"},
		{"https%3a%2f%2fns%2f%24resources%2fqueues%3f%2524top%3d2", "$resources/queues"},
		{"127.0.0.1%3a5672", ""},
		{"sb%3a%2f%2fns%2fT%2fSubscriptions%2fS", "t/subscriptions/s"},
	} {
		if got := resourcePath(tc.sr); got != tc.want {
			t.Errorf("resourcePath(%q) = %q, want %q", tc.sr, got, tc.want)
		}
	}
	if !covers("", "/x") || !covers("t", "/T/Subscriptions/s") || covers("t", "/t2") || covers("a/b", "/a") {
		t.Error("covers")
	}
}

func TestAuthorize(t *testing.T) {
	s := meta.New()
	for _, c := range []meta.Command{
		&meta.PutSASKey{Key: meta.SASKey{Name: "root", PrimaryKey: "p1", SecondaryKey: "s1", Rights: meta.RightManage | meta.RightSend | meta.RightListen}},
		&meta.PutSASKey{Key: meta.SASKey{Name: "send", PrimaryKey: "p2", Rights: meta.RightSend}},
	} {
		if err := s.Apply(&meta.Entry{Cmd: c}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1_800_000_000, 0)
	tok := func(uri, skn, key string, se int64, escape func(string) string) string {
		sr := strings.ToLower(url.QueryEscape(uri))
		ses := strconv.FormatInt(se, 10)
		return "SharedAccessSignature sr=" + sr + "&sig=" + escape(signature(key, sr, ses)) + "&se=" + ses + "&skn=" + skn
	}
	later := now.Unix() + 60
	for _, tc := range []struct {
		name, header, path, want string
	}{
		{"primary", tok("https://h:1/q1?api-version=1", "root", "p1", later, url.QueryEscape), "/q1", ""},
		{"secondary", tok("https://h:1/q1", "ROOT", "s1", later, url.QueryEscape), "/q1", ""},
		{"raw sig", tok("https://h:1/q1", "root", "p1", later, func(s string) string { return s }), "/q1", ""},
		{"namespace-wide sr", tok("h:1", "root", "p1", later, url.QueryEscape), "/t/Subscriptions/s", ""},
		{"prefix sr", tok("sb://h/T", "root", "p1", later, url.QueryEscape), "/t/Subscriptions/s", ""},
		{"other entity", tok("https://h/q1", "root", "p1", later, url.QueryEscape), "/q2", "InvalidAudience"},
		{"not a segment prefix", tok("https://h/q", "root", "p1", later, url.QueryEscape), "/q1", "InvalidAudience"},
		{"expired", tok("https://h/q1", "root", "p1", now.Unix()-1, url.QueryEscape), "/q1", "ExpiredToken"},
		{"wrong key", tok("https://h/q1", "root", "nope", later, url.QueryEscape), "/q1", "InvalidSignature"},
		{"unknown key", tok("https://h/q1", "who", "p1", later, url.QueryEscape), "/q1", "not known"},
		{"no manage", tok("https://h/q1", "send", "p2", later, url.QueryEscape), "/q1", "Manage"},
		{"missing", "", "/q1", "missing Authorization"},
		{"not SAS", "Bearer abc", "/q1", "MalformedToken"},
		{"no skn", "SharedAccessSignature sr=a&sig=b&se=1", "/q1", "MalformedToken"},
	} {
		err := authorize(tc.header, now, s, tc.path, "q1")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}
