package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// Transactions through a real node. Neither the Go SDK nor go-amqp has a transaction
// API, so this file speaks the few AMQP 1.0 frames a transactional client sends (part 4:
// coordinator, declare, discharge, transactional-state), with a minimal codec of its
// own: the broker's codec is internal to package amqp, and testing it with itself would
// prove little. The SDK checks what a user then sees.

// TestTransactions: receive + complete + send in one transaction, then commit (both
// visible at once, not before) and roll back (the message is still there, unlocked at
// once, and nothing was sent).
func TestTransactions(t *testing.T) {
	e := newEnv(t)

	t.Run("Commit", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "txn-commit", nil)
		send(t, e.sender(t, q), body("in"))
		c := dialTxn(t, e, q)
		id := c.declare()
		did := c.receive()
		c.complete(did, id)
		c.send("out", id)
		r := e.receiver(t, q, nil)
		if got := bodies(peekAll(t, r)); fmt.Sprint(got) != "[in]" {
			t.Fatalf("before discharge the queue holds %v, want [in]", got)
		}
		if st := c.discharge(id, false); st.code != codeAccepted {
			t.Fatalf("discharge: %v", st)
		}
		if got := bodies(peekAll(t, r)); fmt.Sprint(got) != "[out]" {
			t.Fatalf("after commit the queue holds %v, want [out]", got)
		}
	})

	t.Run("Rollback", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "txn-rollback", nil) // LockDuration 60 s: a release must not wait for it
		send(t, e.sender(t, q), body("in"))
		c := dialTxn(t, e, q)
		id := c.declare()
		did := c.receive()
		c.complete(did, id)
		c.send("out", id)
		if st := c.discharge(id, true); st.code != codeAccepted {
			t.Fatalf("discharge(fail=true): %v", st)
		}
		m := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		if string(m.Body) != "in" || m.DeliveryCount != 2 {
			t.Fatalf("after rollback received %q with DeliveryCount %d, want in, 2", m.Body, m.DeliveryCount)
		}
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		expectNothing(t, r, time.Second) // "out" was never sent
	})

	// Across two queues (two partition groups: two-phase commit): a receive from A,
	// its complete and a send to B commit together, or roll back together.
	t.Run("CrossEntityCommit", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "txn-cross-a", nil)
		other := e.queue(t, "txn-cross-b", nil)
		send(t, e.sender(t, q), body("in"))
		c := dialTxn(t, e, q)
		c.attachSender(3, other)
		id := c.declare()
		did := c.receive()
		c.complete(did, id)
		c.sendOn(3, "out", id)
		if got := bodies(peekAll(t, e.receiver(t, other, nil))); len(got) != 0 {
			t.Fatalf("%s holds %v before the discharge", other, got)
		}
		if st := c.discharge(id, false); st.code != codeAccepted {
			t.Fatalf("cross-entity discharge: %v", st)
		}
		if got := bodies(peekAll(t, e.receiver(t, other, nil))); fmt.Sprint(got) != "[out]" {
			t.Fatalf("%s holds %v after commit, want [out]", other, got)
		}
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		expectNothing(t, r, time.Second) // "in" was completed
	})

	t.Run("CrossEntityRollback", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "txn-crossrb-a", nil)
		other := e.queue(t, "txn-crossrb-b", nil)
		send(t, e.sender(t, q), body("in"))
		c := dialTxn(t, e, q)
		c.attachSender(3, other)
		id := c.declare()
		did := c.receive()
		c.complete(did, id)
		c.sendOn(3, "out", id)
		if st := c.discharge(id, true); st.code != codeAccepted {
			t.Fatalf("discharge(fail=true): %v", st)
		}
		m := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		if string(m.Body) != "in" || m.DeliveryCount != 2 {
			t.Fatalf("after rollback received %q with DeliveryCount %d, want in, 2", m.Body, m.DeliveryCount)
		}
		r := e.receiver(t, other, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		expectNothing(t, r, time.Second) // "out" was never sent
	})

	// Send-via (the NServiceBus and MassTransit pattern): the sender is attached to the
	// queue the message was received from, with the transfer destination naming the
	// other queue; the receive's complete and the send commit together.
	t.Run("SendVia", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "txn-via-in", nil)
		other := e.queue(t, "txn-via-out", nil)
		send(t, e.sender(t, q), body("in"))
		c := dialTxn(t, e, q)
		c.attachSenderVia(3, q, other)
		id := c.declare()
		did := c.receive()
		c.complete(did, id)
		c.sendOn(3, "out", id)
		if got := bodies(peekAll(t, e.receiver(t, other, nil))); len(got) != 0 {
			t.Fatalf("%s holds %v before the discharge", other, got)
		}
		if st := c.discharge(id, false); st.code != codeAccepted {
			t.Fatalf("send-via discharge: %v", st)
		}
		if got := bodies(peekAll(t, e.receiver(t, other, nil))); fmt.Sprint(got) != "[out]" {
			t.Fatalf("%s holds %v after commit, want [out]", other, got)
		}
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		expectNothing(t, r, time.Second) // "in" completed, nothing sent to the via queue
		// Outside a transaction, a send-via message goes to the destination.
		c.sendPlainOn(3, "direct")
		if got := bodies(peekAll(t, e.receiver(t, other, nil))); fmt.Sprint(got) != "[out direct]" {
			t.Fatalf("%s holds %v, want [out direct]", other, got)
		}
	})

	// A generic AMQP client (go-amqp) opens a send-via link with the link property and
	// sends outside a transaction: the message reaches the destination, not the via queue.
	t.Run("SendViaGoAMQP", func(t *testing.T) {
		t.Parallel()
		via := e.queue(t, "txn-goamqp-via", nil)
		dest := e.queue(t, "txn-goamqp-dest", nil)
		ctx := testCtx(t)
		sess := e.goAMQPSession(t)
		snd, err := sess.NewSender(ctx, via, &amqp.SenderOptions{
			Properties: map[string]any{"com.microsoft:transfer-destination-address": dest}})
		if err != nil {
			t.Fatalf("send-via attach: %v", err)
		}
		if err := snd.Send(ctx, &amqp.Message{Data: [][]byte{[]byte("via")}}, nil); err != nil {
			t.Fatalf("send-via send: %v", err)
		}
		m := receiveOne(t, e.receiver(t, dest, nil), 10*time.Second)
		if string(m.Body) != "via" {
			t.Fatalf("%s received %q, want via", dest, m.Body)
		}
		r := e.receiver(t, via, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		expectNothing(t, r, time.Second)
	})
}

