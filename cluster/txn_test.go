package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

func payloads(ms []*fsm.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload)
	}
	return out
}

// TestTxnCommitOnePartition: through a node, a transaction that completes a received
// message and sends another to the same queue applies both at commit; one whose
// settlement lost its lock applies nothing; one spanning two queues commits on both
// (two-phase commit, txn2pc_test.go covers its failures).
func TestTxnCommitOnePartition(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer closeNode(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, q := range []string{"work", "other"} {
		if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: q, Properties: queueProps(1)}); err != nil {
			t.Fatal(err)
		}
	}
	a := Address{Entity: "work"}
	send := func(body string) {
		t.Helper()
		if err := n.Router().Send(ctx, "work", []*fsm.Message{{Payload: []byte(body)}}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *fsm.Message {
		t.Helper()
		ms, err := n.Router().Receive(ctx, a, "", "", fsm.PeekLock, 1, 5*time.Second)
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive: %v %d", err, len(ms))
		}
		return ms[0]
	}
	peek := func() []string {
		t.Helper()
		ms, err := n.Router().Peek(ctx, a, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return payloads(ms)
	}

	send("in")
	m := recv()
	err := n.Router().Commit(ctx, Txn{
		Settles: []Settlement{{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}},
		Sends:   []TxnSend{{Entity: "work", Msgs: []*fsm.Message{{Payload: []byte("out")}}}},
	})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := peek(); len(got) != 1 || got[0] != "out" {
		t.Fatalf("after commit the queue holds %v, want [out]", got)
	}

	// A settlement whose lock is gone (already completed) fails the whole transaction.
	m = recv()
	var lost fsm.LockToken
	copy(lost[:], m.LockToken[:])
	lost[15] ^= 0xff
	err = n.Router().Commit(ctx, Txn{
		Settles: []Settlement{
			{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete},
			{Address: a, Tokens: []fsm.LockToken{lost}, Disposition: fsm.Complete},
		},
		Sends: []TxnSend{{Entity: "work", Msgs: []*fsm.Message{{Payload: []byte("never")}}}},
	})
	if !errors.Is(err, fsm.ErrLockLost) {
		t.Fatalf("commit with a lost lock: %v, want ErrLockLost", err)
	}
	if got := peek(); len(got) != 1 || got[0] != "out" {
		t.Fatalf("after a failed commit the queue holds %v, want [out]", got)
	}
	// The valid lock survived: the message can still be completed.
	if errs := n.Router().Settle(ctx, Settlement{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}); errs[0] != nil {
		t.Fatalf("complete after a failed commit: %v", errs[0])
	}

	// Two queues are two partition groups: both apply.
	send("again")
	m = recv()
	err = n.Router().Commit(ctx, Txn{
		Settles: []Settlement{{Address: a, Tokens: []fsm.LockToken{m.LockToken}, Disposition: fsm.Complete}},
		Sends:   []TxnSend{{Entity: "other", Msgs: []*fsm.Message{{Payload: []byte("x")}}}},
	})
	if err != nil {
		t.Fatalf("cross-entity commit: %v", err)
	}
	if ms, err := n.Router().Peek(ctx, Address{Entity: "other"}, "", 0, 10); err != nil || len(ms) != 1 || string(ms[0].Payload) != "x" {
		t.Fatalf("other holds %v after a cross-entity commit (%v), want [x]", payloads(ms), err)
	}
	if got := peek(); len(got) != 0 {
		t.Fatalf("after a cross-entity commit work holds %v, want nothing", got)
	}
}

// TestTxnCommitLeaderFailover: a commit sent through a follower node (forwarded to the
// partition leader) while that leader is shut down applies entirely or not at all: the
// queue afterwards holds the sent message and not the completed one, or the completed
// one and not the sent one, never both or neither; a commit reported successful applied;
// the surviving replicas agree.
func TestTxnCommitLeaderFailover(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "tq", Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	a := Address{Entity: "tq"}
	leader := leaderOf(t, nodes, "tq")
	var via *Node
	var survivors []*Node
	for _, nd := range nodes {
		if nd != leader {
			via = nd
			survivors = append(survivors, nd)
		}
	}
	if err := via.Router().Send(ctx, "tq", []*fsm.Message{{Payload: []byte("in")}}); err != nil {
		t.Fatal(err)
	}
	ms, err := via.Router().Receive(ctx, a, "", "", fsm.PeekLock, 1, 5*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %d", err, len(ms))
	}
	done := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		done <- via.Router().Commit(cctx, Txn{
			Settles: []Settlement{{Address: a, Tokens: []fsm.LockToken{ms[0].LockToken}, Disposition: fsm.Complete}},
			Sends:   []TxnSend{{Entity: "tq", Msgs: []*fsm.Message{{Payload: []byte("out")}}}},
		})
	}()
	closeNode(t, leader)
	commitErr := <-done

	var got []string
	waitFor(t, 30*time.Second, func() error {
		ps, err := via.Router().Peek(ctx, a, "", 0, 10)
		if err != nil {
			return err
		}
		got = payloads(ps)
		return nil
	})
	switch {
	case len(got) == 1 && got[0] == "out":
		t.Logf("committed (commit returned %v)", commitErr)
	case len(got) == 1 && got[0] == "in" && commitErr != nil:
		t.Logf("not applied (commit returned %v)", commitErr)
	default:
		t.Fatalf("after a commit during failover the queue holds %v (commit returned %v): partial or lost", got, commitErr)
	}
	waitFor(t, 20*time.Second, func() error { return converged(survivors) })
}

