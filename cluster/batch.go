package cluster

import (
	"context"
	"sync"
	"time"
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

// MultiReq is a batch of independent calls.
type MultiReq struct {
	Calls []CallReq
}

// MultiResp holds their outcomes, in order.
type MultiResp struct {
	Resps []CallResp
}

// Multi runs a batch of calls concurrently on the replicas hosted here.
func (s *rpcService) Multi(req *MultiReq, resp *MultiResp) error {
	resp.Resps = make([]CallResp, len(req.Calls))
	var wg sync.WaitGroup
	for i := range req.Calls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = s.Call(&req.Calls[i], &resp.Resps[i])
		}(i)
	}
	wg.Wait()
	return nil
}

// batchCall is one send waiting for its batch.
type batchCall struct {
	req  *CallReq
	done chan *CallResp // cap 1
}

// sendBatcher batches the forwarded sends to one peer.
type sendBatcher struct {
	n     *Node
	addr  string
	slots chan struct{} // cap sendBatchSlots: calls in flight

	mu      sync.Mutex
	waiting []*batchCall // owner: mu
}

func (n *Node) batcher(addr string) *sendBatcher {
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	b := n.batchers[addr]
	if b == nil {
		b = &sendBatcher{n: n, addr: addr, slots: make(chan struct{}, sendBatchSlots)}
		n.batchers[addr] = b
	}
	return b
}

// send forwards req (a send) in the next batch to the peer and returns its outcome.
func (b *sendBatcher) send(ctx context.Context, req *CallReq) *CallResp {
	c := &batchCall{req: req, done: make(chan *CallResp, 1)}
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
		return &CallResp{err: ctxOutcome(ctx)}
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
	req := &MultiReq{Calls: make([]CallReq, len(batch))}
	for i, c := range batch {
		req.Calls[i] = *c.req
		timeout = max(timeout, c.req.Timeout)
	}
	if timeout <= 0 {
		timeout = callPatience
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	var resp MultiResp
	err := b.n.rpc.call(ctx, b.addr, "Multi", req, &resp, nil)
	for i, c := range batch {
		if err != nil || i >= len(resp.Resps) {
			c.done <- &CallResp{err: err}
			continue
		}
		r := &resp.Resps[i]
		r.fromWire()
		c.done <- r
	}
}
