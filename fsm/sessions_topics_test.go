package fsm

import (
	"errors"
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

func sessCfg() Config {
	c := queueCfg()
	c.Queue.RequiresSession = true
	return c
}

func topicCfg(subs ...string) Config {
	c := Config{Kind: KindTopic, GroupID: 9, Queue: DefaultQueueConfig(), DuplicateWindowMs: 600_000}
	for _, s := range subs {
		c.Subscriptions = append(c.Subscriptions, SubscriptionConfig{Name: s, Queue: DefaultQueueConfig(),
			Rules: []rule.Spec{{Name: rule.DefaultRuleName, Filter: rule.FilterSpec{Kind: rule.FilterTrue}}}})
	}
	return c
}

func (x *tf) accept(id, owner string) Result {
	x.t.Helper()
	return x.one(&AcceptSession{Target: q, SessionID: id, Owner: owner})
}

// S-SES-1: a session entity needs a SessionId on every message and a session receiver.
func TestS_SES_1_SessionRequired(t *testing.T) {
	x := newTF(t, sessCfg())
	wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf("a")}}).Err, ErrSessionRequired)
	x.send(msgOf("a", withSession("s1")))
	wantErr(t, x.one(&Receive{Target: q, Max: 1}).Err, ErrSessionRequired)
	if p := x.f.Peek(q, 0, 5); len(p) != 1 { // peek still works
		t.Fatalf("peek %+v", p)
	}
	if ids := x.f.ListSessions(q); !slices.Equal(ids, []string{"s1"}) {
		t.Fatalf("sessions %v", ids)
	}
	y := newTF(t, queueCfg())
	wantErr(t, y.one(&AcceptSession{Target: q, SessionID: "s", Owner: "o"}).Err, ErrSessionNotAllowed)
	wantErr(t, y.one(&Receive{Target: q, Max: 1, SessionID: "s"}).Err, ErrSessionNotAllowed)
}

// S-SES-2: accepting is exclusive; next-available picks the free session with the
// lowest available sequence number.
func TestS_SES_2_AcceptExclusiveAndNextAvailable(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("b1", withSession("b")), msgOf("a1", withSession("a")), msgOf("c1", withSession("c")))
	r := x.accept("", "o1")
	if r.Err != nil || r.SessionID != "b" || r.LockedUntil[0] != x.now+60_000 {
		t.Fatalf("next available: %+v", r)
	}
	wantErr(t, x.accept("b", "o2").Err, ErrSessionCannotBeLocked)
	if r := x.accept("", "o2"); r.SessionID != "a" {
		t.Fatalf("second next available: %+v", r)
	}
	if r := x.accept("", "o3"); r.SessionID != "c" {
		t.Fatalf("third: %+v", r)
	}
	wantErr(t, x.accept("", "o4").Err, ErrNoSessionAvailable)
	wantErr(t, x.one(&Receive{Target: q, Max: 1, SessionID: "a", Owner: "o1"}).Err, ErrSessionLockLost)
	if r := x.accept("empty", "o5"); r.Err != nil { // a named session may have no messages yet
		t.Fatal(r.Err)
	}
	x.send(msgOf("e1", withSession("empty")))
	if got := x.recvSess(q, "empty", "o5", 5); !slices.Equal(bodies(got), []string{"e1"}) {
		t.Fatalf("got %v", bodies(got))
	}
}

