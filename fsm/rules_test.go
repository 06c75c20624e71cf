package fsm

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// S-SEND-5: sequence numbers are unique, increasing and never reused; EnqueuedTime and
// ExpiresAt are stamped; a batch is all or nothing.
func TestS_SEND_5_SequenceNumbersAndBatches(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxMessageSizeBytes = 10
	cfg.Queue.DefaultTTLMs = 60_000
	x := newTF(t, cfg)
	s1 := x.send(msgOf("a"), msgOf("b"))
	got := x.recv(q, 2)
	if err := x.settle(q, Complete, got...); err != nil {
		t.Fatal(err)
	}
	r := x.one(&Enqueue{Messages: []*Message{msgOf("ok"), msgOf("far too large body")}})
	wantErr(t, r.Err, ErrMessageTooLarge)
	if st := x.stats(q); st.Total() != 0 {
		t.Fatalf("a rejected batch stored messages: %+v", st)
	}
	x.advance(5)
	s2 := x.send(msgOf("c"))
	if !slices.Equal(s1, []int64{1, 2}) || !slices.Equal(s2, []int64{3}) {
		t.Fatalf("seqs %v then %v", s1, s2)
	}
	m := x.recv(q, 1)[0]
	if m.EnqueuedTime != x.now || m.ExpiresAt != x.now+60_000 || m.SequenceNumber != 3 {
		t.Fatalf("stamps: enq %d exp %d seq %d (now %d)", m.EnqueuedTime, m.ExpiresAt, m.SequenceNumber, x.now)
	}
}

// S-SEND-6: too large is rejected; above the quota is rejected with quota exceeded.
func TestS_SEND_6_SizeLimits(t *testing.T) {
	cfg := queueCfg()
	cfg.MaxMessageSizeBytes = 100
	cfg.MaxSizeBytes = 250
	x := newTF(t, cfg)
	wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf(string(make([]byte, 101)))}}).Err, ErrMessageTooLarge)
	x.send(msgOf(string(make([]byte, 100))), msgOf(string(make([]byte, 100))))
	wantErr(t, x.one(&Enqueue{Messages: []*Message{msgOf(string(make([]byte, 51)))}}).Err, ErrQuotaExceeded)
	x.send(msgOf(string(make([]byte, 50))))
	if b := x.f.Stats().Bytes; b != 250 {
		t.Fatalf("bytes %d", b)
	}
	// Size, when the protocol layer sets it, is what counts.
	m := msgOf("x")
	m.Size = 101
	wantErr(t, x.one(&Enqueue{Messages: []*Message{m}}).Err, ErrMessageTooLarge)
}

// S-RCV-1: ReceiveAndDelete consumes at receive; PeekLock locks.
func TestS_RCV_1_ReceiveModes(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"))
	r := x.one(&Receive{Target: q, Mode: ReceiveAndDelete, Max: 1})
	if len(r.Messages) != 1 || r.Messages[0].LockToken != (LockToken{}) || r.Messages[0].DeliveryCount != 1 {
		t.Fatalf("RAD: %+v", r.Messages)
	}
	if st := x.stats(q); st.Active != 1 || st.Locked != 0 {
		t.Fatalf("after RAD: %+v", st)
	}
	m := x.recv(q, 5)
	if len(m) != 1 || m[0].LockToken == (LockToken{}) || m[0].LockedUntil != x.now+60_000 {
		t.Fatalf("peek-lock: %+v", m)
	}
}

// S-RCV-2: delivery in sequence order; an abandoned message goes back to the front.
func TestS_RCV_2_OrderAndAbandonToFront(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("1"), msgOf("2"), msgOf("3"))
	a := x.recv(q, 1)
	if err := x.settle(q, Abandon, a...); err != nil {
		t.Fatal(err)
	}
	got := x.recv(q, 3)
	if !slices.Equal(bodies(got), []string{"1", "2", "3"}) || got[0].DeliveryCount != 2 || got[1].DeliveryCount != 1 {
		t.Fatalf("got %v", bodies(got))
	}
}

