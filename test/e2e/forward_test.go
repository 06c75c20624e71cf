package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// TestForwardChains covers auto-forwarding (S-FWD-1) beyond one hop: out of
// session-enabled entities, along chains, at the four-hop limit, and the refusal of
// forwarding loops.
func TestForwardChains(t *testing.T) {
	e := newEnv(t)

	// A session-enabled queue forwarding to a session-enabled queue keeps each message's
	// SessionId, and each session's order, for several sessions sent interleaved.
	t.Run("SessionsKeepIdAndOrder", func(t *testing.T) {
		t.Parallel()
		dst := e.queue(t, "fwdsessdst", sessionQueue(""))
		src := e.queue(t, "fwdsesssrc", &admin.QueueProperties{RequiresSession: to.Ptr(true), ForwardTo: to.Ptr(dst)})
		sessions := []string{"alpha", "beta", "gamma"}
		const perSession = 12
		s := e.sender(t, src)
		for i := range perSession {
			for _, sid := range sessions {
				send(t, s, sessMsg(sid, fmt.Sprintf("%s-%02d", sid, i)))
			}
		}
		for _, sid := range sessions {
			r := e.accept(t, dst, sid)
			got := receiveN(t, r, perSession, 20*time.Second)
			var want []string
			for i := range perSession {
				want = append(want, fmt.Sprintf("%s-%02d", sid, i))
			}
			if b := bodies(got); !slices.Equal(b, want) {
				t.Errorf("session %s arrived as %v, want %v", sid, b, want)
			}
			for _, m := range got {
				if deref(m.SessionID) != sid {
					t.Errorf("message %q has SessionId %q, want %q", m.Body, deref(m.SessionID), sid)
				}
				if _, ok := m.ApplicationProperties["x-opt-quorumbus-forward-hops"]; ok {
					t.Errorf("message %q shows the broker's hop count to the client", m.Body)
				}
			}
		}
	})

	// q1 -> q2 -> q3 -> q4: three hops, well within the limit.
	t.Run("Chain", func(t *testing.T) {
		t.Parallel()
		q4 := e.queue(t, "chain4", nil)
		q3 := e.queue(t, "chain3", &admin.QueueProperties{ForwardTo: to.Ptr(q4)})
		q2 := e.queue(t, "chain2", &admin.QueueProperties{ForwardTo: to.Ptr(q3)})
		q1 := e.queue(t, "chain1", &admin.QueueProperties{ForwardTo: to.Ptr(q2)})
		send(t, e.sender(t, q1), &azservicebus.Message{Body: []byte("travel"), ApplicationProperties: map[string]any{"k": "v"}})
		m := receiveOne(t, e.receiver(t, q4, nil), 20*time.Second)
		if string(m.Body) != "travel" || m.ApplicationProperties["k"] != "v" {
			t.Errorf("got %q with properties %v", m.Body, m.ApplicationProperties)
		}
	})

	// Service Bus forwards a message at most four times; a message that would be
	// forwarded a fifth time is dead-lettered where it is, with reason
	// MaxTransferHopCountExceeded. q1 -> ... -> q6 is five hops: a message sent to q1
	// ends in q5's dead-letter queue, one sent to q2 reaches q6.
	t.Run("HopLimit", func(t *testing.T) {
		t.Parallel()
		qs := make([]string, 6)
		qs[5] = e.queue(t, "hop6", nil)
		for i := 4; i >= 0; i-- {
			qs[i] = e.queue(t, fmt.Sprintf("hop%d", i+1), &admin.QueueProperties{ForwardTo: to.Ptr(qs[i+1])})
		}
		send(t, e.sender(t, qs[0]), body("too-far"))
		d := receiveOne(t, e.dlq(t, qs[4]), 30*time.Second)
		if string(d.Body) != "too-far" || deref(d.DeadLetterReason) != "MaxTransferHopCountExceeded" {
			t.Fatalf("dead letter %q reason %q, want too-far / MaxTransferHopCountExceeded", d.Body, deref(d.DeadLetterReason))
		}
		send(t, e.sender(t, qs[1]), body("four-hops"))
		if m := receiveOne(t, e.receiver(t, qs[5], nil), 30*time.Second); string(m.Body) != "four-hops" {
			t.Errorf("q6 got %q", m.Body)
		}
	})

	// A ForwardTo that would close a loop is refused with 400 and says why.
	t.Run("LoopsRefused", func(t *testing.T) {
		t.Parallel()
		q2 := e.queue(t, "loop2", nil)
		q1 := e.queue(t, "loop1", &admin.QueueProperties{ForwardTo: to.Ptr(q2)})
		_, err := e.admin.UpdateQueue(testCtx(t), q2, admin.QueueProperties{ForwardTo: to.Ptr(q1)}, nil)
		wantLoop(t, err, q1, q2)

		self := name("loopself")
		_, err = e.admin.CreateQueue(testCtx(t), self, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{ForwardTo: to.Ptr(self)}})
		wantLoop(t, err, self)
		if _, err := e.admin.CreateQueue(testCtx(t), self, nil); err != nil {
			t.Fatal(err)
		}
		_, err = e.admin.UpdateQueue(testCtx(t), self, admin.QueueProperties{ForwardTo: to.Ptr(self)}, nil)
		wantLoop(t, err, self)

		// Through a topic: a subscription forwarding to its own topic, and a dead-letter
		// edge closing the loop (q3 dead letters -> topic, topic's subscription -> q3).
		tp := e.topic(t, "looptopic", nil)
		_, err = e.admin.CreateSubscription(testCtx(t), tp, "back", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr(tp)}})
		wantLoop(t, err, tp)
		q3 := e.queue(t, "loop3", &admin.QueueProperties{ForwardDeadLetteredMessagesTo: to.Ptr(tp)})
		_, err = e.admin.CreateSubscription(testCtx(t), tp, "toq3", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr(q3)}})
		wantLoop(t, err, tp, q3)

		// The refused changes left nothing behind: q2 still forwards nowhere.
		got, err := e.admin.GetQueue(testCtx(t), q2, nil)
		if err != nil || got == nil || got.ForwardTo != nil {
			t.Errorf("q2 after the refused update: %+v, %v", got, err)
		}
	})
}

// wantLoop checks that err is the admin API's 400 for a forwarding loop through names.
func wantLoop(t *testing.T, err error, names ...string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %v, want a 400 response", err)
	}
	if !strings.Contains(err.Error(), "forwarding loop") {
		t.Errorf("error does not say it is a forwarding loop: %v", err)
	}
	for _, n := range names {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(n)) {
			t.Errorf("error does not name %s: %v", n, err)
		}
	}
}
