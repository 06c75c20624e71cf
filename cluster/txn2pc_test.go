package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
)

// startTxnNode is a lone node whose transactions resolve quickly.
func startTxnNode(t *testing.T, window time.Duration) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := testConfig(t.TempDir())
	c.TxnPrepareWindow = window
	c.TxnRecoveryInterval = 100 * time.Millisecond
	n, err := Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNode(t, n) })
	return n
}

func createQueues(t *testing.T, ctx context.Context, n *Node, props meta.QueueProperties, names ...string) {
	t.Helper()
	for _, q := range names {
		if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: q, Properties: props}); err != nil {
			t.Fatal(err)
		}
	}
}

func sendBody(t *testing.T, ctx context.Context, n *Node, q, body string) {
	t.Helper()
	if err := n.Router().Send(ctx, q, []*fsm.Message{{Payload: []byte(body)}}); err != nil {
		t.Fatal(err)
	}
}

func receiveOne(t *testing.T, ctx context.Context, n *Node, q string) *fsm.Message {
	t.Helper()
	ms, err := n.Router().Receive(ctx, Address{Entity: q}, "", "", fsm.PeekLock, 1, 5*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive from %s: %v, %d messages", q, err, len(ms))
	}
	return ms[0]
}

func peekBodies(ctx context.Context, n *Node, q string) ([]string, error) {
	ms, err := n.Router().Peek(ctx, Address{Entity: q}, "", 0, 10)
	return payloads(ms), err
}

func wantBodies(t *testing.T, ctx context.Context, n *Node, q string, want ...string) {
	t.Helper()
	got, err := peekBodies(ctx, n, q)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s holds %v (%v), want %v", q, got, err, want)
	}
}

// txnLeftovers reports prepared transactions or decision records left on any replica
// this node leads.
func txnLeftovers(ctx context.Context, nodes ...*Node) error {
	for _, nd := range nodes {
		nd.mu.RLock()
		var reps []*replica
		for _, r := range nd.parts {
			reps = append(reps, r)
		}
		nd.mu.RUnlock()
		for _, r := range reps {
			if !r.p.IsLeader() {
				continue
			}
			prep, dec, err := r.p.TxnState(ctx)
			if err != nil {
				return err
			}
			if len(prep) != 0 || len(dec) != 0 {
				return fmt.Errorf("%s %s: prepared %v, decisions %v", nd.cfg.NodeID, r.entity, prep, dec)
			}
		}
	}
	return nil
}

