package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// Transactions (AMQP 1.0 part 4, the Service Bus profile; docs/guarantees.md): the
// protocol layer buffers a transaction's sends and settlements and hands them over at
// commit.
//
// On one partition group, commit applies them in one Raft entry (fsm.Txn), so they take
// effect all together or not at all, on every replica, surviving a leader failover like
// any other entry.
//
// On several groups (another entity, another partition of a partitioned entity, a
// send-via destination), commit runs two-phase commit over the groups' Raft logs
// (fsm/txn2pc.go):
//  1. prepare on every participant in group-id order (fsm.TxnPrepare): each validates
//     its part as fsm.Txn would and holds it (settled messages pinned, sends invisible);
//     the first refusal aborts the prepared ones and fails the commit;
//  2. decide commit in the coordinator group, the first participant (fsm.TxnDecide):
//     the commit point; it is refused after the transaction's deadline
//     (Config.TxnPrepareWindow after the prepare began), and then the transaction aborts;
//  3. complete on every participant (fsm.TxnCommit or fsm.TxnAbort), then forget the
//     decision in the coordinator (fsm.TxnForget).
//
// Recovery (recoverTxns, every Config.TxnRecoveryInterval on each partition leader): a
// coordinator leader re-drives step 3 for the decisions it holds (after one interval, so
// the driver that made them normally finishes first), and forgets abort records once
// their deadline has passed (a late commit is then refused by the deadline anyway). A
// participant leader holding a prepared transaction past its deadline asks the
// coordinator by proposing an abort decision there: the first decision stands, so the
// answer is the commit if one was made, and otherwise abort is recorded before the
// participant aborts (presumed abort), so no late decide can commit.

// ErrCrossPartition was returned by Commit when a transaction touched more than one
// partition group, before two-phase commit lifted that limit; kept for callers that
// still test for it.
var ErrCrossPartition = errors.New("cluster: a transaction spanning more than one partition is not supported")

// DefaultTxnPrepareWindow and DefaultTxnRecoveryInterval are the defaults of
// Config.TxnPrepareWindow and Config.TxnRecoveryInterval.
const (
	DefaultTxnPrepareWindow    = 30 * time.Second
	DefaultTxnRecoveryInterval = time.Second
)

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

// txnPart is what one partition group does in a transaction.
type txnPart struct {
	g       group
	msgs    []*fsm.Message
	settles []fsm.Settle
}

// Commit applies t atomically. It returns nil when every operation applied (on several
// groups: once the commit decision is durable; a participant that could not be told yet
// is completed by recovery); otherwise nothing applied, except when the outcome is
// unknown (partition.ErrOutcomeUnknown: a leader failed after a proposal), in which case
// the whole transaction applied or none of it did.
func (rt *Router) Commit(ctx context.Context, t Txn) error {
	var parts []*txnPart
	part := func(h group) *txnPart {
		for _, p := range parts {
			if p.g.id == h.id {
				return p
			}
		}
		p := &txnPart{g: h}
		parts = append(parts, p)
		return p
	}
	for _, s := range t.Settles {
		e, tgt, err := rt.target(s.Address)
		if err != nil {
			return err
		}
		byGroup := map[uint32][]fsm.LockToken{} // lookup only; order from the tokens
		var order []group
		for _, tok := range s.Tokens {
			h, err := e.groupOfToken(tok)
			if err != nil {
				return err
			}
			if _, ok := byGroup[h.id]; !ok {
				order = append(order, h)
			}
			byGroup[h.id] = append(byGroup[h.id], tok)
		}
		for _, h := range order {
			p := part(h)
			p.settles = append(p.settles, fsm.Settle{Target: tgt, Tokens: byGroup[h.id], Disposition: s.Disposition,
				Properties: s.Properties, Reason: s.Reason, Description: s.Description, SessionID: s.SessionID, Owner: s.Owner})
		}
	}
	for _, s := range t.Sends {
		if len(s.Msgs) == 0 {
			continue
		}
		e, err := rt.resolve(s.Entity)
		if err != nil {
			return err
		}
		keyed := s.Msgs[0].SessionID != "" || s.Msgs[0].PartitionKey != ""
		h := e.parts[e.pick(rt, s.Msgs[0].SessionID, s.Msgs[0].PartitionKey, s.Msgs[0].MessageID)]
		if !keyed {
			// Unkeyed messages to a partitioned entity the transaction already uses stay
			// on its partition (as on Service Bus, a transaction stays on one partition
			// where it can); keyed ones go to their key's partition (S-SES-8).
			for _, p := range parts {
				if sameGroup(e, p.g) {
					h = p.g
					break
				}
			}
		}
		p := part(h)
		p.msgs = append(p.msgs, s.Msgs...)
	}
	switch len(parts) {
	case 0:
		return nil // an empty transaction commits trivially
	case 1:
		if _, err := rt.call(ctx, parts[0].g, &wire.Txn{Msgs: parts[0].msgs, Settles: parts[0].settles}, nil); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}
	slices.SortFunc(parts, func(a, b *txnPart) int { return cmp.Compare(a.g.id, b.g.id) })
	return txnRun{rt}.commit2PC(ctx, parts)
}