// S-SES-3: FIFO within a session; an abandoned message comes back on the next receive.
func TestS_SES_3_FIFOAndAbandon(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("1", withSession("s")), msgOf("x", withSession("t")), msgOf("2", withSession("s")), msgOf("3", withSession("s")))
	x.accept("s", "o")
	m := x.recvSess(q, "s", "o", 1)
	if err := x.one(&Settle{Target: q, Tokens: []LockToken{m[0].LockToken}, Disposition: Abandon, SessionID: "s", Owner: "o"}).Err; err != nil {
		t.Fatal(err)
	}
	got := x.recvSess(q, "s", "o", 5)
	if !slices.Equal(bodies(got), []string{"1", "2", "3"}) || got[0].DeliveryCount != 2 {
		t.Fatalf("got %v", bodies(got))
	}
	if got[0].LockedUntil != x.now+60_000 {
		t.Fatalf("session message locked until %d", got[0].LockedUntil)
	}
	for _, g := range got {
		if err := x.one(&Settle{Target: q, Tokens: []LockToken{g.LockToken}, Disposition: Complete, SessionID: "s", Owner: "o"}).Err; err != nil {
			t.Fatal(err)
		}
	}
	x.one(&ReleaseSession{Target: q, SessionID: "s", Owner: "o"})
	if ids := x.f.ListSessions(q); !slices.Equal(ids, []string{"t"}) {
		t.Fatalf("sessions %v", ids)
	}
}

// S-SES-4: the session lock lasts LockDuration, renews, and is released on close.
func TestS_SES_4_SessionLockRenewExpire(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("1", withSession("s")))
	x.accept("s", "o")
	x.advance(50_000)
	r := x.one(&RenewSession{Target: q, SessionID: "s", Owner: "o"})
	if r.Err != nil || r.LockedUntil[0] != x.now+60_000 || x.f.NextDeadline() != x.now+60_000 {
		t.Fatalf("renew %+v", r)
	}
	wantErr(t, x.one(&RenewSession{Target: q, SessionID: "s", Owner: "other"}).Err, ErrSessionLockLost)
	x.advance(60_000)
	x.tick()
	if info, _ := x.f.Session(q, "s"); info.Held {
		t.Fatal("session lock did not expire")
	}
	wantErr(t, x.one(&RenewSession{Target: q, SessionID: "s", Owner: "o"}).Err, ErrSessionLockLost)
	if r := x.accept("s", "o2"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := x.one(&ReleaseSession{Target: q, SessionID: "s", Owner: "o2"}).Err; err != nil {
		t.Fatal(err)
	}
	if r := x.accept("s", "o3"); r.Err != nil {
		t.Fatalf("accept after release: %v", r.Err)
	}
}

// S-SES-5: session state get/set/clear; survives consumption; counts toward the quota.
func TestS_SES_5_State(t *testing.T) {
	cfg := sessCfg()
	cfg.MaxSizeBytes = 100
	cfg.MaxMessageSizeBytes = 60
	x := newTF(t, cfg)
	if x.f.SessionState(q, "s") != nil {
		t.Fatal("state of an unknown session")
	}
	x.send(msgOf("1", withSession("s")))
	x.accept("s", "o")
	wantErr(t, x.one(&SetSessionState{Target: q, SessionID: "s", Owner: "x", State: []byte("st")}).Err, ErrSessionLockLost)
	if err := x.one(&SetSessionState{Target: q, SessionID: "s", Owner: "o", State: []byte("st")}).Err; err != nil {
		t.Fatal(err)
	}
	wantErr(t, x.one(&SetSessionState{Target: q, SessionID: "s", State: make([]byte, 61)}).Err, ErrMessageTooLarge)
	m := x.recvSess(q, "s", "o", 1)
	x.one(&Settle{Target: q, Tokens: []LockToken{m[0].LockToken}, Disposition: Complete})
	x.one(&ReleaseSession{Target: q, SessionID: "s", Owner: "o"})
	if string(x.f.SessionState(q, "s")) != "st" || !slices.Equal(x.f.ListSessions(q), []string{"s"}) {
		t.Fatal("state lost with the messages")
	}
	if b := x.f.Stats().Bytes; b != 2 {
		t.Fatalf("bytes %d", b)
	}
	wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf(string(make([]byte, 60)), withSession("s")), msgOf(string(make([]byte, 39)), withSession("s"))}}).Err, ErrQuotaExceeded)
	if err := x.one(&SetSessionState{Target: q, SessionID: "s"}).Err; err != nil { // management path, clear
		t.Fatal(err)
	}
	if x.f.SessionState(q, "s") != nil || len(x.f.ListSessions(q)) != 0 || x.f.Stats().Bytes != 0 {
		t.Fatal("state not cleared")
	}
}

