package meta

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

func apply(t *testing.T, s *State, now int64, c Command) {
	t.Helper()
	if err := s.Apply(&Entry{Now: now, Cmd: c}); err != nil {
		t.Fatalf("apply %s: %v", c.Op(), err)
	}
}

func applyErr(t *testing.T, s *State, c Command, want error) error {
	t.Helper()
	before := s.Digest()
	err := s.Apply(&Entry{Now: s.Now(), Cmd: c})
	if !errors.Is(err, want) {
		t.Fatalf("apply %s: got %v, want %v", c.Op(), err, want)
	}
	if after := s.Digest(); after != before {
		t.Fatalf("rejected %s changed the state", c.Op())
	}
	return err
}

func TestISODuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"PT30S", 30 * time.Second, "PT30S"},
		{"PT1M", time.Minute, "PT1M"},
		{"PT5M", 5 * time.Minute, "PT5M"},
		{"P14D", 14 * 24 * time.Hour, "P14D"},
		{"PT4H", 4 * time.Hour, "PT4H"},
		{"P1DT2H3M4.5S", 26*time.Hour + 3*time.Minute + 4500*time.Millisecond, "P1DT2H3M4.5S"},
		{"PT0.0000001S", 100 * time.Nanosecond, "PT0.0000001S"},
		{"PT0S", 0, "PT0S"},
		{"P1W", 7 * 24 * time.Hour, "P7D"},
		{"P1Y", 365 * 24 * time.Hour, "P365D"},
		{"PT90S", 90 * time.Second, "PT1M30S"},
		{NeverISO, Never, NeverISO},
		{"P99999999D", Never, NeverISO},
		{"P10675199DT2H48M5.4775807S", Never, NeverISO},
	} {
		got, err := ParseISODuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseISODuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if f := FormatISODuration(got); f != tc.out {
			t.Errorf("FormatISODuration(%v) = %q, want %q", got, f, tc.out)
		}
	}
	for _, bad := range []string{"", "P", "PT", "30S", "PT-1S", "P1H", "PT1D", "PT1.5M", "PT1S1S", "PTS", "P1DT", "1m", "P1M1M"} {
		if d, err := ParseISODuration(bad); err == nil {
			t.Errorf("ParseISODuration(%q) = %v, want an error", bad, d)
		}
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 261)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"q1", true}, {"a.b-c_d/e", true}, {"queue.1", true}, {strings.Repeat("a", 260), true},
		{"", false}, {long, false}, {"/a", false}, {"a/", false}, {".a", false}, {"a.", false},
		{"a//b", false}, {"a b", false}, {"a$b", false}, {"a/Subscriptions/b", false},
		{"a/subscriptions", false}, {"é", false}, {"a/./b", false},
		{"-start", false}, {"end-", false}, {"_q", false}, {"q_", false}, {"a-b_c.d", true}, {"1", true},
	} {
		err := ValidateEntityName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateEntityName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateEntityName(%q) error %v is not ErrInvalid", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"s1", true}, {"sub.1-x_y", true}, {strings.Repeat("s", 50), true},
		{"", false}, {strings.Repeat("s", 51), false}, {"a/b", false}, {"$x", false}, {"Subscriptions", false},
		{"-s", false}, {"s.", false}, {"_s", false}, {"s-1", true},
	} {
		if err := ValidateSubscriptionName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateSubscriptionName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if err := ValidateRuleName("$Default"); err != nil {
		t.Errorf("$Default: %v", err)
	}
	if err := ValidateRuleName("$Other"); err == nil {
		t.Error("$Other accepted")
	}
	for _, bad := range []string{"-r", "r-", "_r", ".r"} {
		if err := ValidateRuleName(bad); err == nil {
			t.Errorf("rule name %q accepted", bad)
		}
	}
}

