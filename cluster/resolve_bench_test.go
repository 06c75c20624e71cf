package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
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
		if !n.meta.isLeader() {
			return fmt.Errorf("no metadata leader")
		}
		return nil
	})
	if err := n.Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(4)}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		e, err := n.resolve("bench")
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
		if !n.meta.isLeader() {
			return fmt.Errorf("no metadata leader")
		}
		return nil
	})
	if err := n.Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(1)}); err != nil {
		b.Fatal(err)
	}
	e, err := n.resolve("bench")
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
		if r := n.call(context.Background(), e.parts[0], &CallReq{Op: opStats}, nil); r.err != nil {
			b.Fatal(r.err)
		}
	}
}