// ---- a minimal transactional AMQP client (on rawConn, rawamqp_test.go) ----

type txnConn struct {
	*rawConn
	nextID uint32 // our next delivery-id
	recvd  uint32 // deliveries received on the receiver (handle 2)
}

// state is a delivery state as the test reads it.
type state struct {
	code                   uint64
	txnID                  []byte
	outcome                uint64
	condition, description string
}

func (s state) String() string {
	return fmt.Sprintf("state{%#x txn=%x outcome=%#x %s %q}", s.code, s.txnID, s.outcome, s.condition, s.description)
}

// dialTxn opens a connection with a coordinator (handle 0), a sender to q (handle 1)
// and a peek-lock receiver on q (handle 2).
func dialTxn(t *testing.T, e *env, q string) *txnConn {
	t.Helper()
	c := &txnConn{rawConn: dialRaw(t, e.n.AMQP, e.n.ConnectionString, "txn-test")}
	c.frame(0, list(codeBegin, null(), u32(0), u32(1000), u32(1000)), nil)
	c.expect(codeBegin)
	c.frame(0, list(codeAttach, str("coord"), u32(0), boolean(false), null(), null(), list(codeSource),
		list(codeCoordinator, sym("amqp:local-transactions"))), nil)
	c.expect(codeAttach)
	c.attachSender(1, q)
	c.frame(0, list(codeAttach, str("rcv"), u32(2), boolean(true), ubyte(0), ubyte(0), list(codeSource, str(q)), list(codeTarget)), nil)
	c.expect(codeAttach)
	return c
}

func (c *txnConn) attachSender(h uint32, q string) {
	c.frame(0, list(codeAttach, str(fmt.Sprint("snd", h)), u32(h), boolean(false), null(), null(), list(codeSource), list(codeTarget, str(q))), nil)
	for { // wait for its credit
		f := c.expect(codeFlow)
		if len(f) > 4 && f[4] == h {
			return
		}
	}
}

// attachSenderVia attaches a sender to via whose messages go to dest (the Service Bus
// link property com.microsoft:transfer-destination-address).
func (c *txnConn) attachSenderVia(h uint32, via, dest string) {
	c.frame(0, list(codeAttach, str(fmt.Sprint("via", h)), u32(h), boolean(false), null(), null(), list(codeSource), list(codeTarget, str(via)),
		null(), null(), null(), null(), null(), null(), mapOf(sym("com.microsoft:transfer-destination-address"), str(dest))), nil)
	for { // wait for its credit
		f := c.expect(codeFlow)
		if len(f) > 4 && f[4] == h {
			return
		}
	}
}

