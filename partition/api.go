package partition

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// The typed API. Every write proposes one fsm command through the group-commit proposer
// and returns after the entry carrying it is committed on a quorum (fsynced) and applied
// on this replica (S-SEND-1). Errors: *NotLeaderError (errors.Is ErrNotLeader) on a
// follower, ErrTimeout when ctx's deadline passes, ErrClosed, or the fsm's own sentinel
// errors (fsm.ErrLockLost, ...) wrapped with %w. Messages passed in must not be changed
// until the call returns; messages returned are the caller's.

// Enqueue stores msgs all-or-nothing (S-SEND-5) and returns their sequence numbers; for a
// duplicate (S-DUP-1) the original's sequence number, or 0 if unknown.
//
// A payload larger than Config.ChunkBytes is replicated in chunks before the message
// (chunks.go), so other proposals are not held up behind it; a failure during the chunks
// is definite (the message was not stored), as is fsm.ErrUploadIncomplete.
func (p *Partition) Enqueue(ctx context.Context, msgs []*fsm.Message) ([]int64, error) {
	res, err := p.sendMaybeChunked(ctx, msgs, false)
	if err != nil {
		return nil, err
	}
	return res.SeqNos, resultErr("enqueue", res.Err)
}

// Schedule stores msgs to become available at their ScheduledEnqueueTime (S-SCH-1) and
// returns their sequence numbers.
// Large payloads are chunked as for Enqueue.
func (p *Partition) Schedule(ctx context.Context, msgs []*fsm.Message) ([]int64, error) {
	res, err := p.sendMaybeChunked(ctx, msgs, true)
	if err != nil {
		return nil, err
	}
	return res.SeqNos, resultErr("schedule", res.Err)
}

// Cancel removes scheduled messages by sequence number (S-SCH-1).
func (p *Partition) Cancel(ctx context.Context, seqNos []int64) error {
	res, err := p.propose(ctx, &fsm.CancelScheduled{SeqNos: seqNos})
	if err != nil {
		return err
	}
	return resultErr("cancel", res.Err)
}

// Receive takes up to req.Max messages (S-RCV-1, S-LOCK-1). When none is available and
// wait > 0 it long-polls on the leader: it tries again whenever an entry may have made
// a message available (enqueue, abandon, lock expiry, scheduled activation, ...) until
// wait has passed, then returns no messages and no error. A try proposes a command only
// when the leader's fsm says a message may be receivable (fsm.Receivable, read under the
// machine's lock), so an empty receive or long-poll costs no Raft entry beyond the
// fsm.Touch that records it as receiver activity at most once per
// PeekActivityGranularity (S-IDLE-1). req.Salt is
// chosen here from crypto/rand. In ReceiveAndDelete mode the messages are gone from the
// partition once this returns, even if ctx ended meanwhile (S-RCV-1: at most once).
func (p *Partition) Receive(ctx context.Context, req fsm.Receive, wait time.Duration) ([]*fsm.Message, error) {
	if req.Salt == 0 { // a caller may choose it, to find what this receive locked (LockedWithSalt)
		req.Salt = salt()
	}
	// A peek-lock receive that waits parks while nothing is receivable, so the next send
	// carries its command (parked.go).
	var w *parked
	if wait > 0 && req.Mode == fsm.PeekLock && req.SessionID == "" {
		w = &parked{req: req, pr: make(chan *proposal, 1)}
	}
	var msgs []*fsm.Message
	first := true
	err := p.waitLoop(ctx, wait, func() (bool, error) {
		if w != nil {
			if pr := p.unpark(w); pr != nil { // our receive went into an entry with a send
				var err error
				if msgs, err = p.receiveResult(ctx, req, pr); err != nil || len(msgs) > 0 {
					return true, err
				}
			}
		}
		var last int64
		known := false
		if p.nothingFor(func(f *fsm.FSM) bool {
			if first {
				last, known = f.LastReceive(req.Target)
			}
			return f.Receivable(req)
		}) {
			// A receive that finds nothing proposes nothing; it still counts as
			// receiver activity (S-IDLE-1).
			if first && known && p.clock.Now().UnixMilli()-last >= PeekActivityGranularity.Milliseconds() {
				_, _ = p.propose(ctx, &fsm.Touch{Target: req.Target})
			}
			first = false
			if w != nil {
				p.park(w)
			}
			return false, nil
		}
		first = false
		r := req // each proposal gets its own command value
		pr, err := p.submit(ctx, &r)
		if err != nil {
			return true, err
		}
		msgs, err = p.receiveResult(ctx, req, pr)
		return err != nil || len(msgs) > 0, err
	})
	if w != nil && len(msgs) == 0 {
		if pr := p.unpark(w); pr != nil {
			// The proposer took our receive after the last round: what it locks is ours
			// (after a cancelled ctx, receiveResult gives it back).
			msgs, err = p.receiveResult(ctx, req, pr)
		}
	}
	if err == nil {
		err = loadBodies(msgs)
	}
	return msgs, err
}

