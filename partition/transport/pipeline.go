package transport

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// pipeline is a raft.AppendPipeline over a peer's connection (the one all groups share):
// AppendEntries sends its request at once and returns, up to window requests wait for
// their answers, and one goroutine hands the answers to raft in the order they were
// sent. The peer hands a group's AppendEntries to its raft in the order they arrive
// (serveConn), so a follower sees them as the leader sent them.
//
// Closing it stops the goroutine; requests still in flight are answered into the void.
// raft closes it when it stops pipelining, also when its reader of the answers stops on
// its own (raft patch 1, docs/raft-patches.md), which makes a blocked AppendEntries
// return ErrPipelineShutdown.
type pipeline struct {
	t       *GroupTransport
	c       *conn
	timeout time.Duration

	slots  chan struct{}          // a token per request in flight: back-pressure
	queue  chan *pipelineFuture   // sent, answers awaited in this order
	done   chan raft.AppendFuture // answered, for raft
	closed chan struct{}
	once   sync.Once
}

// pipelineFuture is one pipelined AppendEntries (raft.AppendFuture). Its answer is
// complete before it is handed to raft through done; err is written before then.
type pipelineFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	cl    *call
	seq   uint64
	err   error
}

func (f *pipelineFuture) Error() error                          { return f.err }
func (f *pipelineFuture) Start() time.Time                      { return f.start }
func (f *pipelineFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *pipelineFuture) Response() *raft.AppendEntriesResponse { return f.resp }

// newPipeline starts a pipeline of group t over c with window requests in flight; nil
// once t's Groups is closed.
func newPipeline(t *GroupTransport, c *conn, window int) *pipeline {
	p := &pipeline{
		t: t, c: c, timeout: t.g.cfg.Timeout,
		slots:  make(chan struct{}, window),
		queue:  make(chan *pipelineFuture, window),
		done:   make(chan raft.AppendFuture, window),
		closed: make(chan struct{}),
	}
	if !t.g.goTracked(p.answers) {
		return nil
	}
	return p
}

// AppendEntries implements raft.AppendPipeline: it sends the request and returns once
// a slot is free, without waiting for the answer.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case p.slots <- struct{}{}:
	case <-p.closed:
		return nil, raft.ErrPipelineShutdown
	case <-p.t.closed:
		return nil, raft.ErrTransportShutdown
	}
	cl, seq, err := p.c.start(p.t.id, rpcAppendEntries, args, resp)
	if err != nil {
		<-p.slots
		return nil, err
	}
	p.t.g.stats.pipelined.Add(1)
	f := &pipelineFuture{start: time.Now(), args: args, resp: resp, cl: cl, seq: seq}
	p.queue <- f // never blocks: a slot was taken for it
	return f, nil
}

// answers waits for each request's answer in order and hands it to raft.
func (p *pipeline) answers() {
	for {
		var f *pipelineFuture
		select {
		case f = <-p.queue:
		case <-p.closed:
			return
		case <-p.t.closed:
			return
		}
		f.err = p.c.wait(f.cl, f.seq, p.timeout)
		<-p.slots
		select {
		case p.done <- f:
		case <-p.closed:
			return
		case <-p.t.closed:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close implements raft.AppendPipeline; the connection stays, for the other groups.
func (p *pipeline) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}
