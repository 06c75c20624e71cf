package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

// The bridge's Commit (amqp.Transactor) over a real node: a complete and a send on one
// queue apply together; so do a complete on one queue and a send to another (two-phase
// commit); one with a lost lock is amqp.ErrLockLost with nothing applied.
func TestBackendCommit(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{"q1", "q2"} {
		if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: q, Properties: meta.DefaultQueueProperties()}); err != nil {
			t.Fatal(err)
		}
	}
	q1 := amqp.Address{Entity: "q1"}
	count := func(a amqp.Address) int {
		t.Helper()
		ds, err := b.Peek(ctx, a, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	if err := b.Send(ctx, "q1", []*amqp.Message{{Raw: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, amqp.ReceiveRequest{Address: q1, Max: 1, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d %v", len(ds), err)
	}
	complete := amqp.TxnOp{Settlement: &amqp.Settlement{Address: q1, LockToken: ds[0].LockToken, Disposition: amqp.Complete}}

	err = b.Commit(ctx, []amqp.TxnOp{complete, {Entity: "q2", Messages: []*amqp.Message{{Raw: []byte{2}}}}})
	if err != nil {
		t.Fatalf("cross-entity commit: %v", err)
	}
	if count(q1) != 0 || count(amqp.Address{Entity: "q2"}) != 1 {
		t.Fatal("a cross-entity transaction did not apply on both queues")
	}
	if err := b.Send(ctx, "q1", []*amqp.Message{{Raw: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	ds, err = b.Receive(ctx, amqp.ReceiveRequest{Address: q1, Max: 1, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d %v", len(ds), err)
	}
	complete = amqp.TxnOp{Settlement: &amqp.Settlement{Address: q1, LockToken: ds[0].LockToken, Disposition: amqp.Complete}}

	stale := ds[0].LockToken
	stale[15] ^= 0xff
	err = b.Commit(ctx, []amqp.TxnOp{complete, {Settlement: &amqp.Settlement{Address: q1, LockToken: stale, Disposition: amqp.Complete}}})
	if !errors.Is(err, amqp.ErrLockLost) {
		t.Fatalf("commit with a stale lock: %v, want ErrLockLost", err)
	}
	if count(q1) != 1 {
		t.Fatal("a failed transaction completed the message")
	}

	if err := b.Commit(ctx, []amqp.TxnOp{complete, {Entity: "q1", Messages: []*amqp.Message{{Raw: []byte{3}}}}}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := b.Peek(ctx, q1, "", 0, 10)
	if err != nil || len(got) != 1 || got[0].Message.Raw[0] != 3 {
		t.Fatalf("after commit q1 holds %+v (%v), want only the sent message", got, err)
	}
}