// receiveResult waits for a submitted peek-lock or receive-and-delete proposal of req
// and returns what it took. When ctx ends while the proposal is in the log (its caller
// gave up, or a forwarding node cancelled it because the connection the answer would
// have gone back on broke), nobody will see those messages: it waits for the entry
// anyway (at most abandonedWait) and releases what it locked, so that a session's
// holder gets them first on its next receive (S-SES-3) and other receivers need not
// wait out the locks. Only if that fails is the outcome unknown; the caller then still
// releases by the receive's salt.
func (p *Partition) receiveResult(ctx context.Context, req fsm.Receive, pr *proposal) ([]*fsm.Message, error) {
	res, err := p.await(ctx, pr)
	if err == nil {
		if res.Err != nil {
			return nil, resultErr("receive", res.Err)
		}
		return res.Messages, nil
	}
	if ctx.Err() == nil || !errors.Is(err, ErrOutcomeUnknown) {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(context.Background(), abandonedWait)
	defer cancel()
	res, werr := p.await(wctx, pr)
	if werr != nil {
		return nil, err
	}
	if res.Err != nil || len(res.Messages) == 0 || req.Mode != fsm.PeekLock {
		// Nothing locked; a receive-and-delete took its messages for good (the
		// caller chose that mode: at most once).
		return nil, ctxErr(ctx, false)
	}
	toks := make([]fsm.LockToken, len(res.Messages))
	for i, m := range res.Messages {
		toks[i] = m.LockToken
	}
	rel, rerr := p.propose(wctx, &fsm.Settle{Target: req.Target, Tokens: toks, Disposition: fsm.Release,
		SessionID: req.SessionID, Owner: req.Owner})
	if rerr != nil || rel.Err != nil {
		return nil, err
	}
	return nil, ctxErr(ctx, false)
}

// abandonedWait bounds how long a receive whose caller went away waits for its own
// entry, to give back what it locked.
const abandonedWait = 10 * time.Second

// ReceiveDeferred locks (or removes) deferred messages by sequence number (S-LOCK-7).
func (p *Partition) ReceiveDeferred(ctx context.Context, req fsm.ReceiveDeferred) ([]*fsm.Message, error) {
	req.Salt = salt()
	res, err := p.propose(ctx, &req)
	if err != nil {
		return nil, err
	}
	if err := loadBodies(res.Messages); err != nil {
		return nil, err
	}
	return res.Messages, resultErr("receive deferred", res.Err)
}

// Settle settles locked messages (S-LOCK-2..7). With several tokens, the per-token
// outcomes are in the returned slice (nil entries succeeded); the error is the command's.
func (p *Partition) Settle(ctx context.Context, req fsm.Settle) ([]error, error) {
	res, err := p.propose(ctx, &req)
	if err != nil {
		return nil, err
	}
	errs := res.TokenErrs
	for i, e := range errs {
		errs[i] = resultErr("settle", e)
	}
	return errs, resultErr("settle", res.Err)
}

// Txn applies one committed transaction's sends and settlements in one Raft entry,
// all-or-nothing (fsm.Txn): on error nothing changed. It returns the sequence numbers of
// the stored messages.
func (p *Partition) Txn(ctx context.Context, msgs []*fsm.Message, settles []fsm.Settle) ([]int64, error) {
	if len(msgs) > 0 {
		if err := p.cfg.Bodies.admit(); err != nil {
			return nil, err
		}
	}
	c := &fsm.Txn{}
	if len(msgs) > 0 {
		c.Cmds = append(c.Cmds, &fsm.Enqueue{Messages: msgs})
	}
	for i := range settles {
		c.Cmds = append(c.Cmds, &settles[i])
	}
	res, err := p.propose(ctx, c)
	if err != nil {
		return nil, err
	}
	return res.SeqNos, resultErr("transaction", res.Err)
}

// Release unlocks messages whose delivery the client released, without counting a
// delivery (fsm.Release).
func (p *Partition) Release(ctx context.Context, t fsm.Target, tokens []fsm.LockToken, sessionID, owner string) ([]error, error) {
	return p.Settle(ctx, fsm.Settle{Target: t, Tokens: tokens, Disposition: fsm.Release, SessionID: sessionID, Owner: owner})
}

// RenewLock extends locks to now + LockDuration (S-LOCK-8) and returns the new
// LockedUntil per token.
func (p *Partition) RenewLock(ctx context.Context, t fsm.Target, tokens []fsm.LockToken) ([]int64, error) {
	res, err := p.propose(ctx, &fsm.RenewLock{Target: t, Tokens: tokens})
	if err != nil {
		return nil, err
	}
	if res.Err == nil {
		for _, e := range res.TokenErrs {
			if e != nil {
				return res.LockedUntil, resultErr("renew lock", e)
			}
		}
	}
	return res.LockedUntil, resultErr("renew lock", res.Err)
}

// AcceptSession locks a session for req.Owner (S-SES-2): the named one, or with an empty
// SessionID the next available one, waiting up to wait for one to become available (then
// fsm.ErrNoSessionAvailable). It returns the session's id and lock expiry. Like Receive,
// a next-available try proposes only when the leader's fsm says a session may be free
// (fsm.SessionAvailable).
func (p *Partition) AcceptSession(ctx context.Context, req fsm.AcceptSession, wait time.Duration) (string, int64, error) {
	if req.SessionID != "" {
		wait = 0
	}
	var res fsm.Result
	err := p.waitLoop(ctx, wait, func() (bool, error) {
		if req.SessionID == "" && p.nothingFor(func(f *fsm.FSM) bool { return f.SessionAvailable(req.Target) }) {
			res = fsm.Result{Err: fsm.ErrNoSessionAvailable}
			return false, nil
		}
		r := req
		var err error
		res, err = p.propose(ctx, &r)
		if err != nil {
			return true, err
		}
		if errors.Is(res.Err, fsm.ErrNoSessionAvailable) {
			return false, nil
		}
		return true, resultErr("accept session", res.Err)
	})
	if err == nil && res.Err != nil {
		err = resultErr("accept session", res.Err) // waited in vain
	}
	if err != nil {
		return "", 0, err
	}
	return res.SessionID, first(res.LockedUntil), nil
}

// ReleaseSession releases a session lock (S-SES-4, S-SES-6).
func (p *Partition) ReleaseSession(ctx context.Context, t fsm.Target, sessionID, owner string) error {
	res, err := p.propose(ctx, &fsm.ReleaseSession{Target: t, SessionID: sessionID, Owner: owner})
	if err != nil {
		return err
	}
	return resultErr("release session", res.Err)
}

// RenewSession renews a session lock (S-SES-4) and returns its new expiry.
func (p *Partition) RenewSession(ctx context.Context, t fsm.Target, sessionID, owner string) (int64, error) {
	res, err := p.propose(ctx, &fsm.RenewSession{Target: t, SessionID: sessionID, Owner: owner})
	if err != nil {
		return 0, err
	}
	return first(res.LockedUntil), resultErr("renew session", res.Err)
}

// SetSessionState sets, or with empty state clears, a session's state (S-SES-5).
func (p *Partition) SetSessionState(ctx context.Context, req fsm.SetSessionState) error {
	res, err := p.propose(ctx, &req)
	if err != nil {
		return err
	}
	return resultErr("set session state", res.Err)
}

// UpdateEntity replaces the entity configuration; every message lock is released
// (S-ENT-3). cfg.GroupID must stay the group's id.
func (p *Partition) UpdateEntity(ctx context.Context, cfg fsm.Config) error {
	if cfg.GroupID != p.cfg.FSM.GroupID {
		return fmt.Errorf("partition: UpdateEntity changes GroupID %d to %d", p.cfg.FSM.GroupID, cfg.GroupID)
	}
	res, err := p.propose(ctx, &fsm.UpdateEntity{Config: cfg})
	if err != nil {
		return err
	}
	return resultErr("update entity", res.Err)
}

// Purge removes every message of a target (operator action) and returns how many.
func (p *Partition) Purge(ctx context.Context, t fsm.Target) (int, error) {
	res, err := p.propose(ctx, &fsm.Purge{Target: t})
	if err != nil {
		return 0, err
	}
	return res.Count, resultErr("purge", res.Err)
}

// DeleteMessages removes up to req.Max messages of a target in sequence order (S-DEL-1..4;
// com.microsoft:batch-delete-messages) and returns how many. It is one entry, unless the
// fsm's bounded scan stops short of req.Max (a store with a long run of locked or other
// sessions' messages): then it proposes the rest from where the scan stopped.
func (p *Partition) DeleteMessages(ctx context.Context, req fsm.DeleteMessages) (int, error) {
	total := 0
	for {
		res, err := p.propose(ctx, &req)
		if err != nil {
			return total, err
		}
		if err := resultErr("delete messages", res.Err); err != nil {
			return total, err
		}
		total += res.Count
		req.Max -= int32(res.Count)
		if res.Next == 0 || req.Max <= 0 {
			return total, nil
		}
		req.From = res.Next
	}
}

// Reads. They are served by the leader once it has applied every entry of earlier terms
// (a Barrier after election), without a quorum round (no VerifyLeader): a leader that has
// just been deposed may answer from state up to LeaderLeaseTimeout old.

// Peek returns up to max messages from sequence number fromSeq on, without locking them
// (S-LOCK-11).
//
// A peek counts as receiver activity for auto-delete on idle (S-IDLE-1): when the target's
// recorded activity is older than PeekActivityGranularity, the leader proposes an
// fsm.Touch. A peek succeeds even when that proposal fails.
func (p *Partition) Peek(ctx context.Context, t fsm.Target, fromSeq int64, max int) ([]*fsm.Message, error) {
	var out []*fsm.Message
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.Peek(t, fromSeq, max) })
	if err == nil {
		err = loadBodies(out)
	}
	if err == nil {
		p.touchIfStale(ctx, t)
	}
	return out, err
}

