package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// ---- transactions (AMQP 1.0 part 4, the Service Bus profile) ----
//
// A client attaches a sending link whose target is a coordinator (part 4 §4.5.1) and
// sends declare and discharge messages on it (§4.5.2, §4.5.3). Between the two, the
// transfers whose state is transactional-state(txn-id) and the dispositions whose state
// is transactional-state(txn-id, outcome) are not applied: the connection buffers them
// per transaction (bounded by Config.TxnMaxOperations and Config.TxnTimeout) and hands
// them to the Backend's Transactor as one unit at discharge(fail=false). A discharge with
// fail=true, a transaction past its timeout, or one that an operation could not join,
// rolls back: nothing applies, and the messages settled inside it are unlocked as by
// an abandon (available again at once; the delivery attempt counts). The
// wire shapes are in docs/protocol.md; the guarantees in docs/guarantees.md.

// Transactor is an optional Backend capability: atomic transactions. Commit applies
// every operation of ops, in order, or none of them. It returns ErrNotImplemented
// (wrapped) when the Backend cannot apply these operations atomically together,
// without having applied any; ErrTxnRolledBack when it aborted them (nothing applied);
// a settlement whose lock is lost gives ErrLockLost; other errors as Send and Settle.
type Transactor interface {
	Commit(ctx context.Context, ops []TxnOp) error
}

// TxnOp is one operation of a transaction: a send of Messages to Entity, or, when
// Settlement is set, a settlement.
type TxnOp struct {
	Entity     string
	Messages   []*Message
	Settlement *Settlement
}

// Transaction error conditions (part 4 §4.5.7).
const (
	condTxnUnknownID = "amqp:transaction:unknown-id"
	condTxnRollback  = "amqp:transaction:rollback"
	condTxnTimeout   = "amqp:transaction:timeout"
)

// capLocalTxn is the capability a coordinator offers (part 4 §4.5.9).
const capLocalTxn Symbol = "amqp:local-transactions"

// maxTxnsPerConn bounds the transactions one connection may have declared and not
// discharged at once, and maxTxnBytesPerConn the bytes of the messages they buffer
// (sends wait in memory until the commit, which stores them in one Raft entry).
const (
	maxTxnsPerConn     = 64
	maxTxnBytesPerConn = 4 << 20
)

// txn is one declared transaction; owner: the connection's owner goroutine.
type txn struct {
	id       []byte
	deadline time.Time
	ops      []TxnOp
	n        int           // operations counted toward Config.TxnMaxOperations
	failed   *frames.Error // set when an operation could not join: the discharge rolls back

	bytes    int       // buffered message bytes, counted in conn.txnBytes
	renewAt  time.Time // when the locks of the settled messages are next renewed; zero: none to renew
	renewing bool      // a renewal is in flight
}

func (c *conn) txnTimeout() time.Duration {
	if c.cfg.TxnTimeout > 0 {
		return c.cfg.TxnTimeout
	}
	return 2 * time.Minute
}

func (c *conn) txnMaxOps() int {
	if c.cfg.TxnMaxOperations > 0 {
		return c.cfg.TxnMaxOperations
	}
	return 100
}

// txnJoin finds the transaction an operation of n units joins. It returns the
// transaction, or the error to reject the operation with (the transaction, if it
// exists, then rolls back at discharge).
func (s *session) txnJoin(l *link, id []byte, n int) (*txn, *frames.Error) {
	c := s.c
	tx := c.txns[string(id)]
	if tx == nil {
		return nil, s.errorFor(l, condTxnUnknownID, fmt.Sprintf("Transaction %x is not declared on this connection, or it was discharged.", id))
	}
	var e *frames.Error
	switch {
	case tx.failed != nil:
		e = tx.failed
	case !c.now().Before(tx.deadline):
		e = s.errorFor(l, condTxnTimeout, fmt.Sprintf("The transaction timed out after %v; it will roll back.", c.txnTimeout()))
	case tx.n+n > c.txnMaxOps():
		e = s.errorFor(l, condResourceLimit, fmt.Sprintf("A transaction may hold at most %d operations; it will roll back.", c.txnMaxOps()))
	}
	if e != nil {
		tx.failed = e
		return nil, e
	}
	tx.n += n
	return tx, nil
}

// attachCoordinator answers an attach whose target is a transaction coordinator.
func (s *session) attachCoordinator(l *link, a *frames.Attach) {
	if _, ok := s.c.b.(Transactor); !ok {
		s.refuse(l, a, s.errorFor(l, condNotImplemented, "Transactions are not supported by this broker."))
		return
	}
	l.node = nodeCoordinator
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode, Source: a.Source,
		Target: &frames.Target{Coordinator: true, Capabilities: []Symbol{capLocalTxn}}}
	reply.MaxMessageSize = s.c.cfg.MaxMessageSize
	l.maxMessageSize = s.c.cfg.MaxMessageSize
	l.attached = true
	s.c.send(s.localChannel, reply, nil)
	s.topUp(l)
}

