package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/partition"
)

// Forwarded sends to one peer travel in batches: while sendBatchSlots calls to that
// peer are in flight, new sends wait, and the next call carries all that waited (up to
// sendBatchMax). The peer runs the sends of a batch concurrently, so its partitions'
// group commit puts them into as few Raft entries (and fsyncs) as when clients send to
// it directly, and the cluster RPC costs one round trip per batch, not per message.
// Each send keeps its own deadline, its own result and its own atomicity (S-SEND-5).

const (
	sendBatchSlots = 2
	sendBatchMax   = 128
)

// serveMulti runs a batch of calls from a peer concurrently on the replicas hosted here.
func (s *rpcService) serveMulti(m *wire.Multi) wire.MultiReply {
	out := wire.MultiReply{Replies: make([]wire.Reply, len(m.Calls))}
	var wg sync.WaitGroup
	for i := range m.Calls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out.Replies[i] = s.serveCall(&m.Calls[i])
		}(i)
	}
	wg.Wait()
	return out
}

// batchCall is one send waiting for its batch.
type batchCall struct {
	call *wire.Call
	done chan *wire.Reply // cap 1
}

// sendBatcher batches the forwarded sends to one peer.
type sendBatcher struct {
	peer  peer          // the node the batches go to
	slots chan struct{} // cap sendBatchSlots: calls in flight

	mu      sync.Mutex
	waiting []*batchCall // owner: mu
}

func (rt *Router) batcher(addr string) *sendBatcher {
	rt.batchMu.Lock()
	defer rt.batchMu.Unlock()
	b := rt.batchers[addr]
	if b == nil {
		b = &sendBatcher{peer: rt.n.peer(addr), slots: make(chan struct{}, sendBatchSlots)}
		rt.batchers[addr] = b
	}
	return b
}

// send forwards req (a send) in the next batch to the peer and returns its outcome.
func (b *sendBatcher) send(ctx context.Context, call *wire.Call) *wire.Reply {
	c := &batchCall{call: call, done: make(chan *wire.Reply, 1)}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	b.mu.Unlock()
	b.kick()
	select {
	case r := <-c.done:
		return r
	case <-ctx.Done():
		// The send may still go out with its batch (its own deadline bounds it on the
		// peer): its outcome is unknown to this caller.
		return &wire.Reply{Err: ctxOutcome(ctx)}
	}
}

// kick starts a batch if a slot is free and sends are waiting; a batch that ends kicks
// again, so waiting sends never wait for a new arrival.
func (b *sendBatcher) kick() {
	for {
		select {
		case b.slots <- struct{}{}:
		default:
			return // every slot busy: the batch in flight that ends first kicks
		}
		b.mu.Lock()
		batch := b.waiting
		if len(batch) > sendBatchMax {
			batch, b.waiting = batch[:sendBatchMax:sendBatchMax], batch[sendBatchMax:]
		} else {
			b.waiting = nil
		}
		b.mu.Unlock()
		if len(batch) == 0 {
			<-b.slots
			return
		}
		go b.run(batch)
	}
}

func (b *sendBatcher) run(batch []*batchCall) {
	defer func() {
		<-b.slots
		b.kick()
	}()
	var timeout time.Duration
	req := &wire.Multi{Calls: make([]wire.Call, len(batch))}
	for i, c := range batch {
		req.Calls[i] = *c.call
		timeout = max(timeout, c.call.Timeout)
	}
	if timeout <= 0 {
		timeout = callPatience
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	resp, err := b.peer.Multi(ctx, req)
	for i, c := range batch {
		if err != nil || i >= len(resp.Replies) {
			if err == nil {
				err = fmt.Errorf("%w: %w: the peer answered %d of %d calls", ErrUnavailable, partition.ErrOutcomeUnknown, len(resp.Replies), len(batch))
			}
			c.done <- &wire.Reply{Err: err}
			continue
		}
		c.done <- &resp.Replies[i]
	}
}