// touchIfStale records receiver activity on t (fsm.Touch) when what the fsm holds is
// older than PeekActivityGranularity. Failures are ignored: the read or receive that
// asked goes on.
func (p *Partition) touchIfStale(ctx context.Context, t fsm.Target) {
	var last int64
	known := false
	if err := p.leaderRead(ctx, func(f *fsm.FSM) { last, known = f.LastReceive(t) }); err != nil || !known {
		return
	}
	if p.clock.Now().UnixMilli()-last >= PeekActivityGranularity.Milliseconds() {
		_, _ = p.propose(ctx, &fsm.Touch{Target: t})
	}
}

// PeekActivityGranularity bounds how often peeks and receive attempts that find nothing
// write their activity (one fsm.Touch per target and interval at most): the recorded
// activity of an entity that is only peeked or polled lags by up to this much, which the
// idle check allows for.
const PeekActivityGranularity = 30 * time.Second

// SessionState returns a session's state, nil when it has none (S-SES-5).
func (p *Partition) SessionState(ctx context.Context, t fsm.Target, sessionID string) ([]byte, error) {
	var out []byte
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.SessionState(t, sessionID) })
	return out, err
}

// HeldSessionState returns a session's state for the holder of its lock
// (fsm.ErrSessionLockLost for anyone else).
func (p *Partition) HeldSessionState(ctx context.Context, t fsm.Target, sessionID, owner string) ([]byte, error) {
	var out []byte
	var ferr error
	if err := p.leaderRead(ctx, func(f *fsm.FSM) { out, ferr = f.HeldSessionState(t, sessionID, owner) }); err != nil {
		return nil, err
	}
	return out, ferr
}