// coordinatorRequest handles a declare or discharge sent on a coordinator link.
func (s *session) coordinatorRequest(l *link, p *partial) {
	c := s.c
	reject := func(e *frames.Error) {
		s.settleIncoming(l, p, &frames.Rejected{Error: e})
		s.deliveryDone(l)
	}
	code, fields, err := coordinatorBody(p.buf)
	if err != nil {
		reject(s.errorFor(l, condDecodeError, err.Error()))
		return
	}
	switch code {
	case frames.CodeDeclare:
		if raw, _ := fields.Next(); !encoding.IsNull(raw) {
			reject(s.errorFor(l, condNotImplemented, "Global transactions are not supported."))
			return
		}
		if len(c.txns) >= maxTxnsPerConn {
			reject(s.errorFor(l, condResourceLimit, fmt.Sprintf("A connection may have at most %d transactions declared at once.", maxTxnsPerConn)))
			return
		}
		if c.txns == nil {
			c.txns = map[string]*txn{}
		}
		u := newUUID()
		tx := &txn{id: u[:], deadline: c.now().Add(c.txnTimeout())}
		c.txns[string(tx.id)] = tx
		s.settleIncoming(l, p, &frames.Declared{TxnID: tx.id})
		s.deliveryDone(l)
	case frames.CodeDischarge:
		raw, err := fields.Next()
		var id []byte
		if err == nil {
			id, err = encoding.ReadBytes(raw)
		}
		if err != nil || len(id) == 0 {
			reject(s.errorFor(l, condInvalidField, "A discharge needs a txn-id."))
			return
		}
		fail := false
		if raw, err := fields.Next(); err == nil && !encoding.IsNull(raw) {
			fail, _ = encoding.ReadBool(raw)
		}
		tx := c.txns[string(id)]
		if tx == nil {
			reject(s.errorFor(l, condTxnUnknownID, fmt.Sprintf("Transaction %x is not declared on this connection, or it was already discharged.", id)))
			return
		}
		delete(c.txns, string(id))
		c.txnBytes -= tx.bytes
		tx.bytes = 0
		switch {
		case fail:
			c.rollback(tx)
			s.settleIncoming(l, p, frames.Accepted{})
			s.deliveryDone(l)
			return
		case !c.now().Before(tx.deadline):
			c.rollback(tx)
			reject(s.errorFor(l, condTxnTimeout, fmt.Sprintf("The transaction timed out after %v and rolled back.", c.txnTimeout())))
			return
		case tx.failed != nil:
			c.rollback(tx)
			reject(s.errorFor(l, condTxnRollback, "The transaction rolled back: "+string(tx.failed.Condition)+": "+tx.failed.Description))
			return
		}
		s.commit(l, p, tx)
	default:
		reject(s.errorFor(l, condNotAllowed, fmt.Sprintf("A coordinator accepts declare and discharge, not descriptor %#x.", code)))
	}
}

// commit hands tx to the Backend and answers the discharge with its outcome.
func (s *session) commit(l *link, p *partial, tx *txn) {
	c := s.c
	l.inflight++
	tracker := s.tracker(l)
	ops := tx.ops
	c.goFunc(func() {
		var err error
		if len(ops) > 0 {
			err = c.b.(Transactor).Commit(c.ctx, ops)
		}
		c.post(func() {
			l.inflight--
			var st frames.DeliveryState = frames.Accepted{}
			if err != nil {
				c.rollback(tx)
				st = &frames.Rejected{Error: commitError(err, tracker, c.now())}
			}
			s.settleIncoming(l, p, st)
			s.deliveryDone(l)
		})
	})
}

// rollback unlocks the messages settled inside tx as an abandon does (best effort: a
// lock that cannot be released expires on its own). The delivery counts: a handler that
// always rolls back gets its message dead-lettered after MaxDeliveryCount attempts, as
// on Service Bus, where the lock a rollback leaves is abandoned or expires.
func (c *conn) rollback(tx *txn) {
	var rel []Settlement
	for _, op := range tx.ops {
		if op.Settlement != nil {
			r := *op.Settlement
			r.Disposition, r.PropertiesToModify, r.DeadLetterReason, r.DeadLetterDescription = Abandon, nil, "", ""
			rel = append(rel, r)
		}
	}
	tx.ops = nil
	c.txnBytes -= tx.bytes
	tx.bytes = 0
	if len(rel) == 0 {
		return
	}
	c.goFunc(func() { c.b.Settle(c.ctx, rel) })
}