// S-LOCK-1: an exclusive lock until now+LockDuration; others get the next messages.
// Also checks the LockToken layout (GroupID | Salt | counter).
func TestS_LOCK_1_ExclusiveLockAndTokenLayout(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"))
	x.salt = 0x0a0b0c0c
	a := x.recv(q, 1)[0]
	b := x.recv(q, 1)[0]
	if string(a.Payload) != "a" || string(b.Payload) != "b" || len(x.recv(q, 1)) != 0 {
		t.Fatal("lock not exclusive")
	}
	tok := a.LockToken
	if binary.BigEndian.Uint32(tok[0:4]) != 7 || binary.BigEndian.Uint32(tok[4:8]) != 0x0a0b0c0d ||
		binary.BigEndian.Uint64(tok[8:16]) != 1 || binary.BigEndian.Uint64(b.LockToken[8:16]) != 2 {
		t.Fatalf("token layout %x", tok)
	}
	if a.LockedUntil != x.now+60_000 || x.f.NextDeadline() != a.LockedUntil {
		t.Fatalf("locked until %d, next deadline %d", a.LockedUntil, x.f.NextDeadline())
	}
}

// S-LOCK-2: complete removes the message and reports success.
func TestS_LOCK_2_Complete(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)
	if err := x.settle(q, Complete, m...); err != nil {
		t.Fatal(err)
	}
	if st := x.stats(q); st.Total() != 0 || x.f.Stats().Bytes != 0 || x.f.NextDeadline() != NeverMs {
		t.Fatalf("after complete %+v", st)
	}
}