// ListSessions lists the sessions of a target that have messages or state.
func (p *Partition) ListSessions(ctx context.Context, t fsm.Target) ([]string, error) {
	var out []string
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.ListSessions(t) })
	return out, err
}

// SessionsUpdatedSince lists the sessions of a target whose state was set at fsm time
// since (Unix ms) or later.
func (p *Partition) SessionsUpdatedSince(ctx context.Context, t fsm.Target, since int64) ([]string, error) {
	var out []string
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.SessionsUpdatedSince(t, since) })
	return out, err
}

// Stats returns the fsm's counters.
func (p *Partition) Stats(ctx context.Context) (fsm.Stats, error) {
	var out fsm.Stats
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.Stats() })
	return out, err
}

// MetricStats is Stats for a metrics scrape: a quiet leader answers from its applied
// state without waking the group.
func (p *Partition) MetricStats() (fsm.Stats, error) {
	var out fsm.Stats
	err := p.leaderReadQuiet(context.Background(), func(f *fsm.FSM) { out = f.Stats() }, false)
	return out, err
}

// Available reports whether a Receive of req on this leader may now return a message
// (fsm.Receivable, read under the machine's lock): false means that a proposal would
// find nothing, so a caller need not make one. It is conservative: true also when the
// receive would fail, so the proposal reports the error; and a deadline (lock expiry,
// scheduled activation) counts once the leader has applied it (its Tick wakes Changed).
// Leader only, like the other reads: *NotLeaderError on a follower or a leader that has
// not caught up since its election.
//
// A waiter on another node (a remote long-poll) must take the wake-up channel first,
// then ask, then wait, so that no change between the question and the wait is missed:
//
//	for {
//		ch := p.Changed() // first
//		if ok, err := p.Available(req); err != nil || ok {
//			break // propose the receive (through the leader), or handle err
//		}
//		select { case <-ch: case <-timeout: ... }
//	}
//
// With a next-available session receive (req.SessionID == "" on a session entity) the
// receive itself fails; ask SessionAvailable instead.
func (p *Partition) Available(req fsm.Receive) (bool, error) {
	ok := true
	err := p.leaderRead(context.Background(), func(f *fsm.FSM) { ok = f.Receivable(req) })
	return ok, err
}

