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

// BenchmarkResolve: finding a queue's partition groups by name, which every send,
// receive and settlement does first. One node, one queue of 4 partitions.
//
//	go test ./cluster/ -run '^$' -bench Resolve -benchmem
func BenchmarkResolve(b *testing.B) {
	n := startClusterWith(b, 1, 1, nil)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(b, 30*time.Second, func() error {
		if !n.meta.IsLeader() {
			return fmt.Errorf("no metadata leader")
		}
		return nil
	})
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(4)}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		e, err := n.Router().resolve("bench")
		if err != nil {
			b.Fatal(err)
		}
		if len(e.parts) != 4 {
			b.Fatalf("%d partitions", len(e.parts))
		}
	}
}

// BenchmarkCallLocal: the routing overhead of one call served by the local leader (a
// partition's Stats, which reads the fsm and proposes nothing), as sends and
// settlements pay it on the node that leads their partition.
func BenchmarkCallLocal(b *testing.B) {
	n := startClusterWith(b, 1, 1, nil)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(b, 30*time.Second, func() error {
		if !n.meta.IsLeader() {
			return fmt.Errorf("no metadata leader")
		}
		return nil
	})
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(1)}); err != nil {
		b.Fatal(err)
	}
	e, err := n.Router().resolve("bench")
	if err != nil {
		b.Fatal(err)
	}
	waitFor(b, 30*time.Second, func() error {
		if e.parts[0].local == nil || !e.parts[0].local.p.IsLeader() {
			return fmt.Errorf("the partition has no local leader yet")
		}
		return nil
	})
	b.ReportAllocs()
	for b.Loop() {
		// No deadline, as on an AMQP connection's context: call bounds it itself.
		if _, err := n.Router().call(context.Background(), e.parts[0], &wire.Stats{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSettleRouting: what Settle costs before any partition sees it, for one
// token (the SDK completes each message on its own). The token names a partition the
// queue does not have, so the call ends, lock lost, after resolving the queue and
// grouping the tokens by partition, without a proposal (with one, raft's allocations
// swamp these).
func BenchmarkSettleRouting(b *testing.B) {
	n := startClusterWith(b, 1, 1, nil)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(b, 30*time.Second, func() error {
		if !n.meta.IsLeader() {
			return fmt.Errorf("no metadata leader")
		}
		return nil
	})
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(1)}); err != nil {
		b.Fatal(err)
	}
	tok := fsm.LockToken{0xff, 0xff, 0xff, 0xff}
	b.ReportAllocs()
	for b.Loop() {
		errs := n.Router().Settle(ctx, Settlement{Address: Address{Entity: "bench"}, Tokens: []fsm.LockToken{tok}, Disposition: fsm.Complete})
		if len(errs) != 1 || !errors.Is(errs[0], fsm.ErrLockLost) {
			b.Fatalf("errors %v", errs)
		}
	}
}
