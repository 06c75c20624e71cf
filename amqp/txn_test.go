package amqp

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// go-amqp (and so the Go SDK) has no transaction API: these tests drive the coordinator
// with raw frames, as a .NET or Java client would send them (part 4).

// txnClient is a raw connection with a coordinator link (handle 0), a sender to q1
// (handle 1) and a peek-lock receiver on q1 (handle 2).
type txnClient struct {
	*rawClient
	nextID uint32 // next outgoing delivery-id
	recvd  uint32 // deliveries received on the receiver (its delivery-count)
}

func newTxnClient(t *testing.T, addr string) *txnClient {
	t.Helper()
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	first, mixed := frames.RcvFirst, uint8(2)
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "coord", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{},
		Target: &frames.Target{Coordinator: true, Capabilities: []Symbol{capLocalTxn}}}, nil)
	a := rc.waitFor(func(b frames.Body) bool { _, ok := b.(*frames.Attach); return ok }).(*frames.Attach)
	if a.Target == nil || !a.Target.Coordinator {
		t.Fatalf("coordinator attach answered with target %+v", a.Target)
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "snd", Handle: 1, Role: frames.RoleSender,
		Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
	rc.waitFor(func(b frames.Body) bool { f, ok := b.(*frames.Flow); return ok && f.Handle != nil && *f.Handle == 1 })
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "rcv", Handle: 2, Role: frames.RoleReceiver, SndSettleMode: &mixed, RcvSettleMode: &first,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	rc.waitFor(func(b frames.Body) bool { a, ok := b.(*frames.Attach); return ok && a.Name == "rcv" })
	return &txnClient{rawClient: rc}
}

// waitFor reads frames until one satisfies ok and returns it.
func (rc *rawClient) waitFor(ok func(frames.Body) bool) frames.Body {
	rc.t.Helper()
	for {
		b := rc.next()
		if ok(b) {
			return b
		}
	}
}

func amqpValue(v any) []byte {
	b := encoding.AppendDescriptor(nil, secValue)
	b, _ = encoding.Append(b, v)
	return b
}

// transfer sends one single-frame delivery on handle h and returns its delivery-id.
func (tc *txnClient) transfer(h uint32, payload []byte, st frames.DeliveryState) uint32 {
	id := tc.nextID
	tc.nextID++
	tc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: h, DeliveryID: &id, DeliveryTag: []byte{byte(id)}, State: st}, payload)
	return id
}

// outcome waits for the disposition of our delivery id.
func (tc *txnClient) outcome(id uint32) frames.DeliveryState {
	d := tc.waitFor(func(b frames.Body) bool {
		d, ok := b.(*frames.Disposition)
		return ok && d.Role == frames.RoleReceiver && d.First <= id && (d.Last == nil && d.First == id || d.Last != nil && *d.Last >= id)
	}).(*frames.Disposition)
	return d.State
}

func (tc *txnClient) declare() []byte {
	tc.t.Helper()
	st := tc.outcome(tc.transfer(0, amqpValue(&encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: encoding.List{}}), nil))
	d, ok := st.(*frames.Declared)
	if !ok || len(d.TxnID) == 0 {
		tc.t.Fatalf("declare answered %#v", st)
	}
	return d.TxnID
}

func (tc *txnClient) discharge(id []byte, fail bool) frames.DeliveryState {
	tc.t.Helper()
	return tc.outcome(tc.transfer(0, amqpValue(&encoding.Described{Descriptor: uint64(frames.CodeDischarge), Value: encoding.List{id, fail}}), nil))
}

// send sends a message with body in txn id on the q1 sender.
func (tc *txnClient) send(body string, id []byte) frames.DeliveryState {
	tc.t.Helper()
	msg := encoding.AppendDescriptor(nil, secData)
	msg, _ = encoding.Append(msg, []byte(body))
	return tc.outcome(tc.transfer(1, msg, &frames.TransactionalState{TxnID: id}))
}