// S-SES-6: session lock expiry counts a delivery for its locked messages; closing does
// not; afterwards settling fails with session-lock-lost.
func TestS_SES_6_DeliveryCountOnSessionLoss(t *testing.T) {
	cfg := sessCfg()
	cfg.Queue.MaxDeliveryCount = 2
	x := newTF(t, cfg)
	x.send(msgOf("1", withSession("s")))
	x.accept("s", "o")
	m := x.recvSess(q, "s", "o", 1)
	x.one(&ReleaseSession{Target: q, SessionID: "s", Owner: "o"})
	wantErr(t, x.one(&Settle{Target: q, Tokens: []LockToken{m[0].LockToken}, Disposition: Complete}).Err, ErrSessionLockLost)
	x.accept("s", "o")
	m = x.recvSess(q, "s", "o", 1)
	if m[0].DeliveryCount != 1 {
		t.Fatalf("closing counted a delivery: %d", m[0].DeliveryCount)
	}
	x.advance(60_000)
	x.tick()
	wantErr(t, x.one(&Settle{Target: q, Tokens: []LockToken{m[0].LockToken}, Disposition: Complete}).Err, ErrSessionLockLost)
	x.accept("s", "o")
	m = x.recvSess(q, "s", "o", 1)
	if m[0].DeliveryCount != 2 {
		t.Fatalf("lock expiry did not count: %d", m[0].DeliveryCount)
	}
	x.advance(60_000)
	x.tick() // S-LOCK-5 applies to session lock expiry too
	if st := x.stats(dlq); st.Active != 1 {
		t.Fatalf("dlq %+v", st)
	}
}

// S-SES-7: request/response: a requester accepts its own ReplyToSessionId on the reply
// entity and reads its replies there.
func TestS_SES_7_RequestResponse(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("reply-other", withSession("req-2")), msgOf("reply-mine", withSession("req-1")))
	if r := x.accept("req-1", "requester"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := x.recvSess(q, "req-1", "requester", 5); !slices.Equal(bodies(got), []string{"reply-mine"}) {
		t.Fatalf("got %v", bodies(got))
	}
}

// S-TTL-5: in a session, once a message has expired, the session's other messages
// expire when a receiver accepts the session.
func TestS_TTL_5_SessionExpiry(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("1", withSession("s"), withTTL(1000)), msgOf("2", withSession("s")))
	x.advance(1000)
	x.tick()
	x.send(msgOf("3", withSession("s")))
	x.accept("s", "o")
	if got := x.recvSess(q, "s", "o", 5); !slices.Equal(bodies(got), []string{"3"}) {
		t.Fatalf("got %v", bodies(got))
	}
}