// TestTxnCrossGroupAllOrNothing: a receive-complete-send across two queues commits on
// both; one that cannot prepare on one queue (a lost lock, the other queue's quota)
// applies on neither, and what it held on the first is released.
func TestTxnCrossGroupAllOrNothing(t *testing.T) {
	n := startTxnNode(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	props := queueProps(1)
	createQueues(t, ctx, n, props, "qa", "qb")
	closed := queueProps(1)
	closed.Status = meta.StatusSendDisabled
	createQueues(t, ctx, n, closed, "qclosed")
	a := Address{Entity: "qa"}

	sendBody(t, ctx, n, "qa", "in")
	m := receiveOne(t, ctx, n, "qa")
	err := n.Router().Commit(ctx, Txn{
		Settles: []Settlement{{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}},
		Sends:   []TxnSend{{Entity: "qb", Msgs: []*fsm.Message{{Payload: []byte("out")}}}},
	})
	if err != nil {
		t.Fatalf("commit across two queues: %v", err)
	}
	wantBodies(t, ctx, n, "qa")
	wantBodies(t, ctx, n, "qb", "out")

	cases := []struct {
		name string
		txn  func(m *fsm.Message) Txn
		want error
	}{
		{"lost lock on the second group", func(m *fsm.Message) Txn {
			// qa's group is prepared first or second depending on ids; the lost token is
			// qb's, the valid one qa's.
			mb := receiveOne(t, ctx, n, "qb")
			bad := mb.LockToken
			bad[15] ^= 0xff
			return Txn{Settles: []Settlement{
				{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete},
				{Address: Address{Entity: "qb"}, Tokens: []fsm.LockToken{bad}, Disposition: fsm.Complete},
			}}
		}, fsm.ErrLockLost},
		{"the other queue refuses sends", func(m *fsm.Message) Txn {
			return Txn{
				Settles: []Settlement{{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}},
				Sends:   []TxnSend{{Entity: "qclosed", Msgs: []*fsm.Message{{Payload: []byte("x")}}}},
			}
		}, fsm.ErrEntityDisabled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sendBody(t, ctx, n, "qa", tc.name)
			m := receiveOne(t, ctx, n, "qa")
			err := n.Router().Commit(ctx, tc.txn(m))
			if !errors.Is(err, tc.want) {
				t.Fatalf("commit: %v, want %v", err, tc.want)
			}
			wantBodies(t, ctx, n, "qclosed")
			// The qa message was not completed: it is still there, and no transaction
			// holds it: either its lock is intact or it was returned to the queue.
			wantBodies(t, ctx, n, "qa", tc.name)
			waitFor(t, 10*time.Second, func() error {
				if errs := n.Router().Settle(ctx, Settlement{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}); errs[0] == nil {
					return nil
				}
				ms, err := n.Router().Receive(ctx, a, "", "", fsm.PeekLock, 1, time.Second)
				if err != nil || len(ms) != 1 {
					return fmt.Errorf("neither completable nor receivable: %v %d", err, len(ms))
				}
				if errs := n.Router().Settle(ctx, Settlement{Address: a, Tokens: []fsm.LockToken{ms[0].LockToken}, Disposition: fsm.Complete}); errs[0] != nil {
					return errs[0]
				}
				return nil
			})
			wantBodies(t, ctx, n, "qa")
		})
	}
	if err := txnLeftovers(ctx, n); err != nil {
		t.Fatalf("after the transactions: %v", err)
	}
	// The qb message the lost-lock case received is still locked by it; qb holds only "out".
	wantBodies(t, ctx, n, "qb", "out")
}