// coordinatorBody parses a coordinator message: its amqp-value body holds a described
// declare or discharge list.
func coordinatorBody(b []byte) (uint64, encoding.Fields, error) {
	secs, err := splitSections(b)
	if err != nil {
		return 0, encoding.Fields{}, err
	}
	if secs.value == nil {
		return 0, encoding.Fields{}, errors.New("a coordinator message needs an amqp-value body")
	}
	code, sym, val, _, err := encoding.SplitDescribed(secs.value)
	if err != nil || sym != "" {
		return 0, encoding.Fields{}, fmt.Errorf("the body is not a declare or discharge: %v", err)
	}
	f, err := encoding.ListFields(val)
	if err != nil {
		return 0, encoding.Fields{}, fmt.Errorf("the body is not a list: %v", err)
	}
	return code, f, nil
}

// txnSend buffers a transactional transfer's messages in their transaction and
// confirms the transfer with transactional-state(txn-id, accepted).
func (s *session) txnSend(l *link, p *partial, msgs []*Message) {
	size := 0
	for _, m := range msgs {
		size += len(m.Raw)
	}
	tx, e := s.txnJoin(l, p.txnID, len(msgs))
	if e == nil && s.c.txnBytes+size > maxTxnBytesPerConn {
		e = s.errorFor(l, condResourceLimit, fmt.Sprintf("The open transactions of a connection may hold at most %d bytes of messages; the transaction will roll back.", maxTxnBytesPerConn))
		tx.failed, tx = e, nil
	}
	if e != nil {
		s.settleIncoming(l, p, &frames.Rejected{Error: e})
	} else {
		tx.ops = append(tx.ops, TxnOp{Entity: l.addr.Entity, Messages: msgs})
		tx.bytes += size
		s.c.txnBytes += size
		s.settleIncoming(l, p, &frames.TransactionalState{TxnID: tx.id, Outcome: frames.Accepted{}})
	}
	s.deliveryDone(l)
}

// txnSettle buffers the settlements of a transactional disposition and answers it
// (when the client did not settle first) with transactional-state(txn-id, accepted).
// Settlements that cannot join the transaction are rejected and their locks released;
// the transaction, if it exists, then rolls back at discharge.
func (s *session) txnSettle(ts *frames.TransactionalState, batch []Settlement, local []error, d *frames.Disposition) {
	var e *frames.Error
	for _, err := range local {
		if err != nil {
			e = amqpError(err, s.tracker(nil), s.c.now())
			break
		}
	}
	tx, je := s.txnJoin(nil, ts.TxnID, len(batch))
	if je != nil {
		e = je
	} else if e != nil {
		tx.failed = e
	}
	if e == nil {
		for i := range batch {
			st := batch[i]
			tx.ops = append(tx.ops, TxnOp{Settlement: &st})
		}
		if len(batch) > 0 && tx.renewAt.IsZero() {
			tx.renewAt = s.c.now() // renewed at the next tick, then before each expiry
		}
	} else {
		// The settlements did not join: unlock the messages now, as an abandon (the
		// deliveries left the unsettled map, so nothing else would).
		if len(batch) > 0 {
			rel := make([]Settlement, len(batch))
			for i, st := range batch {
				rel[i] = Settlement{Address: st.Address, SessionID: st.SessionID, LockToken: st.LockToken, Disposition: Abandon}
			}
			c := s.c
			c.goFunc(func() { c.b.Settle(c.ctx, rel) })
		}
	}
	if d.Settled {
		return
	}
	var st frames.DeliveryState = &frames.TransactionalState{TxnID: ts.TxnID, Outcome: frames.Accepted{}}
	if e != nil {
		s.c.refused("amqp: rejecting a transactional settlement", e)
		st = &frames.Rejected{Error: e}
	}
	s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true, State: st}, nil)
}

// transferDestination is the link property naming the final destination of a send-via
// link (Service Bus: the target is the via entity).
const transferDestination = "com.microsoft:transfer-destination-address"

// sendViaOther reports whether an attach asks to send via its target to another entity.
func sendViaOther(a *frames.Attach) (string, bool) {
	v, _ := Map(a.Properties).GetString(transferDestination)
	dest, _ := v.(string)
	if dest == "" || a.Target == nil {
		return "", false
	}
	norm := func(s string) []byte {
		d := bytes.ToLower(bytes.Trim([]byte(s), "/"))
		if i := bytes.Index(d, []byte("://")); i >= 0 { // an absolute address: keep its path
			d = d[i+3:]
			if j := bytes.IndexByte(d, '/'); j >= 0 {
				d = d[j+1:]
			}
		}
		return d
	}
	return dest, !bytes.Equal(norm(dest), norm(a.Target.Address))
}

