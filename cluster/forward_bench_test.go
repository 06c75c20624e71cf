package cluster

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
)

// BenchmarkForwardSend isolates the cost of forwarding a send to a partition's leader
// (the cluster RPC) from the AMQP layer: three in-process nodes (fsync on), one queue
// with 2 replicas, production Raft timing, 256 concurrent single-message sends of a 1 KiB payload through the
// node that leads it (local) or through the one that hosts no replica (forwarded). All
// three nodes share this process, so a CPU profile shows both ends of the RPC:
//
//	go test ./cluster/ -run '^$' -bench ForwardSend/forwarded -benchtime 20000x -cpuprofile cpu.out
//	go tool pprof -top -focus 'net/rpc|encoding/gob|remote|rpcService' cpu.out
func BenchmarkForwardSend(b *testing.B) {
	// Production Raft timing: the tests' 100 ms timeouts make leaders step down when
	// the benchmark saturates both cores.
	nodes := startClusterWith(b, 3, 2, func(c *Config) { c.Raft = DefaultConfig().Raft })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var metaLeader *Node
	waitFor(b, 30*time.Second, func() error {
		for _, nd := range nodes {
			if nd.meta.IsLeader() {
				metaLeader = nd
				return nil
			}
		}
		return fmt.Errorf("no metadata leader")
	})
	if err := metaLeader.Store().Apply(ctx, &meta.CreateQueue{Name: "bench", Properties: queueProps(1)}); err != nil {
		b.Fatal(err)
	}
	var pl meta.Placement
	metaLeader.meta.Read(func(s *meta.State) { pl, _ = s.Placement("bench") })
	var leader, outsider *Node
	waitFor(b, 30*time.Second, func() error {
		leader, outsider = nil, nil
		for _, nd := range nodes {
			if !containsNode(pl.Partitions[0].Replicas, nd.cfg.NodeID) {
				outsider = nd
				continue
			}
			nd.mu.RLock()
			r := nd.parts[pl.Partitions[0].GroupID]
			nd.mu.RUnlock()
			if r != nil && r.p.IsLeader() {
				leader = nd
			}
		}
		if leader == nil || outsider == nil {
			return fmt.Errorf("leader %v, outsider %v", leader, outsider)
		}
		return nil
	})
	payload := make([]byte, 1100) // about what the SDK's 1 KiB message encodes to
	for _, c := range []struct {
		name string
		n    *Node
	}{{"local", leader}, {"forwarded", outsider}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(256 / runtime.GOMAXPROCS(0))
			b.SetBytes(int64(len(payload)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m := &fsm.Message{Payload: payload}
					m.MessageID = "0123456789abcdef0123456789abcdef"
					m.Size = int64(len(payload))
					if err := c.n.Router().Send(ctx, "bench", []*fsm.Message{m}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