// receive grants one credit on the receiver and returns the delivery-id it gets.
func (tc *txnClient) receive() uint32 {
	tc.t.Helper()
	h, credit, nid := uint32(2), uint32(1), uint32(0)
	dc := tc.recvd
	tc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &nid, IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, DeliveryCount: &dc, LinkCredit: &credit}, nil)
	tr := tc.waitFor(func(b frames.Body) bool { tr, ok := b.(*frames.Transfer); return ok && tr.Handle == 2 }).(*frames.Transfer)
	tc.recvd++
	return *tr.DeliveryID
}

// settle completes delivery id in txn, unsettled, and returns the broker's answer.
func (tc *txnClient) settle(id uint32, txnID []byte) frames.DeliveryState {
	tc.t.Helper()
	tc.frame(frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: id,
		State: &frames.TransactionalState{TxnID: txnID, Outcome: frames.Accepted{}}}, nil)
	d := tc.waitFor(func(b frames.Body) bool {
		d, ok := b.(*frames.Disposition)
		return ok && d.Role == frames.RoleSender && d.First == id
	}).(*frames.Disposition)
	return d.State
}

func wantTxnAccepted(t *testing.T, st frames.DeliveryState, id []byte) {
	t.Helper()
	ts, ok := st.(*frames.TransactionalState)
	if !ok || !bytes.Equal(ts.TxnID, id) {
		t.Fatalf("state %#v, want transactional-state(%x, accepted)", st, id)
	}
	if _, ok := ts.Outcome.(frames.Accepted); !ok {
		t.Fatalf("outcome %#v, want accepted", ts.Outcome)
	}
}

func wantRejected(t *testing.T, st frames.DeliveryState, cond string) {
	t.Helper()
	r, ok := st.(*frames.Rejected)
	if !ok || r.Error == nil || string(r.Error.Condition) != cond {
		t.Fatalf("state %#v, want rejected with %s", st, cond)
	}
	if !bytes.Contains([]byte(r.Error.Description), []byte("TrackingId:")) {
		t.Fatalf("description %q has no TrackingId", r.Error.Description)
	}
}

func (b *memBackend) bodies(path string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.entities[path].queues[0] {
		_, secs, _ := parseMessage(m.m.Raw)
		ds, _ := dataSections(secs.rest)
		for _, d := range ds {
			out = append(out, string(d))
		}
	}
	return out
}

func (b *memBackend) lockedCount(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.entities[path].queues[0] {
		if m.token != (UUID{}) {
			n++
		}
	}
	return n
}

// TestTxnCommitReceiveCompleteSend: a completion and a send inside a transaction apply
// at discharge, together, and not before.
func TestTxnCommitReceiveCompleteSend(t *testing.T) {
	_, b, addr := testServer(t, nil)
	seed := newTxnClient(t, addr)
	msg := encoding.AppendDescriptor(nil, secData)
	msg, _ = encoding.Append(msg, []byte("in"))
	if _, ok := seed.outcome(seed.transfer(1, msg, nil)).(frames.Accepted); !ok {
		t.Fatal("plain send not accepted")
	}

	tc := newTxnClient(t, addr)
	id := tc.declare()
	did := tc.receive()
	wantTxnAccepted(t, tc.settle(did, id), id)
	wantTxnAccepted(t, tc.send("out", id), id)
	if got := b.bodies("q1"); len(got) != 1 || got[0] != "in" {
		t.Fatalf("before discharge q1 holds %v, want [in] (nothing applied yet)", got)
	}
	if _, ok := tc.discharge(id, false).(frames.Accepted); !ok {
		t.Fatal("discharge(fail=false) not accepted")
	}
	if got := b.bodies("q1"); len(got) != 1 || got[0] != "out" {
		t.Fatalf("after commit q1 holds %v, want [out]", got)
	}
	b.mu.Lock()
	commits := b.commits
	b.mu.Unlock()
	if commits != 1 {
		t.Fatalf("%d Commit calls, want 1 (one unit)", commits)
	}
	// The transaction is over: its id is unknown now.
	wantRejected(t, tc.discharge(id, false), condTxnUnknownID)
}