// S-ENT-2: defaults.
func TestQueueDefaults(t *testing.T) {
	s := New()
	apply(t, s, 1000, &CreateQueue{Name: "q", Properties: DefaultQueueProperties()})
	q, ok := s.Queue("q")
	if !ok {
		t.Fatal("queue missing")
	}
	p := q.Properties
	if p.LockDuration != 60*time.Second || p.MaxDeliveryCount != 10 || p.DefaultMessageTimeToLive != Never ||
		p.DeadLetteringOnMessageExpiration || p.RequiresSession || p.RequiresDuplicateDetection ||
		p.DuplicateDetectionHistoryTimeWindow != 10*time.Minute || p.MaxSizeInMegabytes != 1024 ||
		p.MaxMessageSizeInKilobytes != 256 || p.AutoDeleteOnIdle != Never || p.PartitionCount != 1 ||
		p.Status != StatusActive {
		t.Fatalf("defaults: %+v", p)
	}
	if q.CreatedAt != 1000 || q.UpdatedAt != 1000 {
		t.Fatalf("times %d %d", q.CreatedAt, q.UpdatedAt)
	}
}

// S-ENT-2: bounds, with errors naming the field and the bound.
func TestQueueBounds(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*QueueProperties)
		want string
	}{
		{func(p *QueueProperties) { p.LockDuration = time.Second }, `LockDuration: "PT1S" is below the minimum 5s`},
		{func(p *QueueProperties) { p.LockDuration = 6 * time.Minute }, `LockDuration: "PT6M" is above the maximum 5m`},
		{func(p *QueueProperties) { p.MaxDeliveryCount = 0 }, `MaxDeliveryCount: 0 is below the minimum 1`},
		{func(p *QueueProperties) { p.DefaultMessageTimeToLive = 0 }, `DefaultMessageTimeToLive: "PT0S" must be greater than zero`},
		{func(p *QueueProperties) { p.DuplicateDetectionHistoryTimeWindow = 10 * time.Second }, `DuplicateDetectionHistoryTimeWindow: "PT10S" is below the minimum 20s`},
		{func(p *QueueProperties) { p.DuplicateDetectionHistoryTimeWindow = 8 * 24 * time.Hour }, `DuplicateDetectionHistoryTimeWindow: "P8D" is above the maximum 7d`},
		{func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 102401 }, `MaxMessageSizeInKilobytes: 102401 is above the maximum 102400`},
		{func(p *QueueProperties) { p.AutoDeleteOnIdle = time.Minute }, `AutoDeleteOnIdle: "PT1M" is below the minimum 5m`},
		{func(p *QueueProperties) { p.PartitionCount = 33 }, `PartitionCount: 33 is outside 1..32`},
		{func(p *QueueProperties) { p.MaxSizeInMegabytes = 0 }, `MaxSizeInMegabytes: 0 is outside 1..1048576`},
		{func(p *QueueProperties) { p.Status = 9 }, `Status: 9 is not a valid status`},
		{func(p *QueueProperties) { p.ForwardTo = "nope" }, `ForwardTo: the target entity "nope" does not exist`},
		{func(p *QueueProperties) { p.ForwardTo = "q" }, `ForwardTo: an entity cannot forward to itself`},
		{func(p *QueueProperties) { p.ForwardDeadLetteredMessagesTo = "a//b" }, `ForwardDeadLetteredMessagesTo.Name: "a//b" must not contain an empty segment ("//")`},
	} {
		s := New()
		p := DefaultQueueProperties()
		tc.mut(&p)
		c := &CreateQueue{Name: "q", Properties: p}
		// Bounds are checked before proposing; forward targets by Apply (state).
		err := ValidateCommand(c)
		if err == nil {
			err = applyErr(t, s, c, ErrInvalid)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || err.Error() != tc.want {
			t.Errorf("got %q, want %q", err, tc.want)
		}
	}
	// Bounds are inclusive.
	s := New()
	p := DefaultQueueProperties()
	p.LockDuration, p.DuplicateDetectionHistoryTimeWindow, p.MaxMessageSizeInKilobytes = 5*time.Second, 7*24*time.Hour, 102400
	p.AutoDeleteOnIdle, p.PartitionCount = 5*time.Minute, 32
	apply(t, s, 1, &CreateQueue{Name: "q", Properties: p})
	p.LockDuration = 5 * time.Minute
	p.DuplicateDetectionHistoryTimeWindow = 20 * time.Second
	apply(t, s, 2, &UpdateQueue{Name: "Q", Properties: p})
}