// SessionAvailable is Available for an AcceptSession with an empty SessionID ("next
// available", S-SES-2) on t: whether some session nobody holds has an available message
// (fsm.SessionAvailable). Same rules and waiting pattern as Available.
func (p *Partition) SessionAvailable(t fsm.Target) (bool, error) {
	ok := true
	err := p.leaderRead(context.Background(), func(f *fsm.FSM) { ok = f.SessionAvailable(t) })
	return ok, err
}

// nothingFor reports whether this replica leads, has caught up, and its fsm says (check
// false) that a proposal would find nothing. Anywhere else the caller proposes, which
// answers ErrNotLeader on a follower.
func (p *Partition) nothingFor(check func(*fsm.FSM) bool) bool {
	if !p.IsLeader() {
		return false
	}
	ok := true
	p.m.read(func(f *fsm.FSM) { ok = check(f) })
	return !ok
}

func (p *Partition) leaderRead(ctx context.Context, fn func(*fsm.FSM)) error {
	return p.leaderReadQuiet(ctx, fn, true)
}

// leaderReadQuiet is leaderRead; with verify false, a quiet leader answers from its
// applied state without waking for a quorum round, for background readers whose stale
// answer costs nothing (metrics; transaction recovery, which acts only through
// proposals), so that they do not keep idle groups awake.
func (p *Partition) leaderReadQuiet(ctx context.Context, fn func(*fsm.FSM), verify bool) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, false)
	}
	select {
	case <-p.closing:
		return ErrClosed
	default:
	}
	if !p.ready.Load() || p.raft.State() != raft.Leader {
		return p.notLeader(false)
	}
	if verify && p.raft.Quiet() {
		// A quiet leader holds no lease: it has not heard from its followers since it
		// went quiet, and may have been cut off and replaced meanwhile. It wakes and
		// asks a quorum first (raft patch 4).
		if err := p.raft.VerifyLeader().Error(); err != nil {
			return p.notLeader(false)
		}
	}
	p.m.read(fn)
	return nil
}