// TestTxnRollback: discharge(fail=true) applies nothing and unlocks the message
// completed inside the transaction, so it can be received again at once.
func TestTxnRollback(t *testing.T) {
	_, b, addr := testServer(t, nil)
	tc := newTxnClient(t, addr)
	msg := encoding.AppendDescriptor(nil, secData)
	msg, _ = encoding.Append(msg, []byte("in"))
	tc.outcome(tc.transfer(1, msg, nil))
	id := tc.declare()
	did := tc.receive()
	wantTxnAccepted(t, tc.settle(did, id), id)
	wantTxnAccepted(t, tc.send("out", id), id)
	if _, ok := tc.discharge(id, true).(frames.Accepted); !ok {
		t.Fatal("discharge(fail=true) not accepted")
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := b.lockedCount("q1"); n != 0 {
			return fmt.Errorf("%d messages still locked after rollback", n)
		}
		return nil
	})
	if got := b.bodies("q1"); len(got) != 1 || got[0] != "in" {
		t.Fatalf("after rollback q1 holds %v, want [in]", got)
	}
	tc.receive() // available again, not waiting for its lock to expire
}

// TestTxnTimeoutAndLimits: a transaction past TxnTimeout rolls back at discharge with
// amqp:transaction:timeout; one over TxnMaxOperations refuses the operation and rolls
// back with amqp:transaction:rollback; a declare with a global-id is not implemented.
func TestTxnTimeoutAndLimits(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	_, b, addr := testServer(t, func(c *Config) { c.Clock = clk; c.TxnTimeout = time.Minute; c.TxnMaxOperations = 2 })
	tc := newTxnClient(t, addr)

	id := tc.declare()
	wantTxnAccepted(t, tc.send("late", id), id)
	clk.Advance(time.Minute)
	wantRejected(t, tc.discharge(id, false), condTxnTimeout)

	id = tc.declare()
	wantTxnAccepted(t, tc.send("a", id), id)
	wantTxnAccepted(t, tc.send("b", id), id)
	wantRejected(t, tc.send("c", id), condResourceLimit)
	wantRejected(t, tc.discharge(id, false), condTxnRollback)
	if got := b.bodies("q1"); len(got) != 0 {
		t.Fatalf("q1 holds %v after rolled-back transactions, want nothing", got)
	}

	st := tc.outcome(tc.transfer(0, amqpValue(&encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: encoding.List{[]byte("g")}}), nil))
	wantRejected(t, st, condNotImplemented)
	wantRejected(t, tc.send("x", []byte("nope")), condTxnUnknownID)
}