// sendPlainOn sends outside any transaction and checks it is accepted.
func (c *txnConn) sendPlainOn(h uint32, body string) {
	c.t.Helper()
	msg := append(descriptor(codeData), bin([]byte(body))...)
	if st := c.outcome(c.transferOn(h, msg, nil)); st.code != codeAccepted {
		c.t.Fatalf("send answered %v", st)
	}
}

func (c *txnConn) declare() []byte {
	c.t.Helper()
	st := c.outcome(c.transfer(0, append(descriptor(codeValue), list(codeDeclare)...), nil))
	if st.code != codeDeclared || len(st.txnID) == 0 {
		c.t.Fatalf("declare answered %v", st)
	}
	return st.txnID
}

func (c *txnConn) discharge(id []byte, fail bool) state {
	c.t.Helper()
	return c.outcome(c.transfer(0, append(descriptor(codeValue), list(codeDischarge, bin(id), boolean(fail))...), nil))
}

func (c *txnConn) send(body string, id []byte) { c.sendOn(1, body, id) }

func (c *txnConn) sendOn(h uint32, body string, id []byte) {
	c.t.Helper()
	msg := append(descriptor(codeData), bin([]byte(body))...)
	st := c.outcome(c.transferOn(h, msg, list(codeTxnState, bin(id))))
	if st.code != codeTxnState || st.outcome != codeAccepted {
		c.t.Fatalf("transactional send answered %v", st)
	}
}

// receive grants one credit on the receiver and returns the delivery-id it gets.
func (c *txnConn) receive() uint32 {
	c.t.Helper()
	c.frame(0, list(codeFlow, u32(0), u32(1000), u32(c.nextID), u32(1000), u32(2), u32(c.recvd), u32(1)), nil)
	for {
		f := c.expect(codeTransfer)
		if f[0] == uint32(2) {
			c.recvd++
			return f[1].(uint32)
		}
	}
}

// complete accepts delivery did inside txn id, unsettled, and checks the answer.
func (c *txnConn) complete(did uint32, id []byte) {
	c.t.Helper()
	c.frame(0, list(codeDisposition, boolean(true), u32(did), null(), boolean(false),
		list(codeTxnState, bin(id), list(codeAccepted))), nil)
	for {
		f := c.expect(codeDisposition)
		if f[0] == false && f[1] == did {
			if st := stateOf(f); st.code != codeTxnState || st.outcome != codeAccepted {
				c.t.Fatalf("transactional complete answered %v", st)
			}
			return
		}
	}
}

func (c *txnConn) transfer(h uint32, payload, st []byte) uint32 { return c.transferOn(h, payload, st) }

func (c *txnConn) transferOn(h uint32, payload, st []byte) uint32 {
	id := c.nextID
	c.nextID++
	if st == nil {
		st = null()
	}
	c.frame(0, list(codeTransfer, u32(h), u32(id), bin([]byte{byte(id)}), u32(0), boolean(false), null(), null(), st), payload)
	return id
}

// outcome waits for the broker's disposition of our delivery id.
func (c *txnConn) outcome(id uint32) state {
	c.t.Helper()
	for {
		f := c.expect(codeDisposition)
		if f[0] != true {
			continue
		}
		first := f[1].(uint32)
		last := first
		if len(f) > 2 {
			if l, ok := f[2].(uint32); ok {
				last = l
			}
		}
		if first <= id && id <= last {
			return stateOf(f)
		}
	}
}

func stateOf(f []any) state {
	if len(f) < 5 {
		return state{}
	}
	d, ok := f[4].(described)
	if !ok {
		return state{}
	}
	s := state{code: d.code}
	fields, _ := d.value.([]any)
	switch d.code {
	case codeDeclared:
		if len(fields) > 0 {
			s.txnID, _ = fields[0].([]byte)
		}
	case codeTxnState:
		if len(fields) > 0 {
			s.txnID, _ = fields[0].([]byte)
		}
		if len(fields) > 1 {
			if o, ok := fields[1].(described); ok {
				s.outcome = o.code
			}
		}
	case codeRejected:
		if len(fields) > 0 {
			if e, ok := fields[0].(described); ok && e.code == codeError {
				ef, _ := e.value.([]any)
				if len(ef) > 0 {
					s.condition, _ = ef[0].(string)
				}
				if len(ef) > 1 {
					s.description, _ = ef[1].(string)
				}
			}
		}
	}
	return s
}
