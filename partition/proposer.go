package partition

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// proposal is one command waiting for its result. The proposer or the completer writes
// res and err, then closes done; the caller reads them only after done (P4).
type proposal struct {
	cmd   fsm.Command
	size  int  // estimated encoded bytes, for the batch byte bound
	chunk bool // an fsm.BodyChunk: never in one entry with another chunk

	done chan struct{}
	res  fsm.Result
	err  error
	// taken is set once, by whichever comes first: the proposer putting the command in a
	// batch, or the caller giving up (then the proposer drops it).
	taken atomic.Bool
}

// inflight is one raft entry submitted and not yet answered.
type inflight struct {
	f     raft.ApplyFuture
	props []*proposal
	start time.Time // when it was given to raft, for Observer.Committed
}

// propose hands cmd to the group-commit proposer and waits until its entry is committed
// on a quorum and applied, or ctx ends.
func (p *Partition) propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	pr, err := p.submit(ctx, cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	return p.await(ctx, pr)
}

// submit hands cmd to the group-commit proposer without waiting for its result: the
// commands one goroutine submits reach the log in the order submitted. Every submitted
// proposal must be awaited.
func (p *Partition) submit(ctx context.Context, cmd fsm.Command) (*proposal, error) {
	select {
	case <-p.closing:
		return nil, ErrClosed
	default:
	}
	if p.raft.State() != raft.Leader {
		return nil, p.notLeader(false)
	}
	_, chunk := cmd.(*fsm.BodyChunk)
	pr := &proposal{cmd: cmd, size: cmdSize(cmd), chunk: chunk, done: make(chan struct{})}
	select {
	case p.propCh <- pr:
		p.kickProposer()
		return pr, nil
	case <-ctx.Done():
		return nil, ctxErr(ctx, false)
	case <-p.closing:
		return nil, ErrClosed
	}
}

// await waits for a submitted proposal's result, or until ctx ends.
func (p *Partition) await(ctx context.Context, pr *proposal) (fsm.Result, error) {
	select {
	case <-pr.done:
		return pr.res, pr.err
	case <-ctx.Done():
		if pr.taken.CompareAndSwap(false, true) {
			// Still queued; the proposer will drop it. Not in the log.
			return fsm.Result{}, ctxErr(ctx, false)
		}
		return fsm.Result{}, ctxErr(ctx, true)
	case <-p.closing:
		if pr.taken.CompareAndSwap(false, true) {
			return fsm.Result{}, ErrClosed
		}
		return fsm.Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrClosed)
	}
}

// cmdSize estimates a command's encoded size: payloads dominate.
func cmdSize(c fsm.Command) int {
	n := 64
	msgs := func(ms []*fsm.Message) {
		for _, m := range ms {
			n += len(m.Payload) + 128
		}
	}
	switch c := c.(type) {
	case *fsm.Enqueue:
		msgs(c.Messages)
	case *fsm.Schedule:
		msgs(c.Messages)
	case *fsm.EnqueueUploaded:
		msgs(c.Messages)
	case *fsm.BodyChunk:
		n += len(c.Data)
	case *fsm.Settle:
		n += 16 * len(c.Tokens)
	case *fsm.RenewLock:
		n += 16 * len(c.Tokens)
	case *fsm.SetSessionState:
		n += len(c.State)
	case *fsm.Txn:
		for _, sc := range c.Cmds {
			n += cmdSize(sc)
		}
	case *fsm.TxnPrepare:
		for _, sc := range c.Cmds {
			n += cmdSize(sc)
		}
	}
	return n
}

// kickProposer starts the proposer unless it runs: every send to propCh is followed by
// it. The proposer ends when it finds propCh empty after clearing propRunning, so a
// proposal queued before a kick that saw propRunning set is taken by the running one.
// Once Close began, nothing starts (the proposal is answered by Close or by its caller's
// wait on closing).
func (p *Partition) kickProposer() {
	if !p.propRunning.CompareAndSwap(false, true) {
		return
	}
	p.startMu.Lock()
	if p.stopped {
		p.startMu.Unlock()
		p.propRunning.Store(false)
		return
	}
	p.wg.Go(p.runProposer)
	p.startMu.Unlock()
}

// idle reports whether a worker whose flag is running may end: it clears the flag,
// then ends unless work arrived (more reports whether some is queued) and no one else
// started a worker in the meantime.
func idle(running *atomic.Bool, more func() bool) bool {
	running.Store(false)
	return !more() || !running.CompareAndSwap(false, true)
}