// S-TOP-1: a message is copied into every subscription whose rules match.
func TestS_TOP_1_FanOut(t *testing.T) {
	cfg := topicCfg("all", "red", "none", "broken")
	cfg.Subscriptions[1].Rules = []rule.Spec{{Name: "red", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation,
		Correlation: rule.Correlation{Properties: []rule.Property{{Key: "color", Value: rule.Value{Kind: rule.KindString, S: "red"}}}}}}}
	cfg.Subscriptions[2].Rules = []rule.Spec{{Name: "f", Filter: rule.FilterSpec{Kind: rule.FilterFalse}}}
	cfg.Subscriptions[3].Rules = []rule.Spec{{Name: "bad", Filter: rule.FilterSpec{Kind: rule.FilterSQL, SQL: "(((( not sql"}}}
	cfg.Subscriptions[3].Queue.DeadLetterOnFilterErrors = true
	x := &tf{t: t, f: New(cfg), twin: New(cfg), now: t0} // the broken rule fails Validate on purpose
	seqs := x.send(msgOf("r", withProp("color", rule.Value{Kind: rule.KindString, S: "red"})), msgOf("b"))
	if !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("seqs %v", seqs)
	}
	all := x.recv(Target{Sub: "all"}, 5)
	red := x.recv(Target{Sub: "red"}, 5)
	if !slices.Equal(bodies(all), []string{"r", "b"}) || !slices.Equal(bodies(red), []string{"r"}) ||
		len(x.recv(Target{Sub: "none"}, 5)) != 0 {
		t.Fatalf("all %v red %v", bodies(all), bodies(red))
	}
	if red[0].SequenceNumber != all[0].SequenceNumber {
		t.Fatal("copies have different sequence numbers")
	}
	bd := x.recv(Target{Sub: "broken", DLQ: true}, 5)
	if len(bd) != 2 || bd[0].DeadLetter.Reason != "FilterEvaluationException" {
		t.Fatalf("filter errors not dead-lettered: %+v", bd)
	}
	// Settling a copy in one subscription leaves the others alone.
	if err := x.settle(Target{Sub: "red"}, Complete, red...); err != nil {
		t.Fatal(err)
	}
	wantErr(t, x.settle(Target{Sub: "all"}, Complete, red...), ErrLockLost)
	if st := x.stats(Target{Sub: "all"}); st.Locked != 2 {
		t.Fatalf("all %+v", st)
	}
	if x.f.Digest() != x.twin.Digest() {
		t.Fatal("twin differs")
	}
}

type setAction struct{}

func (setAction) Apply(p *rule.Properties) error {
	p.Set("stamped", rule.Value{Kind: rule.KindString, S: "yes"})
	p.Subject = "changed"
	return nil
}

type errAction struct{}

func (errAction) Apply(p *rule.Properties) error {
	p.Set("half", rule.Value{Kind: rule.KindBool, N: 1})
	return errors.New("action failed")
}

type errFilter struct{}

func (errFilter) Match(*rule.Properties) (bool, error) { return false, errors.New("boom") }

// S-TOP-1: an action changes only its subscription's copy; a filter error skips the
// copy unless DeadLetterOnFilterErrors.
func TestS_TOP_1_ActionCopyOnWrite(t *testing.T) {
	cfg := topicCfg("plain", "acted", "skipping", "badaction")
	cfg.Subscriptions[3].Queue.DeadLetterOnFilterErrors = true
	x := newTF(t, cfg)
	for _, f := range []*FSM{x.f, x.twin} {
		f.byName["acted"].rules = []compiledRule{{r: &rule.Rule{Name: "a", Filter: &rule.Correlation{}, Action: setAction{}}}}
		f.byName["skipping"].rules = []compiledRule{{r: &rule.Rule{Name: "e", Filter: errFilter{}}}}
		f.byName["badaction"].rules = []compiledRule{{r: &rule.Rule{Name: "b", Filter: &rule.Correlation{}, Action: errAction{}}}}
	}
	x.send(msgOf("m", withProp("k", rule.Value{Kind: rule.KindLong, N: 5})))
	p := x.recv(Target{Sub: "plain"}, 1)[0]
	a := x.recv(Target{Sub: "acted"}, 1)[0]
	if _, ok := p.Get("stamped"); ok || p.Modified || p.Subject != "" {
		t.Fatalf("plain copy changed: %+v", p.Properties)
	}
	if v, _ := a.Get("stamped"); v.S != "yes" || !a.Modified || a.Subject != "changed" {
		t.Fatalf("action not applied: %+v", a.Properties)
	}
	if st := x.f.Stats(); st.Targets[4].Total()+st.Targets[5].Total() != 0 {
		t.Fatalf("filter error not skipped: %+v", st.Targets[4:])
	}
	d := x.recv(Target{Sub: "badaction", DLQ: true}, 5)
	if len(d) != 1 || d[0].DeadLetter.Reason != "FilterEvaluationException" {
		t.Fatalf("failed action not dead-lettered: %+v", d)
	}
	if _, half := d[0].Get("half"); half {
		t.Fatal("a failed action's partial changes reached the dead-lettered copy")
	}
	if x.stats(Target{Sub: "badaction"}).Total() != 0 {
		t.Fatal("a copy whose action failed was delivered")
	}
}

