package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// S-DUR-1, S-LOCK-10, S-SEND-5, S-DUP-1, S-SES-5: what was acknowledged before a
// kill -9 is there after the restart: sent messages, completions, a held lock (still
// settleable by token through a new connection), deferred and scheduled messages,
// session state, duplicate-detection history; sequence numbers are not reused.
func TestDurabilityAcrossKill(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	q := e.queue(t, "dur", nil) // 60 s lock: still held after the restart
	sq := e.queue(t, "dursess", sessionQueue(""))
	dq := e.queue(t, "durdup", &admin.QueueProperties{RequiresDuplicateDetection: to.Ptr(true)})

	s := e.sender(t, q)
	for i := range 10 {
		send(t, s, body(fmt.Sprint(i)))
	}
	r := e.receiver(t, q, nil)
	msgs := receiveN(t, r, 5, 10*time.Second)
	for _, m := range msgs[:3] {
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DeferMessage(ctx, msgs[3], nil); err != nil {
		t.Fatal(err)
	}
	held := msgs[4] // locked, not settled
	at := time.Now().Add(time.Hour)
	schedSeqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{body("scheduled")}, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	sr := e.accept(t, sq, "s")
	if err := sr.SetSessionState(ctx, []byte("state-1"), nil); err != nil {
		t.Fatal(err)
	}
	send(t, e.sender(t, sq), sessMsg("s", "in-session"))
	// Release the session: a lock held at the crash would (rightly, S-LOCK-10) outlive it.
	if err := sr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// ... as this one does: session "held" stays locked (60 s) across the crash.
	send(t, e.sender(t, sq), sessMsg("held", "h"))
	e.accept(t, sq, "held")
	send(t, e.sender(t, dq), &azservicebus.Message{MessageID: to.Ptr("once"), Body: []byte("first")})
	var maxSeq int64
	for _, m := range msgs {
		maxSeq = max(maxSeq, *m.SequenceNumber)
	}

	e.n.Kill()
	e.n.Restart()
	e2 := &env{n: e.n, admin: e.n.AdminClient(t), c: e.n.Client(t)}

	r2 := e2.receiver(t, q, nil)
	p := peekAll(t, r2)
	if len(p) != 8 { // 10 - 3 completed + 1 scheduled
		t.Errorf("after restart peek shows %d messages, want 8: %v", len(p), bodies(p))
	}
	got := receiveN(t, r2, 5, 10*time.Second) // 5..9; not the held, deferred or scheduled ones
	if fmt.Sprint(bodies(got)) != "[5 6 7 8 9]" {
		t.Errorf("after restart received %v, want [5 6 7 8 9]", bodies(got))
	}
	for _, m := range got {
		if err := r2.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The lock taken before the crash is still valid and settles by token.
	if err := r2.CompleteMessage(ctx, &azservicebus.ReceivedMessage{LockToken: held.LockToken}, nil); err != nil {
		t.Errorf("complete of the lock held across the restart: %v", err)
	}
	ds, err := r2.ReceiveDeferredMessages(ctx, []int64{*msgs[3].SequenceNumber}, nil)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "3" {
		t.Fatalf("deferred after restart: %v %v", err, bodies(ds))
	}
	if err := r2.CompleteMessage(ctx, ds[0], nil); err != nil {
		t.Fatal(err)
	}
	p = peekAll(t, r2)
	if len(p) != 1 || p[0].State != azservicebus.MessageStateScheduled || *p[0].SequenceNumber != schedSeqs[0] {
		t.Fatalf("after settling, peek shows %v, want only the scheduled message", bodies(p))
	}

	// Sequence numbers continue, never reused.
	s2 := e2.sender(t, q)
	send(t, s2, body("new"))
	m := receiveOne(t, r2, 10*time.Second)
	if *m.SequenceNumber <= max(maxSeq, schedSeqs[0]) {
		t.Errorf("sequence number %d after restart, not above %d", *m.SequenceNumber, max(maxSeq, schedSeqs[0]))
	}

	sr2 := e2.accept(t, sq, "s")
	if st, err := sr2.GetSessionState(ctx, nil); err != nil || string(st) != "state-1" {
		t.Errorf("session state after restart: %q, %v", st, err)
	}
	if m := receiveOne(t, sr2, 10*time.Second); string(m.Body) != "in-session" {
		t.Errorf("session message after restart: %q", m.Body)
	}

	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	if hr, err := e2.n.Client(t).AcceptSessionForQueue(actx, sq, "held", nil); err == nil { // own connection: the refusal is fatal for it
		hr.Close(context.Background())
		t.Errorf("session locked before the crash was accepted again right after the restart (S-LOCK-10)")
	}

	send(t, e2.sender(t, dq), &azservicebus.Message{MessageID: to.Ptr("once"), Body: []byte("again")})
	dr := e2.receiver(t, dq, nil)
	if m := receiveOne(t, dr, 10*time.Second); string(m.Body) != "first" {
		t.Errorf("duplicate queue got %q", m.Body)
	}
	expectNothing(t, dr, time.Second)
}