// TestTxnSendVia: a sender attached to q1 with the transfer destination q2 (send-via)
// is accepted; what it sends inside a transaction goes to q2 at commit, atomically with
// the transaction's completion on q1, and nothing before; outside a transaction it goes
// to q2 at once. A via entity that does not exist is refused.
func TestTxnSendVia(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q2"})
	tc := newTxnClient(t, addr)
	seed := encoding.AppendDescriptor(nil, secData)
	seed, _ = encoding.Append(seed, []byte("in"))
	if _, ok := tc.outcome(tc.transfer(1, seed, nil)).(frames.Accepted); !ok {
		t.Fatal("plain send not accepted")
	}
	tc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "via", Handle: 3, Role: frames.RoleSender,
		Target: &frames.Target{Address: "q1"}, Source: &frames.Source{},
		Properties: encoding.Map{{Key: Symbol(transferDestination), Value: "q2"}}}, nil)
	tc.waitFor(func(fb frames.Body) bool { f, ok := fb.(*frames.Flow); return ok && f.Handle != nil && *f.Handle == 3 })
	sendOn := func(body string, st frames.DeliveryState) frames.DeliveryState {
		msg := encoding.AppendDescriptor(nil, secData)
		msg, _ = encoding.Append(msg, []byte(body))
		return tc.outcome(tc.transfer(3, msg, st))
	}

	id := tc.declare()
	did := tc.receive()
	wantTxnAccepted(t, tc.settle(did, id), id)
	wantTxnAccepted(t, sendOn("out", &frames.TransactionalState{TxnID: id}), id)
	if got := b.bodies("q2"); len(got) != 0 {
		t.Fatalf("q2 holds %v before the discharge", got)
	}
	if st, ok := tc.discharge(id, false).(frames.Accepted); !ok {
		t.Fatalf("discharge answered %#v", st)
	}
	if got := b.bodies("q2"); fmt.Sprint(got) != "[out]" {
		t.Fatalf("after commit q2 holds %v, want [out]", got)
	}
	if got := b.bodies("q1"); len(got) != 0 {
		t.Fatalf("after commit q1 holds %v, want nothing (completed, and nothing sent to the via entity)", got)
	}

	if st, ok := sendOn("direct", nil).(frames.Accepted); !ok {
		t.Fatalf("a send-via send outside a transaction answered %#v", st)
	}
	if got := b.bodies("q2"); fmt.Sprint(got) != "[out direct]" {
		t.Fatalf("q2 holds %v, want [out direct]", got)
	}

	tc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "via-nowhere", Handle: 4, Role: frames.RoleSender,
		Target: &frames.Target{Address: "nope"}, Source: &frames.Source{},
		Properties: encoding.Map{{Key: Symbol(transferDestination), Value: "q2"}}}, nil)
	d := tc.waitFor(func(fb frames.Body) bool { d, ok := fb.(*frames.Detach); return ok && d.Handle == 4 }).(*frames.Detach)
	if d.Error == nil || string(d.Error.Condition) != condNotFound {
		t.Fatalf("send-via through a missing entity detached with %v, want %s", d.Error, condNotFound)
	}
}

// TestTxnManagementRequestRefused: a $management request inside a transaction is
// refused (it would apply at once, not at commit) and the transaction rolls back.
func TestTxnManagementRequestRefused(t *testing.T) {
	_, _, addr := testServer(t, nil)
	tc := newTxnClient(t, addr)
	tc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "mgmt", Handle: 3, Role: frames.RoleSender,
		Target: &frames.Target{Address: "q1/$management"}, Source: &frames.Source{}}, nil)
	tc.waitFor(func(b frames.Body) bool { f, ok := b.(*frames.Flow); return ok && f.Handle != nil && *f.Handle == 3 })
	id := tc.declare()
	st := tc.outcome(tc.transfer(3, amqpValue(encoding.Map{{Key: "lock-tokens", Value: nil}}), &frames.TransactionalState{TxnID: id}))
	wantRejected(t, st, condNotImplemented)
	wantRejected(t, tc.discharge(id, false), condTxnRollback)
}

func (b *memBackend) minLockedUntil(path string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var t time.Time
	for _, m := range b.entities[path].queues[0] {
		if m.token != (UUID{}) && (t.IsZero() || m.lockedUntil.Before(t)) {
			t = m.lockedUntil
		}
	}
	return t
}