// runProposer is the group-commit loop, running while proposals are queued
// (kickProposer). It takes the first waiting proposal, waits for an in-flight slot, then
// drains whatever else is queued (up to the count and byte bounds, lingering if
// configured) into one fsm.Entry stamped with the leader's time, and submits it to raft
// without waiting for the commit: the completer answers it. While MaxInflight entries
// are in flight, proposals accumulate, so batches grow with load.
func (p *Partition) runProposer() {
	var pending *proposal
	for {
		first := pending
		pending = nil
		if first == nil {
			select {
			case <-p.closing:
				p.failQueued()
				p.propRunning.Store(false)
				return
			default:
			}
			select {
			case first = <-p.propCh:
			default:
				if idle(&p.propRunning, func() bool { return len(p.propCh) > 0 }) {
					return
				}
				continue
			}
		}
		select {
		case p.sem <- struct{}{}:
		case <-p.closing:
			finish(first, fsm.Result{}, ErrClosed)
			p.failQueued()
			p.propRunning.Store(false)
			return
		}
		batch := []*proposal{first}
		size := first.size
		chunked := first.chunk // a chunk is in the batch: the next one starts another entry
		var lingerC chan struct{}
		var stopLinger func() bool
	collect:
		for len(batch) < p.cfg.MaxBatchCmds && size < p.cfg.MaxBatchBytes {
			select {
			case pr := <-p.propCh:
				if (size+pr.size > p.cfg.MaxBatchBytes && len(batch) > 0) || (pr.chunk && chunked) {
					pending = pr // starts the next batch
					break collect
				}
				batch = append(batch, pr)
				size += pr.size
				chunked = chunked || pr.chunk
				continue
			default:
			}
			if p.cfg.Linger <= 0 {
				break
			}
			if lingerC == nil {
				lingerC = make(chan struct{})
				ch := lingerC
				stopLinger = p.clock.AfterFunc(p.cfg.Linger, func() { close(ch) })
			}
			select {
			case pr := <-p.propCh:
				if size+pr.size > p.cfg.MaxBatchBytes || (pr.chunk && chunked) {
					pending = pr
					break collect
				}
				batch = append(batch, pr)
				size += pr.size
				chunked = chunked || pr.chunk
			case <-lingerC:
				break collect
			case <-p.closing:
				break collect
			}
		}
		if stopLinger != nil {
			stopLinger()
		}

		// Drop proposals whose callers gave up; they never reach the log.
		live := batch[:0]
		for _, pr := range batch {
			if pr.taken.CompareAndSwap(false, true) {
				live = append(live, pr)
			} else {
				close(pr.done)
			}
		}
		if len(live) == 0 {
			<-p.sem
			continue
		}
		live = p.piggyback(live)
		// The leader's time never goes back in the log: max of its clock, the last stamp
		// this replica proposed and the fsm's time (which includes earlier leaders'
		// stamps).
		now := max(p.clock.Now().UnixMilli(), p.lastNow.Load(), p.m.now.Load())
		p.lastNow.Store(now)
		e := fsm.Entry{Now: now, Cmds: make([]fsm.Command, len(live))}
		for i, pr := range live {
			e.Cmds[i] = pr.cmd
		}
		data := fsm.AppendEntry(make([]byte, 0, size+64), &e)
		p.ctr.entries.Add(1)
		p.ctr.proposals.Add(uint64(len(live)))
		if o := p.cfg.Observer; o != nil {
			o.Batched(len(live), len(data))
		}
		start := p.clock.Now()
		f := p.raft.Apply(data, 0)
		p.inflightCh <- inflight{f: f, props: live, start: start}
		if p.compRunning.CompareAndSwap(false, true) {
			p.wg.Go(p.runCompleter) // the proposer's own count keeps the group's above zero
		}
	}
}

// runCompleter answers submitted entries in log order, running while entries are in
// flight (the proposer starts it).
func (p *Partition) runCompleter() {
	for {
		var in inflight
		select {
		case in = <-p.inflightCh:
		default:
			if idle(&p.compRunning, func() bool { return len(p.inflightCh) > 0 }) {
				return
			}
			continue
		}
		err := in.f.Error()
		var results []fsm.Result
		if err == nil {
			switch r := in.f.Response().(type) {
			case []fsm.Result:
				results = r
			case error:
				err = r
			default:
				err = fmt.Errorf("partition: unexpected apply response %T", r)
			}
			if err == nil && len(results) != len(in.props) {
				err = fmt.Errorf("partition: %d results for %d commands", len(results), len(in.props))
			}
		} else {
			err = p.raftErr(err)
		}
		if o := p.cfg.Observer; o != nil {
			o.Committed(p.clock.Now().Sub(in.start), err == nil)
		}
		for i, pr := range in.props {
			if err != nil {
				finish(pr, fsm.Result{}, err)
			} else {
				finish(pr, results[i], nil)
			}
		}
		<-p.sem
	}
}

func finish(pr *proposal, res fsm.Result, err error) {
	pr.res, pr.err = res, err
	close(pr.done)
}

// failQueued answers every queued proposal with ErrClosed (shutdown).
func (p *Partition) failQueued() {
	for {
		select {
		case pr := <-p.propCh:
			finish(pr, fsm.Result{}, ErrClosed)
		default:
			return
		}
	}
}

// resultErr wraps an fsm result's error so callers can errors.Is the fsm sentinels.
func resultErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed) || errors.Is(err, ErrTimeout) {
		return err
	}
	return fmt.Errorf("partition: %s: %w", op, err)
}