// rolledBack lists the errors after which a Backend's Commit certainly applied nothing:
// the transaction's own content was refused. After any other error (a timeout, a lost
// leader) the outcome is unknown: everything applied or nothing did.
var rolledBack = []error{ErrNotImplemented, ErrTxnRolledBack, ErrLockLost, ErrSessionLockLost, ErrQuotaExceeded,
	ErrMessageTooLarge, ErrEntityDisabled, ErrNotAllowed, ErrNotFound, ErrBadRequest, errInvalidField}

// commitError is the error a failed discharge answers with: amqp:not-implemented for a
// transaction the Backend cannot apply atomically, amqp:transaction:rollback when the
// Backend refused it, and the Backend's own condition (com.microsoft:timeout,
// server-busy, ...) saying the outcome is unknown otherwise.
func commitError(err error, tracker string, now time.Time) *frames.Error {
	if errors.Is(err, ErrNotImplemented) {
		return &frames.Error{Condition: condNotImplemented, Description: "The transaction rolled back: " + describe(err, tracker, now)}
	}
	for _, e := range rolledBack {
		if errors.Is(err, e) {
			return &frames.Error{Condition: condTxnRollback, Description: "The transaction rolled back: " + describe(err, tracker, now)}
		}
	}
	cond, _ := classify(err)
	return &frames.Error{Condition: Symbol(cond), Description: "The outcome of the transaction is unknown: all of it applied or none of it did. " + describe(err, tracker, now)}
}

// txnRefuseRPC rejects a $management or $cbs request sent inside a transaction, and
// makes the transaction roll back: applying it at once would break atomicity, and
// buffering request-response operations is not supported.
func (s *session) txnRefuseRPC(l *link, p *partial) {
	e := s.errorFor(l, condNotImplemented, "Management operations inside a transaction are not supported; the transaction will roll back.")
	if tx := s.c.txns[string(p.txnID)]; tx != nil && tx.failed == nil {
		tx.failed = e
	}
	s.settleIncoming(l, p, &frames.Rejected{Error: e})
	s.deliveryDone(l)
}

// txnTick runs on the owner every AuthCheckInterval. It rolls back transactions past
// their timeout at once (their messages become available again without waiting for the
// discharge; the discharge then answers amqp:transaction:timeout), and keeps the locks of
// the messages settled inside open transactions alive: they are renewed soon after the
// settlement joins and again halfway to each new expiry, so a transaction shorter than
// TxnTimeout does not lose them to LockDuration. Session messages are not renewed here:
// their lock is the session's, which its receiver renews.
func (c *conn) txnTick() {
	now := c.now()
	for _, tx := range c.txns {
		if !now.Before(tx.deadline) {
			if tx.failed == nil || len(tx.ops) > 0 {
				c.rollback(tx)
				tx.failed = newError(condTxnTimeout, "The transaction timed out.", c.cfg.Namespace, now)
			}
			continue
		}
		if tx.renewing || tx.renewAt.IsZero() || now.Before(tx.renewAt) || tx.failed != nil {
			continue
		}
		type key struct {
			a   Address
			sid string
		}
		groups := map[key][]UUID{}
		var order []key
		for _, op := range tx.ops {
			if s := op.Settlement; s != nil && s.SessionID == "" {
				k := key{s.Address, s.SessionID}
				if _, ok := groups[k]; !ok {
					order = append(order, k)
				}
				groups[k] = append(groups[k], s.LockToken)
			}
		}
		if len(order) == 0 {
			tx.renewAt = time.Time{}
			continue
		}
		tx.renewing = true
		started := now
		c.goFunc(func() {
			var until time.Time
			var err error
			for _, k := range order {
				var ts []time.Time
				ts, err = c.b.RenewLock(c.ctx, k.a, k.sid, groups[k])
				if err != nil {
					break
				}
				for _, u := range ts {
					if until.IsZero() || u.Before(until) {
						until = u
					}
				}
			}
			c.post(func() {
				tx.renewing = false
				now := c.now()
				switch {
				case err != nil:
					if tx.failed == nil {
						tx.failed = amqpError(err, c.cfg.Namespace, now)
					}
				case until.After(now):
					// Halfway from when the renewal started, not from now: the clock
					// may have moved on while it ran, and halving what is left from
					// now could put the next renewal past a lock the clock has
					// already half used up (a manual clock jumping 25 s did).
					tx.renewAt = started.Add(until.Sub(started) / 2)
				default:
					tx.renewAt = now.Add(time.Second)
				}
			})
		})
	}
}