// Quiet reports whether the group is quiescent here (raft patch 4: Config.QuiesceAfter).
func (p *Partition) Quiet() bool { return p.raft.Quiet() }

// Wake ends a quiet period of the group here: on a follower whose leader's node is gone
// or unreachable, its election timer runs again from its last contact with the leader,
// so that it campaigns unless the leader speaks. It does nothing when not quiet.
func (p *Partition) Wake() { p.raft.Wake() }

// waitLoop runs try until it reports done, an error, or wait has passed; between tries
// it sleeps until an applied entry may have changed the answer. It takes the wake-up
// channel before each try so no wake-up is lost.
func (p *Partition) waitLoop(ctx context.Context, wait time.Duration, try func() (done bool, err error)) error {
	var expired chan struct{}
	if wait > 0 {
		expired = make(chan struct{})
		stop := p.clock.AfterFunc(wait, func() { close(expired) })
		defer stop()
	}
	for {
		woken := p.avail.wait()
		done, err := try()
		if done || err != nil || expired == nil {
			return err
		}
		select {
		case <-woken:
		case <-expired:
			return nil
		case <-ctx.Done():
			return ctxErr(ctx, false)
		case <-p.closing:
			return ErrClosed
		}
	}
}

// Local state, on any replica.

// Changed returns a channel closed after the next applied entry that may make messages
// or sessions available (an enqueue, abandon, lock expiry, scheduled activation, a
// leadership change, ...). Take it before trying a receive (or asking Available), so
// that no change between the try and the wait is missed; a receiver spanning several
// partitions waits on all of theirs instead of polling.
func (p *Partition) Changed() <-chan struct{} { return p.avail.wait() }

// IsLeader reports whether this replica leads the group and has caught up with it.
func (p *Partition) IsLeader() bool {
	return p.ready.Load() && p.raft.State() == raft.Leader
}

// Leader returns the leader's ServerID and address as far as this replica knows.
func (p *Partition) Leader() (id, addr string) {
	a, i := p.raft.LeaderWithID()
	return string(i), string(a)
}

// AppliedIndex is the last raft index handed to this replica's fsm.
func (p *Partition) AppliedIndex() uint64 { return p.raft.AppliedIndex() }

