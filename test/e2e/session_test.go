package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/test/testutil"
)

func sessionQueue(lock string) *admin.QueueProperties {
	p := &admin.QueueProperties{RequiresSession: to.Ptr(true)}
	if lock != "" {
		p.LockDuration = to.Ptr(lock)
	}
	return p
}

func sessMsg(session, b string) *azservicebus.Message {
	return &azservicebus.Message{SessionID: to.Ptr(session), Body: []byte(b)}
}

func (e *env) accept(t *testing.T, queue, session string) *azservicebus.SessionReceiver {
	t.Helper()
	r, err := e.c.AcceptSessionForQueue(testCtx(t), queue, session, nil)
	if err != nil {
		t.Fatalf("accept session %q: %v", session, err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestSessions covers message sessions (S-SES-*) through the SDK's session receivers.
func TestSessions(t *testing.T) {
	e := newEnv(t)

	// S-SES-1: on a session queue a send without SessionId is rejected and a plain
	// receiver cannot receive; S-SES-3: each session delivers in order.
	t.Run("RequiredAndFIFO", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sfifo", sessionQueue(""))
		s := e.isolated(t).sender(t, q)
		if err := s.SendMessage(testCtx(t), body("no-session"), nil); err == nil {
			t.Fatalf("send without SessionID to a session queue succeeded")
		}
		for i := range 5 {
			send(t, e.sender(t, q), sessMsg("s1", fmt.Sprint("a", i)), sessMsg("s2", fmt.Sprint("b", i)))
		}
		plain := e.isolated(t).receiver(t, q, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if msgs, err := plain.ReceiveMessages(ctx, 1, nil); err == nil || len(msgs) > 0 {
			t.Fatalf("plain receiver on a session queue: %d messages, err %v", len(msgs), err)
		}
		for _, sid := range []string{"s2", "s1"} {
			r := e.accept(t, q, sid)
			if r.SessionID() != sid {
				t.Fatalf("SessionID() = %q", r.SessionID())
			}
			msgs := receiveN(t, r, 5, 10*time.Second)
			p := "a"
			if sid == "s2" {
				p = "b"
			}
			for i, m := range msgs {
				if string(m.Body) != fmt.Sprint(p, i) || deref(m.SessionID) != sid {
					t.Fatalf("session %s message %d: %q (session %v)", sid, i, m.Body, deref(m.SessionID))
				}
				if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
					t.Fatal(err)
				}
			}
			expectNothing(t, r, 500*time.Millisecond)
		}
	})

	// S-SES-1: peek works on a session through the session receiver.
	t.Run("Peek", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "speek", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("p", "1"), sessMsg("p", "2"), sessMsg("other", "x"))
		r := e.accept(t, q, "p")
		p := peekAll(t, r)
		if fmt.Sprint(bodies(p)) != "[1 2]" {
			t.Fatalf("peek in session p: %v", bodies(p))
		}
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "1" || m.DeliveryCount != 1 {
			t.Fatalf("after peek got %q DeliveryCount %d", m.Body, m.DeliveryCount)
		}
	})

	// S-SES-2: a session is held by one receiver only; accepting it again fails, and
	// accept-next skips it and takes a free session.
	t.Run("ExclusiveLock", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sexcl", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("held", "h"), sessMsg("free", "f"))
		e.accept(t, q, "held")
		other := e.n.Client(t)
		if r, err := other.AcceptSessionForQueue(testCtx(t), q, "held", nil); err == nil {
			r.Close(context.Background())
			t.Fatalf("a second receiver accepted a held session")
		}
		next, err := other.AcceptNextSessionForQueue(testCtx(t), q, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close(context.Background())
		if next.SessionID() != "free" {
			t.Fatalf("accept-next got %q, want the free session", next.SessionID())
		}
		if m := receiveOne(t, next, 10*time.Second); string(m.Body) != "f" {
			t.Fatalf("got %q", m.Body)
		}
		// No free session left: accept-next gives up within its deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		r, err := other.AcceptNextSessionForQueue(ctx, q, nil)
		if err == nil {
			r.Close(context.Background())
			t.Fatalf("accept-next got session %q while all are held", r.SessionID())
		}
		if !errors.Is(err, context.DeadlineExceeded) && sbCode(err) != azservicebus.CodeTimeout {
			t.Errorf("accept-next with no free session: %v, want timeout", err)
		}
		if waited := time.Since(start); waited > 10*time.Second {
			t.Errorf("accept-next took %v for a 3s deadline", waited)
		}
	})

	// S-SES-2: accept-next waits for a session that becomes available.
	t.Run("AcceptNextWaits", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "swait", sessionQueue(""))
		c, tp := e.tapped(t)
		type result struct {
			r   *azservicebus.SessionReceiver
			err error
		}
		accepted := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := c.AcceptNextSessionForQueue(ctx, q, nil)
			accepted <- result{r, err}
		}()
		// The accept-next attach (null session filter) has reached the broker while the
		// queue has no session, so the broker must wait. The send goes over the same
		// connection, after that attach.
		tp.waitSent(t, perfAttach, 0, "com.microsoft:session-filter")
		select {
		case a := <-accepted:
			t.Fatalf("accept-next returned before any session existed: %v", a.err)
		default:
		}
		s, err := c.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		send(t, s, sessMsg("late", "x"))
		a := <-accepted
		if a.err != nil {
			t.Fatal(a.err)
		}
		defer a.r.Close(context.Background())
		if a.r.SessionID() != "late" {
			t.Fatalf("got session %q", a.r.SessionID())
		}
	})

	// S-SES-4: the session lock lasts LockDuration, renewal extends it, and closing the
	// receiver releases it at once; S-SES-6: closing with messages locked does not
	// increment their DeliveryCount.
	t.Run("LockRenewAndRelease", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "slock", sessionQueue("PT5S"))
		send(t, e.sender(t, q), sessMsg("s", "1"), sessMsg("s", "2"))
		start := time.Now()
		r := e.accept(t, q, "s")
		lu := r.LockedUntil()
		if lu.Before(start.Add(shortLock-time.Second)) || lu.After(time.Now().Add(shortLock+time.Second)) {
			t.Errorf("LockedUntil %v, want about now+5s", lu)
		}
		msgs := receiveN(t, r, 2, 10*time.Second)
		if err := r.CompleteMessage(testCtx(t), msgs[0], nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // renewal must move LockedUntil forward in time
		if err := r.RenewSessionLock(testCtx(t), nil); err != nil {
			t.Fatal(err)
		}
		if !r.LockedUntil().After(lu.Add(time.Second)) {
			t.Errorf("LockedUntil after renew %v, not after %v", r.LockedUntil(), lu)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		r2 := e.accept(t, q, "s") // would fail with session-cannot-be-locked if still held
		m := receiveOne(t, r2, 10*time.Second)
		if string(m.Body) != "2" || m.DeliveryCount != 1 {
			t.Fatalf("after close got %q with DeliveryCount %d, want \"2\" with 1", m.Body, m.DeliveryCount)
		}
		if err := r2.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
	})

	// S-SES-4, S-SES-6: when the session lock expires while held, its locked messages'
	// DeliveryCount is incremented and another receiver may take the session.
	t.Run("LockExpiry", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sexp", sessionQueue("PT5S"))
		send(t, e.sender(t, q), sessMsg("s", "1"))
		r := e.accept(t, q, "s")
		m := receiveOne(t, r, 10*time.Second)
		var r2 *azservicebus.SessionReceiver
		other := e.n.Client(t)
		testutil.WaitFor(t, 20*time.Second, func() error { // the expired session accepted elsewhere
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			r2, err = other.AcceptSessionForQueue(ctx, q, "s", nil)
			return err
		})
		defer r2.Close(context.Background())
		if time.Until(r.LockedUntil()) > 500*time.Millisecond {
			t.Errorf("session accepted elsewhere before the first lock (until %v) expired", r.LockedUntil())
		}
		m2 := receiveOne(t, r2, 10*time.Second)
		if *m2.SequenceNumber != *m.SequenceNumber || m2.DeliveryCount != 2 {
			t.Errorf("redelivery: seq %d DeliveryCount %d, want seq %d count 2", *m2.SequenceNumber, m2.DeliveryCount, *m.SequenceNumber)
		}
		if err := r2.CompleteMessage(testCtx(t), m2, nil); err != nil {
			t.Fatalf("complete by the new holder: %v", err)
		}
	})

	// S-SES-3: an abandoned message is delivered again on the next receive of the session.
	t.Run("AbandonRedeliversFirst", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sabandon", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("s", "1"), sessMsg("s", "2"))
		r := e.accept(t, q, "s")
		m := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		msgs := receiveN(t, r, 2, 10*time.Second)
		if fmt.Sprint(bodies(msgs)) != "[1 2]" || msgs[0].DeliveryCount != 2 {
			t.Fatalf("after abandon got %v (first DeliveryCount %d)", bodies(msgs), msgs[0].DeliveryCount)
		}
	})

	// S-SES-5: session state is nil until set, survives the consumption of all the
	// session's messages and a new accept, and SetSessionState(nil) clears it.
	t.Run("State", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sstate", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("s", "m"))
		r := e.accept(t, q, "s")
		st, err := r.GetSessionState(testCtx(t), nil)
		if err != nil || st != nil {
			t.Fatalf("initial state %q, err %v; want nil", st, err)
		}
		want := []byte{0, 1, 2, 'x', 255}
		if err := r.SetSessionState(testCtx(t), want, nil); err != nil {
			t.Fatal(err)
		}
		if st, err := r.GetSessionState(testCtx(t), nil); err != nil || string(st) != string(want) {
			t.Fatalf("state %v, err %v; want %v", st, err, want)
		}
		m := receiveOne(t, r, 10*time.Second)
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		r2 := e.accept(t, q, "s")
		if st, err := r2.GetSessionState(testCtx(t), nil); err != nil || string(st) != string(want) {
			t.Fatalf("state after consuming all messages and re-accepting: %v, err %v", st, err)
		}
		if err := r2.SetSessionState(testCtx(t), nil, nil); err != nil {
			t.Fatal(err)
		}
		if st, err := r2.GetSessionState(testCtx(t), nil); err != nil || st != nil {
			t.Fatalf("state after clearing: %q, err %v; want nil", st, err)
		}
	})

	// S-SES-1, S-SES-5: list sessions returns the sessions that have messages or state.
	t.Run("ListSessions", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "slist", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("m1", "x"), sessMsg("m2", "y"), sessMsg("st", "z"))
		r := e.accept(t, q, "st")
		if err := r.SetSessionState(testCtx(t), []byte("s"), nil); err != nil {
			t.Fatal(err)
		}
		m := receiveOne(t, r, 10*time.Second)
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		list := func() string {
			var ids []string
			pager := e.c.NewListSessionsForQueuePager(q, nil)
			for pager.More() {
				page, err := pager.NextPage(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, page.Sessions...)
			}
			slices.Sort(ids)
			return fmt.Sprint(ids)
		}
		if got := list(); got != "[m1 m2 st]" {
			t.Fatalf("sessions %v, want [m1 m2 st]", got)
		}
		// Without messages and state the session no longer exists.
		if err := r.SetSessionState(testCtx(t), nil, nil); err != nil {
			t.Fatal(err)
		}
		if got := list(); got != "[m1 m2]" {
			t.Fatalf("after clearing st's state: sessions %v, want [m1 m2]", got)
		}
	})

	// S-LOCK-7 in a session: defer and receive by sequence number through the session
	// receiver; ReceiveAndDelete session receivers consume on delivery (S-RCV-1).
	t.Run("DeferAndReceiveAndDelete", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sdefer", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("s", "deferred"), sessMsg("s", "next"), sessMsg("rad", "gone"))
		r := e.accept(t, q, "s")
		m := receiveOne(t, r, 10*time.Second)
		if err := r.DeferMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		n := receiveOne(t, r, 10*time.Second)
		if string(n.Body) != "next" {
			t.Fatalf("got %q after defer", n.Body)
		}
		ds, err := r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err != nil || len(ds) != 1 || string(ds[0].Body) != "deferred" {
			t.Fatalf("receive deferred: %v, %v", err, bodies(ds))
		}
		if err := r.CompleteMessage(testCtx(t), ds[0], nil); err != nil {
			t.Fatalf("complete deferred session message: %v", err)
		}
		if err := r.CompleteMessage(testCtx(t), n, nil); err != nil {
			t.Fatal(err)
		}
		if p := peekAll(t, r); len(p) != 0 {
			t.Fatalf("session not empty: %v", bodies(p))
		}

		rad, err := e.c.AcceptSessionForQueue(testCtx(t), q, "rad", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		defer rad.Close(context.Background())
		if m := receiveOne(t, rad, 10*time.Second); string(m.Body) != "gone" {
			t.Fatalf("got %q", m.Body)
		}
		if p := peekAll(t, rad); len(p) != 0 {
			t.Fatalf("left after receive-and-delete: %v", bodies(p))
		}
	})

	// S-SES-7: request/response over sessions: the requester sets ReplyToSessionID to its
	// own id and reads its replies by accepting that session on the reply queue.
	t.Run("RequestResponse", func(t *testing.T) {
		t.Parallel()
		requests := e.queue(t, "requests", nil)
		replies := e.queue(t, "replies", sessionQueue(""))
		// Accept first, so the reply is addressed to a session already held by us.
		mine := e.accept(t, replies, "client-42")
		send(t, e.sender(t, requests), &azservicebus.Message{Body: []byte("ping"), ReplyTo: to.Ptr(replies), ReplyToSessionID: to.Ptr("client-42")},
			&azservicebus.Message{Body: []byte("ping-other"), ReplyTo: to.Ptr(replies), ReplyToSessionID: to.Ptr("client-7")})
		server := e.receiver(t, requests, nil)
		for _, req := range receiveN(t, server, 2, 10*time.Second) {
			send(t, e.sender(t, *req.ReplyTo), &azservicebus.Message{Body: append([]byte("pong:"), req.Body...), SessionID: req.ReplyToSessionID})
			if err := server.CompleteMessage(testCtx(t), req, nil); err != nil {
				t.Fatal(err)
			}
		}
		m := receiveOne(t, mine, 10*time.Second)
		if string(m.Body) != "pong:ping" {
			t.Fatalf("requester got %q", m.Body)
		}
		expectNothing(t, mine, 500*time.Millisecond)
	})
	// S-TTL-5: when any message of a session has expired, all messages of that session
	// expire (here: dead-lettered) when a receiver accepts the session; other sessions
	// are unaffected.
	t.Run("SessionExpiresAsAWhole", func(t *testing.T) {
		t.Parallel()
		p := sessionQueue("")
		p.DeadLetteringOnMessageExpiration = to.Ptr(true)
		q := e.queue(t, "sttl", p)
		send(t, e.sender(t, q),
			&azservicebus.Message{SessionID: to.Ptr("s"), Body: []byte("short"), TimeToLive: to.Ptr(time.Second)},
			sessMsg("s", "long"), sessMsg("other", "fine"))
		time.Sleep(2 * time.Second) // let the first message expire
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r, err := e.c.AcceptSessionForQueue(ctx, q, "s", nil); err == nil {
			got := receiveUpTo(t, r, 1, 2*time.Second)
			r.Close(context.Background())
			if len(got) != 0 {
				t.Fatalf("session with an expired message delivered %q", got[0].Body)
			}
		}
		ds := receiveN(t, e.dlq(t, q), 2, 10*time.Second)
		for _, d := range ds {
			if deref(d.DeadLetterReason) != "TTLExpiredException" {
				t.Errorf("%s dead-lettered with reason %v", d.Body, deref(d.DeadLetterReason))
			}
		}
		if got := receiveOne(t, e.accept(t, q, "other"), 10*time.Second); string(got.Body) != "fine" {
			t.Fatalf("other session got %q", got.Body)
		}
	})
	// S-SES-2, S-SES-4, S-SES-6: once a session lock expired and another client accepted
	// the session, the old holder has lost it: it cannot renew it or receive the
	// session's new messages, and closing it does not release the new holder's lock.
	t.Run("OldHolderLostSession", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sowner", sessionQueue("PT5S"))
		send(t, e.sender(t, q), sessMsg("s", "1"))
		a := e.isolated(t).accept(t, q, "s") // A's errors below are fatal for its connection
		receiveOne(t, a, 10*time.Second)
		clientB := e.n.Client(t)
		var b *azservicebus.SessionReceiver
		testutil.WaitFor(t, 20*time.Second, func() error { // B accepts the expired session
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			b, err = clientB.AcceptSessionForQueue(ctx, q, "s", nil)
			return err
		})
		defer b.Close(context.Background())
		if m := receiveOne(t, b, 10*time.Second); m.DeliveryCount != 2 {
			t.Errorf("B got DeliveryCount %d, want 2", m.DeliveryCount)
		}
		if err := a.RenewSessionLock(testCtx(t), nil); err == nil {
			t.Errorf("A renewed the session lock that B holds")
		}
		send(t, e.sender(t, q), sessMsg("s", "2"))
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer rcancel()
		if got, _ := a.ReceiveMessages(rctx, 1, nil); len(got) != 0 { // an error is fine: A lost the session
			t.Errorf("A (lock lost) received %q from the session B holds", got[0].Body)
		}
		a.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if c, err := e.n.Client(t).AcceptSessionForQueue(ctx, q, "s", nil); err == nil {
			c.Close(context.Background())
			t.Errorf("a third client accepted session s while B holds it (A's close released B's lock)")
		}
		if m := receiveOne(t, b, 10*time.Second); string(m.Body) != "2" {
			t.Errorf("B got %q", m.Body)
		}
	})
	// S-SES-2, S-SES-4, S-SES-6: a session lock belongs to the connection that accepted
	// it. A client on another connection on the same node cannot accept the session,
	// settle its messages by lock token, renew its lock, set its state or receive its
	// deferred messages: not through the SDK, nor naming the session in raw $management
	// requests. The holder still can do all of it afterwards.
	t.Run("HeldPerConnection", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sconn", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("s", "1"), sessMsg("s", "2"), sessMsg("other", "o"))
		a := e.isolated(t).accept(t, q, "s")
		ms := receiveN(t, a, 2, 10*time.Second)
		if err := a.DeferMessage(testCtx(t), ms[1], nil); err != nil {
			t.Fatal(err)
		}
		if err := a.SetSessionState(testCtx(t), []byte("A"), nil); err != nil {
			t.Fatal(err)
		}
		tok, deferred := ms[0].LockToken, *ms[1].SequenceNumber

		// Connection B, through the SDK.
		b := e.n.Client(t)
		if r, err := b.AcceptSessionForQueue(testCtx(t), q, "s", nil); err == nil {
			r.Close(context.Background())
			t.Fatalf("connection B accepted the session A holds")
		}
		bo, err := b.AcceptSessionForQueue(testCtx(t), q, "other", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer bo.Close(context.Background())
		// The broker answers lock-lost at once; a session receiver's SDK then recovers its
		// link and retries for a long while, so bound the call. A completes the message
		// below, which shows B did not.
		bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer bcancel()
		if err := bo.CompleteMessage(bctx, &azservicebus.ReceivedMessage{LockToken: tok}, nil); err == nil {
			t.Errorf("connection B completed A's message by lock token")
		}

		// Connection B, naming A's session in $management requests.
		raw := e.rawMgmt(t, q)
		for _, c := range []struct {
			op   string
			body map[string]any
		}{
			{"com.microsoft:renew-session-lock", map[string]any{"session-id": "s"}},
			{"com.microsoft:set-session-state", map[string]any{"session-id": "s", "session-state": []byte("B")}},
			{"com.microsoft:update-disposition", map[string]any{"session-id": "s", "disposition-status": "completed", "lock-tokens": []amqp.UUID{amqp.UUID(tok)}}},
			{"com.microsoft:update-disposition", map[string]any{"disposition-status": "abandoned", "lock-tokens": []amqp.UUID{amqp.UUID(tok)}}},
			{"com.microsoft:renew-lock", map[string]any{"session-id": "s", "lock-tokens": []amqp.UUID{amqp.UUID(tok)}}},
			{"com.microsoft:receive-by-sequence-number", map[string]any{"session-id": "s", "sequence-numbers": []int64{deferred}, "receiver-settle-mode": uint32(1)}},
		} {
			st := raw.call(t, c.op, c.body)
			if c.op == "com.microsoft:renew-lock" {
				// A session message's lock is the session's: renewing it changes nothing
				// (fsm RenewLock), so it may answer 200; it must not break A's lock.
				continue
			}
			if st != 410 {
				t.Errorf("connection B: %s %v answered %d, want 410 (lock lost)", c.op, c.body["disposition-status"], st)
			}
		}

		// A still holds the session and everything in it.
		if st, err := a.GetSessionState(testCtx(t), nil); err != nil || string(st) != "A" {
			t.Errorf("A's session state %q, err %v; want %q", st, err, "A")
		}
		if err := a.RenewSessionLock(testCtx(t), nil); err != nil {
			t.Errorf("A renews: %v", err)
		}
		if err := a.SetSessionState(testCtx(t), nil, nil); err != nil {
			t.Errorf("A clears its state: %v", err)
		}
		if err := a.CompleteMessage(testCtx(t), ms[0], nil); err != nil {
			t.Errorf("A completes its message: %v", err)
		}
		def, err := a.ReceiveDeferredMessages(testCtx(t), []int64{deferred}, nil)
		if err != nil || len(def) != 1 {
			t.Fatalf("A receives its deferred message: %d %v", len(def), err)
		}
		if err := a.CompleteMessage(testCtx(t), def[0], nil); err != nil {
			t.Errorf("A completes its deferred message: %v", err)
		}
	})

	// S-SES-5: session state may be large (here 200 kB, several AMQP frames).
	t.Run("LargeState", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sbig", sessionQueue(""))
		send(t, e.sender(t, q), sessMsg("s", "x"))
		r := e.accept(t, q, "s")
		state := make([]byte, 200*1024)
		for i := range state {
			state[i] = byte(i % 251)
		}
		if err := r.SetSessionState(testCtx(t), state, nil); err != nil {
			t.Fatal(err)
		}
		got, err := r.GetSessionState(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(state) {
			t.Fatalf("state of %d bytes came back as %d bytes (or changed)", len(state), len(got))
		}
	})

	// S-SES-2: concurrent accept-next calls each get a different session.
	t.Run("ConcurrentAcceptNext", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sconc", sessionQueue(""))
		s := e.sender(t, q)
		const n = 5
		for i := range n {
			send(t, s, sessMsg(fmt.Sprint("s", i), "x"))
		}
		ids := make(chan string, n)
		errs := make(chan error, n)
		for range n {
			c := e.n.Client(t)
			go func() {
				r, err := c.AcceptNextSessionForQueue(testCtx(t), q, nil)
				if err != nil {
					errs <- err
					return
				}
				ids <- r.SessionID() // the receiver stays open (closed with its client) so the lock is kept
			}()
		}
		var got []string
		for range n {
			select {
			case id := <-ids:
				got = append(got, id)
			case err := <-errs:
				t.Fatalf("accept-next: %v", err)
			}
		}
		slices.Sort(got)
		if fmt.Sprint(got) != "[s0 s1 s2 s3 s4]" {
			t.Fatalf("concurrent accept-next got %v, want each session once", got)
		}
	})
	// S-SES-1, S-SEND-5: a batch in which one message lacks a SessionId is rejected as a
	// whole; a batch spanning several sessions is accepted.
	t.Run("BatchAllOrNothing", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "sbatch", sessionQueue(""))
		s := e.isolated(t).sender(t, q)
		batch := func(msgs ...*azservicebus.Message) error {
			b, err := s.NewMessageBatch(testCtx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if err := b.AddMessage(m, nil); err != nil {
					t.Fatal(err)
				}
			}
			return s.SendMessageBatch(testCtx(t), b, nil)
		}
		if err := batch(sessMsg("a", "a1"), body("no-session"), sessMsg("a", "a2")); err == nil {
			t.Fatalf("batch with a message without SessionId accepted")
		}
		if err := batch(sessMsg("a", "a3"), sessMsg("b", "b1"), sessMsg("a", "a4")); err != nil {
			t.Fatal(err)
		}
		ra := e.accept(t, q, "a")
		if got := fmt.Sprint(bodies(receiveN(t, ra, 2, 10*time.Second))); got != "[a3 a4]" {
			t.Fatalf("session a holds %v, want only the accepted batch's [a3 a4]", got)
		}
		expectNothing(t, ra, 500*time.Millisecond)
		if m := receiveOne(t, e.accept(t, q, "b"), 10*time.Second); string(m.Body) != "b1" {
			t.Fatalf("session b got %q", m.Body)
		}
	})
	// S-SCH-1 in a session: a scheduled session message reaches the session's holder at
	// its time, and not before.
	t.Run("ScheduledInSession", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "ssched", sessionQueue(""))
		at := time.Now().Add(3 * time.Second)
		seqs, err := e.sender(t, q).ScheduleMessages(testCtx(t), []*azservicebus.Message{sessMsg("s", "later")}, at, nil)
		if err != nil || len(seqs) != 1 {
			t.Fatalf("schedule: %v %v", seqs, err)
		}
		r := e.accept(t, q, "s")
		if p := peekAll(t, r); len(p) != 1 || p[0].State != azservicebus.MessageStateScheduled {
			t.Fatalf("peek in session: %v", bodies(p))
		}
		expectNothing(t, r, time.Until(at)-time.Second)
		m := receiveOne(t, r, 10*time.Second)
		if string(m.Body) != "later" || time.Now().Before(at) || *m.SequenceNumber != seqs[0] {
			t.Fatalf("got %q seq %d at %v (scheduled %v)", m.Body, *m.SequenceNumber, time.Now(), at)
		}
	})
}