func TestCaseInsensitiveNamesSharedByQueuesAndTopics(t *testing.T) {
	s := New()
	apply(t, s, 1, &CreateQueue{Name: "Orders", Properties: DefaultQueueProperties()})
	applyErr(t, s, &CreateTopic{Name: "orders", Properties: DefaultTopicProperties()}, ErrExists)
	applyErr(t, s, &CreateQueue{Name: "ORDERS", Properties: DefaultQueueProperties()}, ErrExists)
	q, ok := s.Queue("oRdErS")
	if !ok || q.Name != "Orders" {
		t.Fatalf("lookup: %v %q", ok, q.Name)
	}
	if s.Kind("ORDERS") != KindQueue {
		t.Fatal("kind")
	}
	applyErr(t, s, &DeleteTopic{Name: "orders"}, ErrNotFound)
	apply(t, s, 2, &DeleteQueue{Name: "ORDERS"})
	apply(t, s, 3, &CreateTopic{Name: "orders", Properties: DefaultTopicProperties()})
	if s.Kind("Orders") != KindTopic {
		t.Fatal("topic not created after queue delete")
	}
}

// S-ENT-2: RequiresSession and RequiresDuplicateDetection are fixed at creation.
func TestFixedAtCreation(t *testing.T) {
	s := New()
	apply(t, s, 1, &CreateQueue{Name: "q", Properties: DefaultQueueProperties()})
	p := DefaultQueueProperties()
	p.RequiresSession = true
	err := applyErr(t, s, &UpdateQueue{Name: "q", Properties: p}, ErrInvalid)
	if !strings.HasPrefix(err.Error(), "RequiresSession: cannot be changed") {
		t.Fatalf("message %q", err)
	}
	p = DefaultQueueProperties()
	p.RequiresDuplicateDetection = true
	applyErr(t, s, &UpdateQueue{Name: "q", Properties: p}, ErrInvalid)
	p = DefaultQueueProperties()
	p.PartitionCount = 2
	applyErr(t, s, &UpdateQueue{Name: "q", Properties: p}, ErrInvalid)
	p = DefaultQueueProperties()
	p.LockDuration = 30 * time.Second
	apply(t, s, 5, &UpdateQueue{Name: "q", Properties: p})
	q, _ := s.Queue("q")
	if q.Properties.LockDuration != 30*time.Second || q.UpdatedAt != 5 || q.CreatedAt != 1 {
		t.Fatalf("%+v", q)
	}

	apply(t, s, 6, &CreateTopic{Name: "t", Properties: DefaultTopicProperties()})
	tp := DefaultTopicProperties()
	tp.RequiresDuplicateDetection = true
	applyErr(t, s, &UpdateTopic{Name: "t", Properties: tp}, ErrInvalid)
	apply(t, s, 7, &CreateSubscription{Topic: "t", Name: "s", Properties: DefaultSubscriptionProperties()})
	sp := DefaultSubscriptionProperties()
	sp.RequiresSession = true
	applyErr(t, s, &UpdateSubscription{Topic: "t", Name: "s", Properties: sp}, ErrInvalid)
	applyErr(t, s, &UpdateSubscription{Topic: "t", Name: "nope", Properties: sp}, ErrNotFound)
	applyErr(t, s, &UpdateQueue{Name: "nope", Properties: DefaultQueueProperties()}, ErrNotFound)
}