// commit2PC runs two-phase commit over parts, sorted by group id (see the top of the file).
// txnRun runs the two-phase commits its node coordinates and their recovery.
type txnRun struct{ rt *Router }

func (t txnRun) commit2PC(ctx context.Context, parts []*txnPart) error {
	rt := t.rt
	id := newTxnID()
	coord := parts[0].g
	deadline := rt.clock.Now().Add(rt.prepareWindow).UnixMilli()
	ids := make([]uint32, len(parts))
	for i, p := range parts {
		ids[i] = p.g.id
	}
	for i, p := range parts {
		_, err := rt.call(ctx, p.g, &wire.TxnPrepare{ID: id, Coordinator: coord.id, Deadline: deadline,
			Msgs: p.msgs, Settles: p.settles}, nil)
		if err != nil {
			// Nothing is decided: release what was prepared (a prepare whose outcome is
			// unknown included). One that cannot be told now presumes abort at its deadline.
			t.completeAll(ids[:i+1], id, false)
			return fmt.Errorf("commit: prepare in partition group %d: %w", p.g.id, err)
		}
	}
	if rt.txnHook != nil && rt.txnHook("prepared", id) {
		return fmt.Errorf("commit: %w: stopped by a test after the prepare", partition.ErrOutcomeUnknown)
	}
	r, err := rt.call(ctx, coord, &wire.TxnDecide{ID: id, Commit: true, Deadline: deadline, Participants: ids}, nil)
	switch {
	case err == nil && r.Committed:
	case errors.Is(err, fsm.ErrTxnDecided) || errors.Is(err, fsm.ErrTxnTimeout):
		// Aborted: by a participant that presumed abort, or past the deadline.
		t.completeAll(ids, id, false)
		return fmt.Errorf("commit: %w", err)
	default:
		// Unknown: the decision may be durable (recovery then completes it) or not
		// (the participants then presume abort at the deadline).
		return fmt.Errorf("commit: %w: decide in partition group %d: %w", partition.ErrOutcomeUnknown, coord.id, err)
	}
	if rt.txnHook != nil && rt.txnHook("decided", id) {
		return nil // committed; the test leaves completion to recovery
	}
	if t.completeAll(ids, id, true) {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = rt.call(fctx, coord, &wire.TxnForget{ID: id}, nil) // failure: recovery forgets it
		cancel()
	}
	return nil
}

// completeAll tells every group of ids to commit or abort transaction id, and reports
// whether all of them acknowledged. It does not wait on the client's context: a
// completion left half done is finished by recovery, but sooner is better.
func (t txnRun) completeAll(ids []uint32, id string, commit bool) bool {
	rt := t.rt
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all := true
	for _, gid := range ids {
		g, ok := rt.loc.groupByID(gid)
		if !ok {
			continue // its entity was deleted, and its prepared state with it
		}
		if _, err := rt.call(ctx, g, &wire.TxnComplete{ID: id, Commit: commit}, nil); err != nil {
			all = false
		}
	}
	return all
}

func newTxnID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
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

// txnRecoveryLoop runs recoverTxns every TxnRecoveryInterval until ctx (the node's
// lifetime) ends; Close cancels a pass in progress.
func (rt *Router) txnRecoveryLoop(ctx context.Context) {
	t := time.NewTicker(rt.recoveryInterval)
	defer t.Stop()
	seen := map[string]bool{} // decisions seen on the previous pass; owner: this goroutine
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen = txnRun{rt}.recoverTxns(ctx, seen)
	}
}

// recoverTxns completes what the partitions this node leads hold (see the top of the
// file) and returns the decisions it saw.
func (t txnRun) recoverTxns(ctx context.Context, seen map[string]bool) map[string]bool {
	rt := t.rt
	leading := rt.loc.ledHere()
	next := map[string]bool{}
	now := rt.clock.Now().UnixMilli()
	for _, gid := range leading {
		r := rt.loc.hosted(gid)
		if r == nil {
			continue
		}
		prep, dec, err := r.p.TxnState(ctx)
		if err != nil {
			continue
		}
		for _, d := range dec {
			next[d.ID] = true
			if !seen[d.ID] {
				continue // the driver that decided it normally completes it within an interval
			}
			if !t.completeAll(d.Participants, d.ID, d.Commit) {
				continue
			}
			if d.Commit || now > d.Deadline+rt.recoveryInterval.Milliseconds() {
				if g, ok := rt.loc.groupByID(gid); ok {
					_, _ = rt.call(ctx, g, &wire.TxnForget{ID: d.ID}, nil)
				}
			}
		}
		for _, p := range prep {
			if now <= p.Deadline {
				continue
			}
			commit := false
			if cg, ok := rt.loc.groupByID(p.Coordinator); ok {
				cr, err := rt.call(ctx, cg, &wire.TxnDecide{ID: p.ID, Deadline: p.Deadline, Participants: []uint32{gid}}, nil)
				switch {
				case err == nil:
				case errors.Is(err, fsm.ErrTxnDecided):
					commit = cr.Committed
				default:
					continue // the coordinator cannot answer now; ask again next pass
				}
			}
			// No coordinator group any more (its entity was deleted): abort.
			t.completeAll([]uint32{gid}, p.ID, commit)
		}
	}
	return next
}