// TestTxnPresumedAbort: a participant prepared without any decision (its driver gone)
// holds the message past the window, then asks the coordinator, which records abort,
// and releases it: the message is receivable again, and a late commit decision is
// refused.
func TestTxnPresumedAbort(t *testing.T) {
	n := startTxnNode(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createQueues(t, ctx, n, queueProps(1), "qa", "qb")
	sendBody(t, ctx, n, "qa", "held")
	m := receiveOne(t, ctx, n, "qa")
	ea, err := n.Router().resolve("qa")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := n.Router().resolve("qb")
	if err != nil {
		t.Fatal(err)
	}
	ga, gb := ea.parts[0], eb.parts[0]
	deadline := n.clock.Now().Add(time.Second).UnixMilli()
	if _, err := n.Router().call(ctx, ga, &wire.TxnPrepare{ID: "orphan", Coordinator: gb.id, Deadline: deadline,
		Settles: []fsm.Settle{{Target: fsm.Target{}, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}}}, nil); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	// Held: not receivable, not settleable by its receiver.
	if ms, err := n.Router().Receive(ctx, Address{Entity: "qa"}, "", "", fsm.PeekLock, 1, 200*time.Millisecond); err != nil || len(ms) != 0 {
		t.Fatalf("receive while prepared: %v, %d messages", err, len(ms))
	}
	if errs := n.Router().Settle(ctx, Settlement{Address: Address{Entity: "qa"}, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Abandon}); !errors.Is(errs[0], fsm.ErrLockLost) {
		t.Fatalf("abandon of a held message: %v, want ErrLockLost", errs[0])
	}
	var got []*fsm.Message
	waitFor(t, 20*time.Second, func() error {
		ms, err := n.Router().Receive(ctx, Address{Entity: "qa"}, "", "", fsm.PeekLock, 1, 200*time.Millisecond)
		if err != nil || len(ms) == 0 {
			return fmt.Errorf("not receivable yet (%v)", err)
		}
		got = ms
		return nil
	})
	if string(got[0].Payload) != "held" || got[0].DeliveryCount != 2 {
		t.Fatalf("after presumed abort received %q with DeliveryCount %d, want held, 2", got[0].Payload, got[0].DeliveryCount)
	}
	// The coordinator recorded abort: a late commit cannot win.
	r, err := n.Router().call(ctx, gb, &wire.TxnDecide{ID: "orphan", Commit: true, Deadline: deadline + 60_000,
		Participants: []uint32{ga.id, gb.id}}, nil)
	if r.Committed || err == nil {
		t.Fatalf("late commit decision: committed %v, %v; want refused", r.Committed, err)
	}
	// Once past the window, the abort record is forgotten.
	waitFor(t, 20*time.Second, func() error { return txnLeftovers(ctx, n) })
}

// TestTxnCommitDecidedThenLeaderFails: the driving node stops right after the commit
// decision (as if it crashed), and the coordinator group's leader is then shut down: the
// new leader finds the decision and completes the transaction on every participant, so
// the completed message is gone and the sent one is in the other queue, on every
// surviving replica.
func TestTxnCommitDecidedThenLeaderFails(t *testing.T) {
	nodes := startClusterWith(t, 3, 3, func(c *Config) { c.TxnRecoveryInterval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	createQueues(t, ctx, nodes[0], queueProps(1), "qa", "qb")
	var coord uint32
	for _, q := range []string{"qa", "qb"} {
		e, err := nodes[0].Router().resolve(q)
		if err != nil {
			t.Fatal(err)
		}
		if id := e.parts[0].id; coord == 0 || id < coord {
			coord = id
		}
	}
	var leader *Node
	waitFor(t, 20*time.Second, func() error {
		leader = nil
		for _, nd := range nodes {
			nd.mu.RLock()
			if r := nd.parts[coord]; r != nil && r.p.IsLeader() {
				leader = nd
			}
			nd.mu.RUnlock()
		}
		if leader == nil {
			return fmt.Errorf("no leader for group %d", coord)
		}
		return nil
	})
	var via *Node
	var survivors []*Node
	for _, nd := range nodes {
		if nd != leader {
			via = nd
			survivors = append(survivors, nd)
		}
	}
	sendBody(t, ctx, via, "qa", "in")
	m := receiveOne(t, ctx, via, "qa")
	decided := ""
	via.Router().txnHook = func(stage, id string) bool {
		if stage == "decided" {
			decided = id
			return true
		}
		return false
	}
	err := via.Router().Commit(ctx, Txn{
		Settles: []Settlement{{Address: Address{Entity: "qa"}, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}},
		Sends:   []TxnSend{{Entity: "qb", Msgs: []*fsm.Message{{Payload: []byte("out")}}}},
	})
	if err != nil || decided == "" {
		t.Fatalf("commit: %v (decided %q)", err, decided)
	}
	// Nothing completed yet (the driver stopped): the sent message is not visible.
	wantBodies(t, ctx, via, "qb")
	closeNode(t, leader)

	waitFor(t, 30*time.Second, func() error {
		a, err := peekBodies(ctx, via, "qa")
		if err != nil {
			return err
		}
		b, err := peekBodies(ctx, via, "qb")
		if err != nil {
			return err
		}
		if len(a) != 0 || fmt.Sprint(b) != "[out]" {
			return fmt.Errorf("qa %v, qb %v", a, b)
		}
		return nil
	})
	waitFor(t, 30*time.Second, func() error { return txnLeftovers(ctx, survivors...) })
	waitFor(t, 20*time.Second, func() error { return converged(survivors) })
}