func TestSubscriptionsAndRules(t *testing.T) {
	s := New()
	apply(t, s, 1, &CreateTopic{Name: "T", Properties: DefaultTopicProperties()})
	applyErr(t, s, &CreateSubscription{Topic: "missing", Name: "s", Properties: DefaultSubscriptionProperties()}, ErrNotFound)
	apply(t, s, 2, &CreateSubscription{Topic: "t", Name: "S1", Properties: DefaultSubscriptionProperties()})
	applyErr(t, s, &CreateSubscription{Topic: "t", Name: "s1", Properties: DefaultSubscriptionProperties()}, ErrExists)

	// S-TOP-1: a new subscription starts with $Default = true filter.
	sub, ok := s.Subscription("T", "s1")
	if !ok || sub.Name != "S1" || sub.Topic != "T" || len(sub.Rules) != 1 ||
		sub.Rules[0].Spec.Name != "$Default" || sub.Rules[0].Spec.Filter.Kind != rule.FilterTrue {
		t.Fatalf("%+v", sub)
	}
	// Given rules replace $Default.
	corr := rule.Spec{Name: "c1", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation,
		Correlation: rule.Correlation{ContentType: "application/json",
			Properties: []rule.Property{{Key: "k", Value: rule.Value{Kind: rule.KindString, S: "v"}}}}}}
	apply(t, s, 3, &CreateSubscription{Topic: "t", Name: "s2", Properties: DefaultSubscriptionProperties(), Rules: []rule.Spec{corr}})
	sub, _ = s.Subscription("t", "s2")
	if len(sub.Rules) != 1 || !reflect.DeepEqual(sub.Rules[0].Spec, corr) || sub.Rules[0].CreatedAt != 3 {
		t.Fatalf("%+v", sub.Rules)
	}
	applyErr(t, s, &CreateSubscription{Topic: "t", Name: "s3", Properties: DefaultSubscriptionProperties(),
		Rules: []rule.Spec{corr, corr}}, ErrInvalid)
	if err := ValidateCommand(&CreateSubscription{Topic: "t", Name: "s3", Properties: DefaultSubscriptionProperties(),
		Rules: []rule.Spec{{Name: "empty", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation}}}}); err == nil ||
		err.Error() != "Rules[0].Filter: a correlation filter must set at least one property" {
		t.Fatalf("empty correlation filter: %v", err)
	}

	f := rule.Spec{Name: "f", Filter: rule.FilterSpec{Kind: rule.FilterFalse}}
	apply(t, s, 4, &CreateRule{Topic: "t", Subscription: "s1", Rule: f})
	applyErr(t, s, &CreateRule{Topic: "t", Subscription: "s1", Rule: rule.Spec{Name: "F"}}, ErrExists)
	applyErr(t, s, &CreateRule{Topic: "t", Subscription: "nope", Rule: f}, ErrNotFound)
	if err := ValidateCommand(&CreateRule{Topic: "t", Subscription: "s1", Rule: rule.Spec{Name: "bad/name"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad rule name: %v", err)
	}
	applyErr(t, s, &CreateRule{Topic: "t", Subscription: "s1", Rule: rule.Spec{}}, ErrInvalid)
	apply(t, s, 5, &UpdateRule{Topic: "t", Subscription: "s1", Rule: rule.Spec{Name: "F", Filter: rule.FilterSpec{Kind: rule.FilterTrue}}})
	r, ok := s.Rule("t", "S1", "f")
	if !ok || r.Spec.Name != "f" || r.Spec.Filter.Kind != rule.FilterTrue || r.CreatedAt != 4 {
		t.Fatalf("%+v", r)
	}
	applyErr(t, s, &UpdateRule{Topic: "t", Subscription: "s1", Rule: rule.Spec{Name: "zz"}}, ErrNotFound)
	apply(t, s, 6, &DeleteRule{Topic: "t", Subscription: "s1", Name: "$DEFAULT"})
	sub, _ = s.Subscription("t", "s1")
	if len(sub.Rules) != 1 || sub.Rules[0].Spec.Name != "f" {
		t.Fatalf("%+v", sub.Rules)
	}
	applyErr(t, s, &DeleteRule{Topic: "t", Subscription: "s1", Name: "$Default"}, ErrNotFound)

	// Copies: mutating a returned value does not change the state.
	sub.Rules[0].Spec.Name = "mutated"
	if r, _ := s.Rule("t", "s1", "f"); r.Spec.Name != "f" {
		t.Fatal("state aliased by a read")
	}

	subs, _ := s.Subscriptions("t")
	if len(subs) != 2 || subs[0].Name != "S1" || subs[1].Name != "s2" {
		t.Fatalf("%+v", subs)
	}
	apply(t, s, 7, &DeleteSubscription{Topic: "t", Name: "S2"})
	applyErr(t, s, &DeleteSubscription{Topic: "t", Name: "s2"}, ErrNotFound)

	// Deleting a topic deletes its subscriptions.
	apply(t, s, 8, &DeleteTopic{Name: "t"})
	apply(t, s, 9, &CreateTopic{Name: "t", Properties: DefaultTopicProperties()})
	if subs, ok := s.Subscriptions("t"); !ok || len(subs) != 0 {
		t.Fatalf("subscriptions survived their topic: %+v", subs)
	}
}

func TestSASKeys(t *testing.T) {
	s := New()
	k := SASKey{Name: "RootManageSharedAccessKey", PrimaryKey: "p", SecondaryKey: "s", Rights: RightManage | RightSend | RightListen}
	apply(t, s, 10, &PutSASKey{Key: k})
	k.PrimaryKey = "p2"
	apply(t, s, 20, &PutSASKey{Key: k})
	got, ok := s.SASKey("rootmanagesharedaccesskey")
	if !ok || got.PrimaryKey != "p2" || got.CreatedAt != 10 || got.ModifiedAt != 20 {
		t.Fatalf("%+v", got)
	}
	for _, k := range []SASKey{
		{Name: "x", PrimaryKey: "p", Rights: RightManage},
		{Name: "x", Rights: RightSend},
		{Name: "x y", PrimaryKey: "p", Rights: RightSend},
		{Name: "x", PrimaryKey: "p"},
	} {
		if err := ValidateCommand(&PutSASKey{Key: k}); !errors.Is(err, ErrInvalid) {
			t.Errorf("key %+v: %v", k, err)
		}
	}
	applyErr(t, s, &PutSASKey{Key: SASKey{PrimaryKey: "p", Rights: RightSend}}, ErrInvalid)
	apply(t, s, 21, &PutSASKey{Key: SASKey{Name: "sender", PrimaryKey: "p", Rights: RightSend}})
	if ks := s.SASKeys(); len(ks) != 2 || ks[0].Name != "RootManageSharedAccessKey" || ks[1].Name != "sender" {
		t.Fatalf("%+v", ks)
	}
	apply(t, s, 22, &DeleteSASKey{Name: "SENDER"})
	applyErr(t, s, &DeleteSASKey{Name: "sender"}, ErrNotFound)
	if RightManage.String() != "Manage" || (RightSend|RightListen|RightManage).String() != "Manage,Send,Listen" {
		t.Fatal("Right.String")
	}
}

func TestPlacementGroupIDs(t *testing.T) {
	s := New()
	p := DefaultQueueProperties()
	p.PartitionCount = 3
	apply(t, s, 1, &CreateQueue{Name: "a", Properties: p, Replicas: [][]string{{"n1"}, {"n2"}, {"n3"}}})
	tp := DefaultTopicProperties()
	tp.PartitionCount = 2
	apply(t, s, 2, &CreateTopic{Name: "b", Properties: tp})
	pa, _ := s.Placement("A")
	pb, _ := s.Placement("b")
	if ids(pa) != "1,2,3" || ids(pb) != "4,5" || pa.Partitions[1].Replicas[0] != "n2" || pb.Partitions[0].Replicas != nil {
		t.Fatalf("%+v %+v", pa, pb)
	}
	applyErr(t, s, &SetPlacement{Entity: "b", Replicas: [][]string{{"x"}}}, ErrInvalid)
	applyErr(t, s, &SetPlacement{Entity: "zz", Replicas: nil}, ErrNotFound)
	apply(t, s, 3, &SetPlacement{Entity: "B", Replicas: [][]string{{"n1", "n2"}, {"n3"}}})
	pb, _ = s.Placement("b")
	if ids(pb) != "4,5" || strings.Join(pb.Partitions[0].Replicas, ",") != "n1,n2" {
		t.Fatalf("%+v", pb)
	}
	var kept []string // a replica list Route handed out, kept past the call
	if !s.Route("B", func(name string, parts []Partition) { kept = parts[0].Replicas }) {
		t.Fatal("Route does not find b")
	}
	apply(t, s, 3, &SetPlacement{Entity: "b", Replicas: [][]string{{"n3", "n1"}, {"n2"}}})
	if strings.Join(kept, ",") != "n1,n2" {
		t.Fatalf("a replica list Route handed out changed to %v", kept)
	}
	apply(t, s, 3, &SetPlacement{Entity: "b", Replicas: [][]string{{"n1", "n2"}, {"n3"}}})
	var routed string
	if !s.Route("B", func(name string, parts []Partition) {
		routed = fmt.Sprintf("%s %d %d %v", name, len(parts), parts[0].GroupID, parts[1].Replicas)
	}) || routed != "b 2 4 [n3]" {
		t.Fatalf("Route: %q", routed)
	}
	if s.Route("zz", func(string, []Partition) { t.Fatal("Route calls fn for a missing entity") }) {
		t.Fatal("Route finds zz")
	}
	// Group IDs are never reused.
	apply(t, s, 4, &DeleteQueue{Name: "a"})
	apply(t, s, 5, &CreateQueue{Name: "a", Properties: DefaultQueueProperties()})
	pa, _ = s.Placement("a")
	if ids(pa) != "6" {
		t.Fatalf("%+v", pa)
	}
	applyErr(t, s, &CreateQueue{Name: "c", Properties: DefaultQueueProperties(), Replicas: [][]string{{"a"}, {"b"}}}, ErrInvalid)
	if pls := s.Placements(); len(pls) != 2 || pls[0].Entity != "a" {
		t.Fatalf("%+v", pls)
	}
}

func ids(p Placement) string {
	var out []string
	for _, x := range p.Partitions {
		out = append(out, strconv.FormatUint(uint64(x.GroupID), 10))
	}
	return strings.Join(out, ",")
}

func TestPartitionConfig(t *testing.T) {
	s := New()
	qp := DefaultQueueProperties()
	qp.LockDuration, qp.MaxDeliveryCount, qp.DefaultMessageTimeToLive = 30*time.Second, 5, time.Hour
	qp.RequiresSession, qp.RequiresDuplicateDetection, qp.DuplicateDetectionHistoryTimeWindow = true, true, time.Minute
	qp.DeadLetteringOnMessageExpiration, qp.MaxSizeInMegabytes, qp.MaxMessageSizeInKilobytes = true, 2, 1024
	qp.Status, qp.PartitionCount = StatusSendDisabled, 2
	apply(t, s, 1, &CreateQueue{Name: "q", Properties: qp})
	cfg, err := s.PartitionConfig("Q", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := fsm.Config{Kind: fsm.KindQueue, GroupID: 2,
		Queue: fsm.QueueConfig{LockDurationMs: 30000, MaxDeliveryCount: 5, DefaultTTLMs: 3600000,
			DeadLetterOnExpiration: true, RequiresSession: true, Status: fsm.StatusSendDisabled},
		RequiresDuplicateDetection: true, DuplicateWindowMs: 60000, MaxSizeBytes: 2 << 20, MaxMessageSizeBytes: 1 << 20}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
	if _, err := s.PartitionConfig("q", 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("partition 2: %v", err)
	}
	if _, err := s.PartitionConfig("nope", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}

	apply(t, s, 2, &CreateTopic{Name: "t", Properties: DefaultTopicProperties()})
	sp := DefaultSubscriptionProperties()
	sp.DeadLetteringOnFilterEvaluationExceptions = true
	apply(t, s, 3, &CreateSubscription{Topic: "t", Name: "b", Properties: sp})
	apply(t, s, 4, &CreateSubscription{Topic: "t", Name: "a", Properties: DefaultSubscriptionProperties()})
	apply(t, s, 5, &CreateRule{Topic: "t", Subscription: "b", Rule: rule.Spec{Name: "f", Filter: rule.FilterSpec{Kind: rule.FilterFalse}}})
	cfg, err = s.PartitionConfig("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != fsm.KindTopic || cfg.GroupID != 3 || cfg.Queue.DefaultTTLMs != fsm.NeverMs ||
		cfg.MaxSizeBytes != 1024<<20 || cfg.MaxMessageSizeBytes != 256<<10 || cfg.DuplicateWindowMs != 600000 ||
		len(cfg.Subscriptions) != 2 || cfg.Subscriptions[0].Name != "b" || cfg.Subscriptions[1].Name != "a" {
		t.Fatalf("%+v", cfg)
	}
	b := cfg.Subscriptions[0]
	if b.Queue.LockDurationMs != 60000 || b.Queue.MaxDeliveryCount != 10 || b.Queue.DefaultTTLMs != fsm.NeverMs ||
		!b.Queue.DeadLetterOnFilterErrors || len(b.Rules) != 2 || b.Rules[0].Name != "$Default" || b.Rules[1].Name != "f" {
		t.Fatalf("%+v", b)
	}
}

// P1, P3: the same entries give the same state; entries and snapshots round-trip.
func TestCodecAndSnapshotRoundTrip(t *testing.T) {
	cmds := sampleCommands()
	a, b := New(), New()
	for i, c := range cmds {
		e := &Entry{Now: int64(1000 + i), Cmd: c}
		enc, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := DecodeEntry(enc)
		if err != nil {
			t.Fatalf("decode %s: %v", c.Op(), err)
		}
		if !reflect.DeepEqual(dec, e) {
			t.Fatalf("%s round trip:\n got %#v\nwant %#v", c.Op(), dec.Cmd, e.Cmd)
		}
		enc2, _ := EncodeEntry(dec)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: encoding not deterministic", c.Op())
		}
		if err := a.Apply(e); err != nil {
			t.Fatalf("apply %s: %v", c.Op(), err)
		}
		if err := b.Apply(dec); err != nil {
			t.Fatal(err)
		}
	}
	if a.Digest() != b.Digest() {
		t.Fatal("replicas diverged")
	}
	var snap bytes.Buffer
	if err := a.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	c := New()
	if err := c.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	if c.Digest() != a.Digest() {
		t.Fatal("restore changed the state")
	}
	if !reflect.DeepEqual(c.Queues(), a.Queues()) || !reflect.DeepEqual(c.Topics(), a.Topics()) ||
		!reflect.DeepEqual(c.SASKeys(), a.SASKeys()) || !reflect.DeepEqual(c.Placements(), a.Placements()) {
		t.Fatal("restored reads differ")
	}
	sa, _ := a.Subscriptions("t1")
	sc, _ := c.Subscriptions("t1")
	if !reflect.DeepEqual(sa, sc) || len(sa) == 0 {
		t.Fatalf("subscriptions differ:\n%+v\n%+v", sa, sc)
	}
	// A binary rule value survives.
	r, _ := c.Rule("t1", "s1", "bin")
	if v := r.Spec.Filter.Correlation.Properties[0].Value; v.S != "\xff\x00\xfe" || v.Kind != rule.KindBinary {
		t.Fatalf("binary value: %+v", v)
	}
	// Corruption is detected and leaves the state alone.
	bad := bytes.Clone(snap.Bytes())
	bad[20] ^= 1
	if err := c.Restore(bytes.NewReader(bad)); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("corrupt snapshot: %v", err)
	}
	if c.Digest() != a.Digest() {
		t.Fatal("failed restore changed the state")
	}
	for _, b := range [][]byte{nil, []byte("QBMETA"), append([]byte("QBMETA\x02"), make([]byte, 40)...)} {
		if err := c.Restore(bytes.NewReader(b)); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("restore %q: %v", b, err)
		}
	}
}