// S-LOCK-3: abandon releases at once, optionally modifying application properties.
func TestS_LOCK_3_AbandonWithProperties(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a", withProp("k", rule.Value{Kind: rule.KindInt, N: 1})))
	m := x.recv(q, 1)[0]
	r := x.one(&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: Abandon,
		Properties: []rule.Property{{Key: "k", Value: rule.Value{Kind: rule.KindString, S: "two"}}}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	again := x.recv(q, 1)[0]
	if v, _ := again.Get("k"); v.S != "two" || !again.Modified || again.DeliveryCount != 2 {
		t.Fatalf("after abandon: %+v modified %v", again.App, again.Modified)
	}
	if v, _ := m.Get("k"); v.Kind != rule.KindInt {
		t.Fatal("an earlier receive's copy changed")
	}
}

// S-LOCK-4: lock expiry has the effect of abandon.
func TestS_LOCK_4_LockExpiryIsAbandon(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	x.advance(59_999)
	x.tick()
	if len(x.recv(q, 1)) != 0 {
		t.Fatal("delivered while locked")
	}
	x.now = m.LockedUntil
	x.tick()
	again := x.recv(q, 1)
	if len(again) != 1 || again[0].DeliveryCount != 2 {
		t.Fatalf("not redelivered after lock expiry: %+v", again)
	}
	wantErr(t, x.settle(q, Complete, m), ErrLockLost)
}

// S-LOCK-5: delivered MaxDeliveryCount times then abandoned or expired -> DLQ.
func TestS_LOCK_5_MaxDeliveryCountToDLQ(t *testing.T) {
	for _, viaExpiry := range []bool{false, true} {
		cfg := queueCfg()
		cfg.Queue.MaxDeliveryCount = 3
		x := newTF(t, cfg)
		x.send(msgOf("a"))
		for i := int32(1); i <= 3; i++ {
			m := x.recv(q, 1)
			if len(m) != 1 || m[0].DeliveryCount != i {
				t.Fatalf("delivery %d: %+v", i, m)
			}
			if viaExpiry {
				x.advance(60_000)
				x.tick()
			} else if err := x.settle(q, Abandon, m...); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(x.recv(q, 1)); n != 0 {
			t.Fatal("still in the queue")
		}
		d := x.recv(dlq, 1)
		if len(d) != 1 || d[0].DeadLetter == nil || d[0].DeadLetter.Reason != "MaxDeliveryCountExceeded" {
			t.Fatalf("dlq: %+v", d)
		}
		if v, _ := d[0].Get("DeadLetterReason"); v.S != "MaxDeliveryCountExceeded" || !d[0].Modified {
			t.Fatal("reason not in application properties")
		}
	}
}

// Release (client released an unsettled delivery): unlock without counting.
func TestReleaseDoesNotCount(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.MaxDeliveryCount = 1
	x := newTF(t, cfg)
	x.send(msgOf("a"))
	for i := 0; i < 3; i++ {
		m := x.recv(q, 1)
		if len(m) != 1 || m[0].DeliveryCount != 1 {
			t.Fatalf("round %d: %+v", i, m)
		}
		if err := x.settle(q, Release, m...); err != nil {
			t.Fatal(err)
		}
	}
}

// S-LOCK-6: dead-letter with reason and description.
func TestS_LOCK_6_DeadLetter(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	r := x.one(&Settle{Target: q, Tokens: []LockToken{m.LockToken}, Disposition: DeadLetter,
		Reason: "bad", Description: "very bad", Properties: []rule.Property{{Key: "x", Value: rule.Value{Kind: rule.KindBool, N: 1}}}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	d := x.recv(dlq, 1)[0]
	dr, _ := d.Get("DeadLetterReason")
	dd, _ := d.Get("DeadLetterErrorDescription")
	xv, _ := d.Get("x")
	if d.DeadLetter.Reason != "bad" || d.DeadLetter.Description != "very bad" || dr.S != "bad" || dd.S != "very bad" || xv.N != 1 {
		t.Fatalf("dead letter %+v %+v", d.DeadLetter, d.App)
	}
	if d.SequenceNumber != m.SequenceNumber {
		t.Fatal("dead-lettering changed the sequence number")
	}
}

// S-LOCK-7: a deferred message is received only by sequence number.
func TestS_LOCK_7_Defer(t *testing.T) {
	x := newTF(t, queueCfg())
	seqs := x.send(msgOf("a"), msgOf("b"))
	m := x.recv(q, 1)
	if err := x.settle(q, Defer, m...); err != nil {
		t.Fatal(err)
	}
	if got := x.recv(q, 5); !slices.Equal(bodies(got), []string{"b"}) {
		t.Fatalf("normal receive got %v", bodies(got))
	}
	if st := x.stats(q); st.Deferred != 1 {
		t.Fatalf("stats %+v", st)
	}
	wantErr(t, x.one(&ReceiveDeferred{Target: q, SeqNos: []int64{seqs[1]}}).Err, ErrNotFound)
	r := x.one(&ReceiveDeferred{Target: q, SeqNos: []int64{seqs[0]}, Salt: 9})
	if r.Err != nil || len(r.Messages) != 1 || r.Messages[0].State != StateDeferred || r.Messages[0].DeliveryCount != 2 {
		t.Fatalf("receive deferred: %v %+v", r.Err, r.Messages)
	}
	if err := x.settle(q, Abandon, r.Messages...); err != nil { // stays deferred
		t.Fatal(err)
	}
	r = x.one(&ReceiveDeferred{Target: q, SeqNos: []int64{seqs[0]}})
	if err := x.settle(q, Complete, r.Messages...); err != nil {
		t.Fatal(err)
	}
	if st := x.stats(q); st.Deferred != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// S-LOCK-8: renew sets LockedUntil = now + LockDuration.
func TestS_LOCK_8_RenewLock(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)[0]
	x.advance(50_000)
	r := x.one(&RenewLock{Target: q, Tokens: []LockToken{m.LockToken}})
	if r.Err != nil || r.LockedUntil[0] != x.now+60_000 {
		t.Fatalf("renew: %v %v", r.Err, r.LockedUntil)
	}
	x.advance(50_000)
	x.tick()
	if err := x.settle(q, Complete, m); err != nil {
		t.Fatalf("complete after renew: %v", err)
	}
}

// S-LOCK-9: settling an expired, settled or stale lock fails with lock-lost; the
// message is redelivered.
func TestS_LOCK_9_LockLost(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"))
	a := x.recv(q, 1)[0]
	stale := *a
	stale.LockToken[5] ^= 1 // another salt
	for _, d := range []Disposition{Complete, Abandon, DeadLetter, Defer, Release} {
		wantErr(t, x.settle(q, d, &stale), ErrLockLost)
	}
	wantErr(t, x.one(&RenewLock{Target: q, Tokens: []LockToken{stale.LockToken}}).Err, ErrLockLost)
	b := x.recv(q, 1)[0]
	r := x.one(&Settle{Target: q, Tokens: []LockToken{a.LockToken, stale.LockToken, b.LockToken}, Disposition: Complete})
	if r.TokenErrs[0] != nil || r.TokenErrs[1] == nil || r.TokenErrs[2] != nil {
		t.Fatalf("token errors %v", r.TokenErrs)
	}
	wantErr(t, r.Err, ErrLockLost)
	wantErr(t, x.settle(q, Abandon, a), ErrLockLost) // already completed (S-LOCK-12 answers only a repeat)
	wantErr(t, x.settle(Target{Sub: "nope"}, Complete, a), ErrNotFound)
}

// S-LOCK-11: peek neither locks nor counts, and shows every state.
func TestS_LOCK_11_Peek(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"), msgOf("c", withSched(t0+1000)))
	m := x.recv(q, 1)
	if err := x.settle(q, Defer, m...); err != nil {
		t.Fatal(err)
	}
	x.recv(q, 1) // b locked
	p := x.f.Peek(q, 0, 10)
	if len(p) != 3 || p[0].State != StateDeferred || p[1].LockToken == (LockToken{}) || p[2].State != StateScheduled {
		t.Fatalf("peek %+v", p)
	}
	if p[0].DeliveryCount != 1 || p[2].DeliveryCount != 0 {
		t.Fatal("peek changed delivery counts")
	}
	if p := x.f.Peek(q, 2, 1); len(p) != 1 || p[0].SequenceNumber != 2 {
		t.Fatalf("peek from 2: %+v", p)
	}
	p[0].App = append(p[0].App, rule.Property{Key: "mutated"})
	if again := x.f.Peek(q, 2, 1); len(again[0].App) != 0 {
		t.Fatal("peek returned internal state")
	}
}

// S-DLQ-1: the DLQ is received like a queue; its messages never expire and are never
// dead-lettered again.
func TestS_DLQ_1_DeadLetterQueue(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.MaxDeliveryCount = 1
	cfg.Queue.DefaultTTLMs = 1000
	cfg.Queue.DeadLetterOnExpiration = true
	x := newTF(t, cfg)
	x.send(msgOf("a"))
	x.advance(1000)
	x.tick()
	if st := x.stats(dlq); st.Active != 1 {
		t.Fatalf("dlq %+v", st)
	}
	x.advance(10_000_000)
	x.tick()
	for i := 0; i < 3; i++ {
		d := x.recv(dlq, 1)
		if len(d) != 1 || d[0].DeadLetter.Reason != "TTLExpiredException" {
			t.Fatalf("round %d: %+v", i, d)
		}
		if err := x.settle(dlq, Abandon, d...); err != nil {
			t.Fatal(err)
		}
	}
	d := x.recv(dlq, 1)
	if err := x.settle(dlq, DeadLetter, d...); err != nil {
		t.Fatal(err)
	}
	r := x.one(&Receive{Target: dlq, Mode: ReceiveAndDelete, Max: 5})
	if len(r.Messages) != 1 || x.stats(dlq).Total() != 0 {
		t.Fatalf("RAD from DLQ: %+v", r.Messages)
	}
}

// S-TTL-1: effective TTL = min(message TTL, entity default, topic default).
func TestS_TTL_1_EffectiveTTL(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.DefaultTTLMs = 5000
	x := newTF(t, cfg)
	x.send(msgOf("a", withTTL(1000)), msgOf("b", withTTL(9000)), msgOf("c"))
	p := x.f.Peek(q, 0, 3)
	if p[0].ExpiresAt != t0+1000 || p[1].ExpiresAt != t0+5000 || p[2].ExpiresAt != t0+5000 {
		t.Fatalf("expires %d %d %d", p[0].ExpiresAt, p[1].ExpiresAt, p[2].ExpiresAt)
	}
	tc := topicCfg("s1")
	tc.Queue.DefaultTTLMs = 3000
	tc.Subscriptions[0].Queue.DefaultTTLMs = 4000
	y := newTF(t, tc)
	y.send(msgOf("a"), msgOf("b", withTTL(2000)))
	p = y.f.Peek(Target{Sub: "s1"}, 0, 2)
	if p[0].ExpiresAt != t0+3000 || p[1].ExpiresAt != t0+2000 {
		t.Fatalf("topic expires %d %d", p[0].ExpiresAt, p[1].ExpiresAt)
	}
	z := newTF(t, queueCfg())
	z.send(msgOf("never"))
	if p := z.f.Peek(q, 0, 1); p[0].ExpiresAt != NeverMs || z.f.NextDeadline() != NeverMs {
		t.Fatal("default TTL is not never")
	}
}

// S-TTL-2 and S-SCH-1: a scheduled message is enqueued at its scheduled time and expires
// TTL after that; it can be cancelled before.
func TestS_TTL_2_ScheduledExpiry(t *testing.T) {
	x := newTF(t, queueCfg())
	at := t0 + 5*60_000
	r := x.one(&Schedule{Messages: []*Message{msgOf("a", withSched(at), withTTL(10*60_000))}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	p := x.f.Peek(q, 0, 1)[0]
	if p.EnqueuedTime != at || p.ExpiresAt != t0+15*60_000 || p.State != StateScheduled {
		t.Fatalf("scheduled %+v", p)
	}
	if x.f.NextDeadline() != at {
		t.Fatalf("next deadline %d", x.f.NextDeadline())
	}
}

func TestS_SCH_1_ScheduleAndCancel(t *testing.T) {
	x := newTF(t, queueCfg())
	r := x.one(&Schedule{Messages: []*Message{msgOf("a", withSched(t0+1000)), msgOf("b", withSched(t0+2000))}})
	if len(x.recv(q, 5)) != 0 || x.stats(q).Scheduled != 2 {
		t.Fatal("scheduled message receivable early")
	}
	if e := x.one(&CancelScheduled{SeqNos: []int64{r.SeqNos[1]}}).Err; e != nil {
		t.Fatal(e)
	}
	wantErr(t, x.one(&CancelScheduled{SeqNos: []int64{r.SeqNos[1]}}).Err, ErrNotFound)
	x.now = t0 + 1000
	got := x.recv(q, 5) // deadlines run before the commands of an entry
	if !slices.Equal(bodies(got), []string{"a"}) || got[0].State != StateActive {
		t.Fatalf("got %v", bodies(got))
	}
	wantErr(t, x.one(&CancelScheduled{SeqNos: []int64{r.SeqNos[0]}}).Err, ErrNotFound)
}

// S-TTL-3: a locked message past expiry can be completed; once unlocked it expires.
func TestS_TTL_3_LockedPastExpiry(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.DeadLetterOnExpiration = true
	x := newTF(t, cfg)
	x.send(msgOf("a", withTTL(1000)), msgOf("b", withTTL(1000)), msgOf("c", withTTL(1000)))
	ms := x.recv(q, 2)
	x.advance(2000)
	x.tick()
	if len(x.recv(q, 5)) != 0 {
		t.Fatal("expired message delivered")
	}
	if err := x.settle(q, Complete, ms[0]); err != nil {
		t.Fatalf("complete past expiry: %v", err)
	}
	if err := x.settle(q, Abandon, ms[1]); err != nil {
		t.Fatal(err)
	}
	d := x.recv(dlq, 5) // S-TTL-4: the completed one is not dead-lettered
	if !slices.Equal(bodies(d), []string{"b", "c"}) {
		t.Fatalf("dlq %v", bodies(d))
	}
}

// S-TTL-4: on expiry, drop or dead-letter.
func TestS_TTL_4_ExpiryDropOrDLQ(t *testing.T) {
	for _, dl := range []bool{false, true} {
		cfg := queueCfg()
		cfg.Queue.DefaultTTLMs = 1000
		cfg.Queue.DeadLetterOnExpiration = dl
		x := newTF(t, cfg)
		x.send(msgOf("a"), msgOf("b"))
		m := x.recv(q, 1)
		if err := x.settle(q, Defer, m...); err != nil { // deferred messages expire too
			t.Fatal(err)
		}
		if x.f.NextDeadline() != t0+1000 {
			t.Fatalf("next deadline %d", x.f.NextDeadline())
		}
		x.advance(1000)
		x.tick()
		if st := x.stats(q); st.Total() != 0 {
			t.Fatalf("not expired: %+v", st)
		}
		want := int64(0)
		if dl {
			want = 2
		}
		if st := x.stats(dlq); st.Active != want {
			t.Fatalf("dlq %+v", st)
		}
	}
}

// Tick cost: only due deadlines are touched, and NextDeadline tracks the earliest.
func TestTickOnlyDue(t *testing.T) {
	x := newTF(t, queueCfg())
	for i := 0; i < 100; i++ {
		x.send(msgOf("m", withTTL(int64(1000+i*10))))
	}
	x.now = t0 + 1000 + 45*10
	x.tick()
	if st := x.stats(q); st.Active != 54 || x.f.NextDeadline() != t0+1000+46*10 {
		t.Fatalf("active %d next %d", st.Active, x.f.NextDeadline()-t0)
	}
}

// S-DUP-1: a MessageId seen within the window is acknowledged but not stored again.
func TestS_DUP_1_DuplicateDetection(t *testing.T) {
	cfg := queueCfg()
	cfg.RequiresDuplicateDetection = true
	cfg.DuplicateWindowMs = 20_000
	x := newTF(t, cfg)
	r := x.one(&Enqueue{Messages: []*Message{msgOf("a", withID("m1")), msgOf("a2", withID("m1")), msgOf("b", withID("m2"))}})
	if r.Err != nil || !slices.Equal(r.SeqNos, []int64{1, 1, 2}) || r.Duplicates != 1 {
		t.Fatalf("batch: %v %v %d", r.Err, r.SeqNos, r.Duplicates)
	}
	x.advance(10_000)
	r = x.one(&Enqueue{Messages: []*Message{msgOf("a3", withID("m1"))}})
	if r.SeqNos[0] != 1 || r.Duplicates != 1 || x.stats(q).Active != 2 {
		t.Fatalf("duplicate stored: %+v", r)
	}
	if x.f.NextDeadline() != t0+20_000 {
		t.Fatalf("pruning deadline %d", x.f.NextDeadline()-t0)
	}
	x.advance(10_000)
	x.tick()
	r = x.one(&Enqueue{Messages: []*Message{msgOf("a4", withID("m1"))}})
	if r.SeqNos[0] != 3 || r.Duplicates != 0 {
		t.Fatalf("after the window: %+v", r)
	}
	y := newTF(t, queueCfg()) // without duplicate detection nothing is dropped
	if s := y.send(msgOf("a", withID("m1")), msgOf("a", withID("m1"))); !slices.Equal(s, []int64{1, 2}) {
		t.Fatalf("seqs %v", s)
	}
}

// S-ENT-3: changing properties releases the locks; holders get lock-lost.
func TestS_ENT_3_UpdateReleasesLocks(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)
	cfg := queueCfg()
	cfg.Queue.LockDurationMs = 30_000
	x.one(&UpdateEntity{Config: cfg})
	wantErr(t, x.settle(q, Complete, m...), ErrLockLost)
	again := x.recv(q, 1)
	if len(again) != 1 || again[0].DeliveryCount != 1 || again[0].LockedUntil != x.now+30_000 {
		t.Fatalf("after update %+v", again)
	}
	if x.f.Config().Queue.LockDurationMs != 30_000 {
		t.Fatal("config not applied")
	}
}

// S-ENT-2 Status: Disabled and SendDisabled reject sends; Disabled and ReceiveDisabled
// reject receives.
func TestS_ENT_2_Status(t *testing.T) {
	for _, tc := range []struct {
		st            Status
		send, receive bool
	}{{StatusActive, true, true}, {StatusDisabled, false, false}, {StatusSendDisabled, false, true}, {StatusReceiveDisabled, true, false}} {
		cfg := queueCfg()
		x := newTF(t, cfg)
		x.send(msgOf("a"))
		cfg.Queue.Status = tc.st
		x.one(&UpdateEntity{Config: cfg})
		if err := x.one(&Enqueue{Messages: []*Message{msgOf("b")}}).Err; (err == nil) != tc.send {
			t.Fatalf("%v send: %v", tc.st, err)
		} else if err != nil {
			wantErr(t, err, ErrEntityDisabled)
		}
		if err := x.one(&Receive{Target: q, Max: 1}).Err; (err == nil) != tc.receive {
			t.Fatalf("%v receive: %v", tc.st, err)
		}
	}
}

func TestPurge(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"), msgOf("b"), msgOf("c", withSched(t0+10)))
	m := x.recv(q, 1)
	r := x.one(&Purge{Target: q})
	if r.Err != nil || r.Count != 3 || x.stats(q).Total() != 0 || x.f.Stats().Bytes != 0 || x.f.NextDeadline() != NeverMs {
		t.Fatalf("purge %+v %+v", r, x.stats(q))
	}
	wantErr(t, x.settle(q, Complete, m...), ErrLockLost)
}

// S-LOCK-10: locks are replicated state: a replica restored from a snapshot (a new
// leader) honours the same tokens until the same LockedUntil, no longer.
func TestS_LOCK_10_LocksSurviveSnapshot(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("a", withSession("s")), msgOf("b", withSession("s")))
	x.accept("s", "o")
	ms := x.recvSess(q, "s", "o", 2)
	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r := New(Config{})
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	res := r.Apply(&Entry{Now: x.now + 30_000, Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{ms[0].LockToken}, Disposition: Complete, SessionID: "s", Owner: "o"},
		&RenewSession{Target: q, SessionID: "s", Owner: "o"},
	}})
	if res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("after restore: %v, %v", res[0].Err, res[1].Err)
	}
	res = r.Apply(&Entry{Now: x.now + 90_000, Cmds: []Command{
		&Settle{Target: q, Tokens: []LockToken{ms[1].LockToken}, Disposition: Complete, SessionID: "s", Owner: "o"}}})
	wantErr(t, res[0].Err, ErrSessionLockLost)
}

// S-ENT-3 on a topic: only the subscription whose properties change loses its locks.
// Adding a subscription, changing another's rules or the topic's own properties leaves
// a holder's lock valid.
func TestS_ENT_3_TopicReleasesOnlyChangedSubscription(t *testing.T) {
	x := newTF(t, topicCfg("a", "b"))
	x.send(msgOf("1"), msgOf("2"))
	ta, tb := Target{Sub: "a"}, Target{Sub: "b"}
	ma := x.recv(ta, 1)
	mb := x.recv(tb, 1)

	cfg := topicCfg("a", "b", "c")                               // a new subscription
	cfg.Subscriptions[1].Rules[0].Filter.Kind = rule.FilterFalse // b's rule changes
	cfg.Queue.DefaultTTLMs = 3_600_000                           // the topic's own TTL changes
	x.one(&UpdateEntity{Config: cfg})
	if err := x.settle(ta, Complete, ma...); err != nil {
		t.Fatalf("a lost its lock to a change elsewhere: %v", err)
	}
	if err := x.settle(tb, Complete, mb...); err != nil {
		t.Fatalf("a rule change released b's lock: %v", err)
	}

	ma = x.recv(ta, 1)
	mb = x.recv(tb, 1)
	cfg.Subscriptions[0].Queue.LockDurationMs = 45_000 // a's own property changes
	x.one(&UpdateEntity{Config: cfg})
	wantErr(t, x.settle(ta, Complete, ma...), ErrLockLost)
	if err := x.settle(tb, Complete, mb...); err != nil {
		t.Fatalf("b lost its lock to a change of a: %v", err)
	}
}

// S-ENT-3: an update that changes nothing the queue runs with keeps the locks.
func TestS_ENT_3_NoChangeKeepsLocks(t *testing.T) {
	x := newTF(t, queueCfg())
	x.send(msgOf("a"))
	m := x.recv(q, 1)
	x.one(&UpdateEntity{Config: queueCfg()})
	if err := x.settle(q, Complete, m...); err != nil {
		t.Fatalf("an identical configuration released the lock: %v", err)
	}
}

// S-FWD-1, S-LOCK-6: a message enqueued with dead-letter information (forwarded out of a
// dead-letter queue) keeps it, including DeadLetterSource, and is an active message.
func TestForwardedDeadLetterKeepsItsSource(t *testing.T) {
	x := newTF(t, queueCfg())
	m := msgOf("a")
	m.DeadLetter = &DeadLetterInfo{Reason: "bad", Description: "why", Source: "orders"}
	x.send(m)
	got := x.recv(q, 1)
	if len(got) != 1 || got[0].DeadLetter == nil || *got[0].DeadLetter != (DeadLetterInfo{Reason: "bad", Description: "why", Source: "orders"}) {
		t.Fatalf("forwarded message %+v", got)
	}
	if x.stats(q).Active != 1 {
		t.Fatalf("not active: %+v", x.stats(q))
	}
}