// S-SES-1 for topics: a session subscription needs a SessionId on the copies it takes.
func TestS_SES_1_TopicSessionSubscription(t *testing.T) {
	cfg := topicCfg("s")
	cfg.Subscriptions[0].Queue.RequiresSession = true
	x := newTF(t, cfg)
	wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf("a")}}).Err, ErrSessionRequired)
	x.send(msgOf("a", withSession("x")))
	if r := x.one(&AcceptSession{Target: Target{Sub: "s"}, Owner: "o"}); r.SessionID != "x" {
		t.Fatalf("accept %+v", r)
	}
}

// UpdateEntity adds and removes subscriptions.
func TestUpdateEntitySubscriptions(t *testing.T) {
	x := newTF(t, topicCfg("a", "b"))
	x.send(msgOf("1"))
	x.one(&UpdateEntity{Config: topicCfg("b", "c")})
	x.send(msgOf("2"))
	if got := x.recv(Target{Sub: "b"}, 5); !slices.Equal(bodies(got), []string{"1", "2"}) {
		t.Fatalf("b %v", bodies(got))
	}
	if got := x.recv(Target{Sub: "c"}, 5); !slices.Equal(bodies(got), []string{"2"}) {
		t.Fatalf("c %v", bodies(got))
	}
	wantErr(t, x.one(&Receive{Target: Target{Sub: "a"}, Max: 1}).Err, ErrNotFound)
	if b := x.f.Stats().Bytes; b != 3 {
		t.Fatalf("bytes %d", b)
	}
}

// S-IDLE-1: the fsm records the activity that keeps an entity alive (and that
// AccessedAt reports): sends (and schedules) per partition, receiver activity per queue
// or subscription. Updates are not: the metadata records them, and Service Bus does not
// count an update as an access (the SDK's TestAdminClient_CreateQueue_Standard).
func TestS_IDLE_1_Activity(t *testing.T) {
	x := newTF(t, topicCfg("a", "b"))
	x.advance(1000)
	x.send(msgOf("m"))
	x.advance(1000)
	x.recv(Target{Sub: "a"}, 1)
	x.advance(1000)
	x.f.Peek(Target{Sub: "b"}, 0, 10) // a query: the layer above counts peeks
	wantErr(t, x.one(&Receive{Target: Target{Sub: "nope"}, Max: 1}).Err, ErrNotFound)
	st := x.f.Stats()
	if st.LastSend != t0+1000 || st.Targets[0].LastReceive != t0+2000 || st.Targets[1].LastReceive != t0+2000 ||
		st.Targets[2].LastReceive != 0 {
		t.Fatalf("activity: send %d, a %d, a/dlq %d, b %d", st.LastSend-t0, st.Targets[0].LastReceive-t0,
			st.Targets[1].LastReceive-t0, st.Targets[2].LastReceive)
	}
	// The partition counts a peek by proposing Touch: receiver activity on that target only.
	x.advance(1000)
	x.one(&Touch{Target: Target{Sub: "b", DLQ: true}})
	b, okB := x.f.LastReceive(Target{Sub: "b"})
	a, _ := x.f.LastReceive(Target{Sub: "a"})
	if _, known := x.f.LastReceive(Target{Sub: "nope"}); b != x.now || !okB || a != t0+2000 || known {
		t.Fatalf("touch: b %d, a %d, unknown target known %v", b-t0, a-t0, known)
	}
	wantErr(t, x.one(&Touch{Target: Target{Sub: "nope"}}).Err, ErrNotFound)
	before := x.f.Stats()
	x.advance(1000)
	x.one(&UpdateEntity{Config: topicCfg("a", "b")})
	if st := x.f.Stats(); st.LastSend != before.LastSend || st.Targets[2].LastReceive != before.Targets[2].LastReceive ||
		st.Targets[0].LastReceive != before.Targets[0].LastReceive {
		t.Fatalf("an update counted as activity: %+v, before %+v", st, before)
	}
}