func TestDecodeEntryErrors(t *testing.T) {
	good, _ := EncodeEntry(&Entry{Now: 5, Cmd: &DeleteQueue{Name: "q"}})
	for name, b := range map[string][]byte{
		"empty":     nil,
		"short":     good[:9],
		"version":   append([]byte{9}, good[1:]...),
		"op zero":   append([]byte{1, 0}, good[2:]...),
		"op high":   append([]byte{1, 200}, good[2:]...),
		"bad json":  append(bytes.Clone(good[:10]), '{'),
		"truncated": good[:len(good)-2],
	} {
		if _, err := DecodeEntry(b); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := EncodeEntry(&Entry{}); !errors.Is(err, ErrBadEntry) {
		t.Error("nil command encoded")
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, c := range sampleCommands() {
		b, _ := EncodeEntry(&Entry{Now: 1, Cmd: c})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			return
		}
		s := New()
		_ = s.Apply(e) // must not panic
	})
}

func sampleCommands() []Command {
	qp := DefaultQueueProperties()
	qp.AuthorizationRules = []SASKey{{Name: "k", PrimaryKey: "p", SecondaryKey: "s", Rights: RightListen}}
	qp.PartitionCount = 2
	qp.UserMetadata = "meta ü"
	bin := rule.Spec{Name: "bin", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation,
		Correlation: rule.Correlation{Properties: []rule.Property{{Key: "b", Value: rule.Value{Kind: rule.KindBinary, S: "\xff\x00\xfe"}}}}}}
	tr := rule.Spec{Name: "t", Filter: rule.FilterSpec{Kind: rule.FilterTrue},
		Action: rule.ActionSpec{}}
	return []Command{
		&SetNamespace{Name: "sbemulatorns"},
		&PutSASKey{Key: SASKey{Name: "RootManageSharedAccessKey", PrimaryKey: "key", Rights: RightManage | RightSend | RightListen}},
		&CreateQueue{Name: "q1", Properties: qp, Replicas: [][]string{{"n1"}, {"n1"}}},
		&CreateQueue{Name: "q2", Properties: DefaultQueueProperties()},
		&UpdateQueue{Name: "q2", Properties: DefaultQueueProperties()},
		&CreateTopic{Name: "t1", Properties: DefaultTopicProperties()},
		&UpdateTopic{Name: "t1", Properties: DefaultTopicProperties()},
		&CreateSubscription{Topic: "t1", Name: "s1", Properties: DefaultSubscriptionProperties(), Rules: []rule.Spec{bin}},
		&CreateSubscription{Topic: "t1", Name: "s2", Properties: DefaultSubscriptionProperties()},
		&UpdateSubscription{Topic: "t1", Name: "s2", Properties: DefaultSubscriptionProperties()},
		&CreateRule{Topic: "t1", Subscription: "s1", Rule: tr},
		&UpdateRule{Topic: "t1", Subscription: "s1", Rule: rule.Spec{Name: "t", Filter: rule.FilterSpec{Kind: rule.FilterFalse}}},
		&CreateRule{Topic: "t1", Subscription: "s2", Rule: rule.Spec{Name: "x", Filter: rule.FilterSpec{Kind: rule.FilterFalse}}},
		&DeleteRule{Topic: "t1", Subscription: "s2", Name: "x"},
		&CreateQueue{Name: "q3", Properties: DefaultQueueProperties()},
		&DeleteQueue{Name: "q3"},
		&CreateTopic{Name: "t2", Properties: DefaultTopicProperties()},
		&DeleteSubscription{Topic: "t1", Name: "s2"},
		&DeleteTopic{Name: "t2"},
		&PutSASKey{Key: SASKey{Name: "other", PrimaryKey: "x", Rights: RightSend}},
		&DeleteSASKey{Name: "other"},
		&SetPlacement{Entity: "t1", Replicas: [][]string{{"n1", "n2", "n3"}}},
	}
}

// P1/P3: Apply rejects only because of the state or its invariants; bounds belong to
// ValidateCommand, so that a later release may change them and still replay old logs.
func TestApplyLeavesBoundsToValidateCommand(t *testing.T) {
	s := New()
	p := DefaultQueueProperties()
	p.LockDuration = time.Second // out of S-ENT-2 bounds
	c := &CreateQueue{Name: "q", Properties: p}
	if err := ValidateCommand(c); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ValidateCommand: %v", err)
	}
	apply(t, s, 1, c)
	for _, c := range sampleCommands() {
		if err := ValidateCommand(c); err != nil {
			t.Errorf("%s: %v", c.Op(), err)
		}
	}
	// Invariants stay in Apply.
	p = DefaultQueueProperties()
	p.PartitionCount = 0
	applyErr(t, s, &CreateQueue{Name: "z", Properties: p}, ErrInvalid)
	applyErr(t, s, &CreateQueue{Name: "", Properties: DefaultQueueProperties()}, ErrInvalid)
	if err := ValidateCommand(nil); !errors.Is(err, ErrInvalid) {
		t.Fatal("nil command")
	}
}