// TestTxnPartitionedEntity: on a partitioned queue, unkeyed sends in a transaction go to
// the partition its settlements use, so receive-complete-send commits in one entry; a
// keyed send whose key maps to another partition commits across the two partitions.
func TestTxnPartitionedEntity(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer closeNode(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "pq", Properties: queueProps(4)}); err != nil {
		t.Fatal(err)
	}
	a := Address{Entity: "pq"}
	if err := n.Router().Send(ctx, "pq", []*fsm.Message{{Payload: []byte("in")}}); err != nil {
		t.Fatal(err)
	}
	ms, err := n.Router().Receive(ctx, a, "", "", fsm.PeekLock, 1, 5*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %d", err, len(ms))
	}
	complete := Settlement{Address: a, Tokens: []fsm.LockToken{ms[0].LockToken}, Disposition: fsm.Complete}
	e, err := n.Router().resolve("pq")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.groupOfToken(ms[0].LockToken)
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for i := 0; other == ""; i++ { // a partition key that maps elsewhere
		if k := fmt.Sprint("k", i); e.parts[e.keyed(k)].id != g.id {
			other = k
		}
	}
	err = n.Router().Commit(ctx, Txn{Settles: []Settlement{complete}, Sends: []TxnSend{{Entity: "pq", Msgs: []*fsm.Message{{Payload: []byte("out")}}}}})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	ps, err := n.Router().Peek(ctx, a, "", 0, 10)
	if err != nil || len(ps) != 1 || string(ps[0].Payload) != "out" {
		t.Fatalf("after commit pq holds %v (%v), want [out]", payloads(ps), err)
	}
	if ps[0].SequenceNumber>>seqShift != int64(g.index) {
		t.Fatalf("the unkeyed send went to partition %d, not the settlement's %d", ps[0].SequenceNumber>>seqShift, g.index)
	}
	// A keyed send to another partition, with the completion of "out": two groups.
	ms, err = n.Router().Receive(ctx, a, "", "", fsm.PeekLock, 1, 5*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %d", err, len(ms))
	}
	keyedMsg := &fsm.Message{Payload: []byte("keyed")}
	keyedMsg.PartitionKey = other
	complete.Tokens = []fsm.LockToken{ms[0].LockToken}
	err = n.Router().Commit(ctx, Txn{Settles: []Settlement{complete}, Sends: []TxnSend{{Entity: "pq", Msgs: []*fsm.Message{keyedMsg}}}})
	if err != nil {
		t.Fatalf("keyed send to another partition: %v", err)
	}
	ps, err = n.Router().Peek(ctx, a, "", 0, 10)
	if err != nil || len(ps) != 1 || string(ps[0].Payload) != "keyed" {
		t.Fatalf("after the cross-partition commit pq holds %v (%v), want [keyed]", payloads(ps), err)
	}
}
