package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestListSessionsStateUpdatedAfter: listing sessions with SessionStateUpdatedAfter
// lists exactly the sessions whose state was set after that time, on a partitioned queue
// (sessions on several partitions).
func TestListSessionsStateUpdatedAfter(t *testing.T) {
	e := newEnv(t)
	q := e.queue(t, "sesslist", &admin.QueueProperties{RequiresSession: to.Ptr(true), EnablePartitioning: to.Ptr(true)})
	send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("m"), SessionID: to.Ptr("msg-only")})
	setState := func(id, state string) {
		t.Helper()
		sr, err := e.c.AcceptSessionForQueue(testCtx(t), q, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close(testCtx(t))
		if err := sr.SetSessionState(testCtx(t), []byte(state), nil); err != nil {
			t.Fatal(err)
		}
	}
	list := func(after time.Time) []string {
		t.Helper()
		var got []string
		p := e.c.NewListSessionsForQueuePager(q, &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: &after})
		for p.More() {
			page, err := p.NextPage(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Sessions...)
		}
		slices.Sort(got)
		return got
	}
	// past waits until the wall clock is past at by a millisecond (the broker stamps
	// milliseconds) and returns that instant: later than anything stamped up to at.
	past := func(at time.Time) time.Time {
		cut := at.Add(time.Millisecond).Truncate(time.Millisecond)
		testutil.WaitFor(t, 5*time.Second, func() error {
			if !time.Now().After(cut) {
				return fmt.Errorf("clock before %v", cut)
			}
			return nil
		})
		return cut
	}

	start := time.Now().Add(-time.Second)
	setState("a", "1")
	setState("c", "1")
	cut := past(time.Now())
	setState("b", "2")
	setState("c", "") // cleared: no longer listed
	if got, want := list(start), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("updated after the start: %q, want %q", got, want)
	}
	if got, want := list(cut), []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("updated after a's update: %q, want %q", got, want)
	}
	setState("a", "3")
	if got, want := list(cut), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("after a's state was set again: %q, want %q", got, want)
	}
	if got := list(past(time.Now())); len(got) != 0 {
		t.Fatalf("updated after now: %q", got)
	}
}

// TestSQLRuleBlankSessionID: a SQL rule on sys.SessionId sees what the sender set: a
// SessionId set to "" is the empty string (a session of its own on Service Bus), not
// NULL as a message without SessionId is.
func TestSQLRuleBlankSessionID(t *testing.T) {
	e := newEnv(t)
	tp := name("blanksess")
	if _, err := e.admin.CreateTopic(testCtx(t), tp, nil); err != nil {
		t.Fatal(err)
	}
	for sub, sql := range map[string]string{"blank": "sys.SessionId = ''", "none": "sys.SessionId IS NULL",
		"named": "sys.SessionId LIKE '_%'"} {
		_, err := e.admin.CreateSubscription(testCtx(t), tp, sub, &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
			DefaultRule: &admin.RuleProperties{Name: "r", Filter: &admin.SQLFilter{Expression: sql}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(t, e.sender(t, tp),
		&azservicebus.Message{Body: []byte("blank"), SessionID: to.Ptr("")},
		&azservicebus.Message{Body: []byte("none")},
		&azservicebus.Message{Body: []byte("named"), SessionID: to.Ptr("s1")})
	rd := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}
	for _, sub := range []string{"blank", "none", "named"} {
		r := e.subReceiver(t, tp, sub, rd)
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != sub {
			t.Errorf("subscription %s got %q", sub, m.Body)
		}
		if sub == "blank" && (m.SessionID == nil || *m.SessionID != "") {
			t.Errorf("the blank-session message arrives with SessionID %v", m.SessionID)
		}
		expectNothing(t, r, time.Second)
	}
}

// TestGetSessionStateNeedsLock: get-session-state answers the holder of the session's
// lock, and SessionLockLost (410) to a connection that does not hold it.
func TestGetSessionStateNeedsLock(t *testing.T) {
	e := newEnv(t)
	q := e.queue(t, "statelock", &admin.QueueProperties{RequiresSession: to.Ptr(true)})
	sr, err := e.c.AcceptSessionForQueue(testCtx(t), q, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(testCtx(t))
	if err := sr.SetSessionState(testCtx(t), []byte("st"), nil); err != nil {
		t.Fatal(err)
	}
	if st, err := sr.GetSessionState(testCtx(t), nil); err != nil || string(st) != "st" {
		t.Fatalf("holder: %q %v", st, err)
	}
	raw := e.rawMgmt(t, q) // another connection
	if st := raw.call(t, "com.microsoft:get-session-state", map[string]any{"session-id": "s"}); st != 410 {
		t.Fatalf("get-session-state without the lock: status %d, want 410", st)
	}
}
