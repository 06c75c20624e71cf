package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumbus/quorumbus/fsm"
)

// Transactions (AMQP 1.0 part 4, the Service Bus profile; docs/guarantees.md): the
// protocol layer buffers a transaction's sends and settlements and hands them over at
// commit. Commit applies them in one Raft entry of one partition group (fsm.Txn), so
// they take effect all together or not at all, on every replica, surviving a leader
// failover like any other entry. A transaction whose operations fall on more than one
// partition group (another entity, or another partition of a partitioned entity) is
// refused with ErrCrossPartition before anything is applied; docs/guarantees.md
// describes the two-phase protocol that would lift this limit.

// ErrCrossPartition is returned by Commit when a transaction touches more than one
// partition group.
var ErrCrossPartition = errors.New("cluster: a transaction spanning more than one partition is not supported")

// TxnSend is one send inside a transaction.
type TxnSend struct {
	Entity string
	Msgs   []*fsm.Message
}

// Txn is a committed transaction's operations, in the order the client issued them.
type Txn struct {
	Sends   []TxnSend
	Settles []Settlement
}

// Commit applies t atomically on its one partition group. It returns nil when every
// operation applied; otherwise nothing applied (fsm.Txn), except when the outcome is
// unknown (partition.ErrOutcomeUnknown: the leader failed after proposing), in which
// case the whole transaction applied or none of it did.
func (n *Node) Commit(ctx context.Context, t Txn) error {
	var g group
	have := false
	use := func(h group) error {
		if have && h.id != g.id {
			return ErrCrossPartition
		}
		g, have = h, true
		return nil
	}
	var settles []fsm.Settle
	for _, s := range t.Settles {
		e, tgt, err := n.target(s.Address)
		if err != nil {
			return err
		}
		for _, tok := range s.Tokens {
			h, err := e.groupOfToken(tok)
			if err != nil {
				return err
			}
			if err := use(h); err != nil {
				return err
			}
		}
		settles = append(settles, fsm.Settle{Target: tgt, Tokens: s.Tokens, Disposition: s.Disposition,
			Properties: s.Properties, Reason: s.Reason, Description: s.Description, SessionID: s.SessionID, Owner: s.Owner})
	}
	var msgs []*fsm.Message
	for _, s := range t.Sends {
		if len(s.Msgs) == 0 {
			continue
		}
		e, err := n.resolve(s.Entity)
		if err != nil {
			return err
		}
		var h group
		keyed := s.Msgs[0].SessionID != "" || s.Msgs[0].PartitionKey != ""
		if have && !keyed && sameGroup(e, g) {
			// Unkeyed messages to a partitioned entity the transaction already uses stay
			// on its partition (as on Service Bus, a transaction stays on one partition);
			// keyed ones must go to their key's partition (S-SES-8).
			h = g
		} else {
			h = e.parts[e.pick(s.Msgs[0].SessionID, s.Msgs[0].PartitionKey)]
		}
		if err := use(h); err != nil {
			return err
		}
		msgs = append(msgs, s.Msgs...)
	}
	if !have {
		return nil // an empty transaction commits trivially
	}
	r := n.call(ctx, g, &CallReq{Op: opTxn, Msgs: msgs, TxnSettles: settles}, nil)
	if r.err != nil {
		return fmt.Errorf("commit: %w", r.err)
	}
	return nil
}

// sameGroup reports whether g is one of e's partitions.
func sameGroup(e *entity, g group) bool {
	for _, h := range e.parts {
		if h.id == g.id {
			return true
		}
	}
	return false
}