// Digest is the SHA-256 of this replica's fsm snapshot (for convergence checks); all
// zeros when a spilled body could not be read back, which no real state digests to.
func (p *Partition) Digest() [32]byte {
	var d [32]byte
	p.m.read(func(f *fsm.FSM) { d, _ = f.DigestErr() })
	return d
}

// Membership, on the leader (cluster/placement drives these).

// AddVoter adds or updates a voting replica.
func (p *Partition) AddVoter(ctx context.Context, id, addr string) error {
	return p.raftErr(p.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeoutOf(ctx)).Error())
}

// RemoveServer removes a replica from the group.
func (p *Partition) RemoveServer(ctx context.Context, id string) error {
	return p.raftErr(p.raft.RemoveServer(raft.ServerID(id), 0, timeoutOf(ctx)).Error())
}

// TransferLeadership hands leadership to another voter (graceful shutdown, balancing).
func (p *Partition) TransferLeadership() error {
	return p.raftErr(p.raft.LeadershipTransfer().Error())
}

// Servers returns the group's current configuration.
func (p *Partition) Servers() ([]raft.Server, error) {
	f := p.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, p.raftErr(err)
	}
	return f.Configuration().Servers, nil
}

func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

func salt() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return binary.BigEndian.Uint32(b[:])
}

func first(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// Two-phase commit across partition groups (fsm/txn2pc.go; the cluster layer drives it).

// TxnPrepare holds this partition's part of a transaction (fsm.TxnPrepare).
func (p *Partition) TxnPrepare(ctx context.Context, c *fsm.TxnPrepare) error {
	for _, cmd := range c.Cmds {
		if _, settle := cmd.(*fsm.Settle); !settle {
			if err := p.cfg.Bodies.admit(); err != nil {
				return err
			}
			break
		}
	}
	res, err := p.propose(ctx, c)
	if err != nil {
		return err
	}
	return resultErr("transaction prepare", res.Err)
}

// TxnDecide records a decision in the coordinator's group (fsm.TxnDecide) and returns
// the decision in force, also when err wraps fsm.ErrTxnDecided or fsm.ErrTxnTimeout.
func (p *Partition) TxnDecide(ctx context.Context, c *fsm.TxnDecide) (committed bool, err error) {
	res, err := p.propose(ctx, c)
	if err != nil {
		return false, err
	}
	return res.Committed, resultErr("transaction decide", res.Err)
}

// TxnComplete applies (commit) or drops (abort) a prepared transaction's held effects.
func (p *Partition) TxnComplete(ctx context.Context, id string, commit bool) error {
	var c fsm.Command = &fsm.TxnAbort{ID: id}
	if commit {
		c = &fsm.TxnCommit{ID: id}
	}
	res, err := p.propose(ctx, c)
	if err != nil {
		return err
	}
	return resultErr("transaction complete", res.Err)
}

// TxnForget drops a coordinator's decision record.
func (p *Partition) TxnForget(ctx context.Context, id string) error {
	_, err := p.propose(ctx, &fsm.TxnForget{ID: id})
	return err
}

// TxnState returns the transactions prepared here and the decisions kept here (leader
// read). A quiet leader answers without waking: the recovery that reads it acts only
// through proposals, which wake the group and fail on a deposed leader, and it runs
// every few seconds, which would keep every idle group awake.
func (p *Partition) TxnState(ctx context.Context) ([]fsm.PreparedTxn, []fsm.TxnDecision, error) {
	if p.m.txns.Load() == 0 {
		// Nothing held (as of the last apply, which is all a leader's read would see
		// too): no read, so that the recovery pass over every group led here stays cheap.
		if !p.IsLeader() {
			return nil, nil, p.notLeader(false)
		}
		return nil, nil, nil
	}
	var prep []fsm.PreparedTxn
	var dec []fsm.TxnDecision
	err := p.leaderReadQuiet(ctx, func(f *fsm.FSM) { prep, dec = f.PreparedTxns(), f.TxnDecisions() }, false)
	return prep, dec, err
}