// TestTxnKeepsLocksAndTimesOut: the lock of a message completed inside a transaction is
// renewed while the transaction is open, so a commit after more than LockDuration (30 s
// on the fake) still applies; a transaction past TxnTimeout rolls back on its own, its
// message unlocked before any discharge.
func TestTxnKeepsLocksAndTimesOut(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	_, b, addr := testServer(t, func(c *Config) {
		c.Clock = clk
		c.AuthCheckInterval = 5 * time.Millisecond
		c.TxnTimeout = 2 * time.Minute
	})
	tc := newTxnClient(t, addr)
	for range 2 {
		msg := encoding.AppendDescriptor(nil, secData)
		msg, _ = encoding.Append(msg, []byte("in"))
		tc.outcome(tc.transfer(1, msg, nil))
	}
	renewedPast := func(t0 time.Time) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if u := b.minLockedUntil("q1"); !u.After(t0) {
				return fmt.Errorf("lock until %v, want after %v", u, t0)
			}
			return nil
		})
	}

	id := tc.declare()
	did := tc.receive()
	wantTxnAccepted(t, tc.settle(did, id), id)
	for range 3 { // 75 s in all, more than twice the lock duration
		clk.Advance(25 * time.Second)
		renewedPast(clk.Now().Add(20 * time.Second))
	}
	if _, ok := tc.discharge(id, false).(frames.Accepted); !ok {
		t.Fatal("commit after 75 s lost the lock")
	}
	if got := b.bodies("q1"); len(got) != 1 {
		t.Fatalf("q1 holds %v after the commit, want one message", got)
	}

	id = tc.declare()
	did = tc.receive()
	wantTxnAccepted(t, tc.settle(did, id), id)
	for range 4 { // 100 s, the lock kept alive
		clk.Advance(25 * time.Second)
		renewedPast(clk.Now().Add(20 * time.Second))
	}
	clk.Advance(25 * time.Second) // past TxnTimeout
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := b.lockedCount("q1"); n != 0 {
			return fmt.Errorf("%d locked after the transaction timed out", n)
		}
		return nil
	})
	wantRejected(t, tc.discharge(id, false), condTxnTimeout)
	if got := b.bodies("q1"); len(got) != 1 {
		t.Fatalf("q1 holds %v after a timed-out transaction, want its message", got)
	}
}

// TestTxnBufferedBytesBounded: the messages a connection's open transactions buffer are
// bounded (maxTxnBytesPerConn); the send past the bound is rejected with
// amqp:resource-limit-exceeded and its transaction rolls back.
func TestTxnBufferedBytesBounded(t *testing.T) {
	_, b, addr := testServer(t, nil)
	tc := newTxnClient(t, addr)
	id := tc.declare()
	body := bytes.Repeat([]byte("x"), 200<<10)
	sendBig := func() frames.DeliveryState {
		msg := encoding.AppendDescriptor(nil, secData)
		msg, _ = encoding.Append(msg, body)
		did := tc.nextID
		tc.nextID++
		st := &frames.TransactionalState{TxnID: id}
		for off := 0; off < len(msg); off += 60000 {
			end := min(off+60000, len(msg))
			tr := &frames.Transfer{Handle: 1, More: end < len(msg)}
			if off == 0 {
				tr.DeliveryID, tr.DeliveryTag, tr.State = &did, []byte{byte(did)}, st
			}
			tc.frame(frames.TypeAMQP, 0, tr, msg[off:end])
		}
		return tc.outcome(did)
	}
	n := 0
	for ; n < 30; n++ {
		st := sendBig()
		if _, ok := st.(*frames.Rejected); ok {
			wantRejected(t, st, condResourceLimit)
			break
		}
		wantTxnAccepted(t, st, id)
	}
	if want := maxTxnBytesPerConn / (200 << 10); n < want-1 || n > want {
		t.Fatalf("%d sends of 200 KiB accepted before the bound, want about %d", n, want)
	}
	wantRejected(t, tc.discharge(id, false), condTxnRollback)
	if got := b.bodies("q1"); len(got) != 0 {
		t.Fatalf("q1 holds %d messages after a rolled-back transaction", len(got))
	}
	// The bytes are free again: a new transaction may buffer.
	id = tc.declare()
	wantTxnAccepted(t, sendBig(), id)
}

func TestSendViaOther(t *testing.T) {
	for _, tc := range []struct {
		target, dest string
		other        bool
	}{
		{"q1", "", false},
		{"q1", "Q1", false},
		{"sb://ns.servicebus.windows.net/q1", "q1", false},
		{"q1", "sb://ns.servicebus.windows.net/q1/", false},
		{"q1", "t1", true},
		{"sb://ns/q1", "sb://ns/t1", true},
	} {
		a := &frames.Attach{Target: &frames.Target{Address: tc.target}}
		if tc.dest != "" {
			a.Properties = encoding.Map{{Key: Symbol(transferDestination), Value: tc.dest}}
		}
		if _, other := sendViaOther(a); other != tc.other {
			t.Errorf("target %q destination %q: other = %v, want %v", tc.target, tc.dest, other, tc.other)
		}
	}
}
