package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// The partition seam: every data-plane operation on a partition is a CallReq, executed
// by exec on the node that leads the partition's group. call runs it here when this
// node's replica leads, and otherwise forwards it to the leader over the cluster RPC,
// following leader changes until the caller's deadline.

type op uint8

// Operations. Append only (nodes of different releases talk to each other).
const (
	opEnqueue op = iota + 1
	opSchedule
	opCancel
	opReceive
	opReceiveDeferred
	opSettle
	opRenewLock
	opAcceptSession
	opReleaseSession
	opRenewSession
	opSetState
	opGetState
	opListSessions
	opPeek
	opStats
	opPurge
	opSyncConfig // push the entity configuration as of metadata index MetaIndex, if not applied yet
	opLockedWithSalt
	opSessionsUpdatedSince // sessions whose state was set at From (Unix ms) or later
	opTxn                  // a committed transaction on one partition: Msgs and TxnSettles in one fsm.Txn
	opTxnPrepare           // two-phase commit (txn.go): hold Msgs and TxnSettles under TxnID
	opTxnDecide            // record TxnCommit for TxnID in the coordinator group
	opTxnComplete          // commit (TxnCommit) or abort TxnID's held effects
	opTxnForget            // drop the coordinator's record of TxnID
)

// CallReq is one operation on one partition group.
type CallReq struct {
	Group   uint32
	Op      op
	Timeout time.Duration // what is left of the caller's deadline; 0: none
	// ID names a long-polling call (a receive or accept) so that its caller can cancel
	// it when it gives up (rpcService.Cancel); 0 for other calls.
	ID uint64

	Msgs       []*fsm.Message
	Seqs       []int64
	Target     fsm.Target
	Tokens     []fsm.LockToken
	Receive    fsm.Receive
	Wait       time.Duration
	Deferred   fsm.ReceiveDeferred
	Settle     fsm.Settle
	Accept     fsm.AcceptSession
	Session    string
	Owner      string
	State      []byte
	SetState   fsm.SetSessionState
	From       int64
	Max        int
	MetaIndex  uint64
	TxnSettles []fsm.Settle
	// Two-phase commit (txn.go).
	TxnID       string
	TxnCoord    uint32
	TxnDeadline int64
	TxnCommit   bool
	TxnParts    []uint32
}

// CallResp is its outcome. err is set on the local path; E carries it over the network.
type CallResp struct {
	E         *WireErr
	Seqs      []int64
	Msgs      []*fsm.Message
	TokenErrs []WireErr // zero value: no error (gob cannot carry nil pointers in a slice)
	Until     []int64
	Session   string
	State     []byte
	Sessions  []string
	Stats     fsm.Stats
	Count     int
	Tokens    []fsm.LockToken
	// TxnCommitted is the decision in force after opTxnDecide (also with an error).
	TxnCommitted bool

	err       error
	tokenErrs []error
}

// exec runs req on a local replica (any replica: a follower answers ErrNotLeader).
func exec(ctx context.Context, p *partition.Partition, req *CallReq) *CallResp {
	r := &CallResp{}
	switch req.Op {
	case opEnqueue:
		r.Seqs, r.err = p.Enqueue(ctx, req.Msgs)
	case opSchedule:
		r.Seqs, r.err = p.Schedule(ctx, req.Msgs)
	case opCancel:
		r.err = p.Cancel(ctx, req.Seqs)
	case opReceive:
		r.Msgs, r.err = p.Receive(ctx, req.Receive, req.Wait)
	case opReceiveDeferred:
		r.Msgs, r.err = p.ReceiveDeferred(ctx, req.Deferred)
	case opSettle:
		r.tokenErrs, r.err = p.Settle(ctx, req.Settle)
	case opRenewLock:
		r.Until, r.err = p.RenewLock(ctx, req.Target, req.Tokens)
	case opAcceptSession:
		var until int64
		r.Session, until, r.err = p.AcceptSession(ctx, req.Accept, req.Wait)
		r.Until = []int64{until}
	case opReleaseSession:
		r.err = p.ReleaseSession(ctx, req.Target, req.Session, req.Owner)
	case opRenewSession:
		var until int64
		until, r.err = p.RenewSession(ctx, req.Target, req.Session, req.Owner)
		r.Until = []int64{until}
	case opSetState:
		r.err = p.SetSessionState(ctx, req.SetState)
	case opGetState:
		if req.Owner != "" { // the holder's read (an older node ignores Owner and reads)
			r.State, r.err = p.HeldSessionState(ctx, req.Target, req.Session, req.Owner)
		} else {
			r.State, r.err = p.SessionState(ctx, req.Target, req.Session)
		}
	case opListSessions:
		r.Sessions, r.err = p.ListSessions(ctx, req.Target)
	case opSessionsUpdatedSince:
		r.Sessions, r.err = p.SessionsUpdatedSince(ctx, req.Target, req.From)
	case opPeek:
		r.Msgs, r.err = p.Peek(ctx, req.Target, req.From, req.Max)
	case opStats:
		r.Stats, r.err = p.Stats(ctx)
	case opPurge:
		r.Count, r.err = p.Purge(ctx, req.Target)
	case opLockedWithSalt:
		r.Tokens, r.err = p.LockedWithSalt(ctx, req.Target, req.Receive.Salt)
	case opTxn:
		r.Seqs, r.err = p.Txn(ctx, req.Msgs, req.TxnSettles)
	case opTxnPrepare:
		c := &fsm.TxnPrepare{ID: req.TxnID, Coordinator: req.TxnCoord, Deadline: req.TxnDeadline}
		if len(req.Msgs) > 0 {
			c.Cmds = append(c.Cmds, &fsm.Enqueue{Messages: req.Msgs})
		}
		for i := range req.TxnSettles {
			c.Cmds = append(c.Cmds, &req.TxnSettles[i])
		}
		r.err = p.TxnPrepare(ctx, c)
	case opTxnDecide:
		r.TxnCommitted, r.err = p.TxnDecide(ctx, &fsm.TxnDecide{ID: req.TxnID, Commit: req.TxnCommit,
			Deadline: req.TxnDeadline, Participants: req.TxnParts})
	case opTxnComplete:
		r.err = p.TxnComplete(ctx, req.TxnID, req.TxnCommit)
	case opTxnForget:
		r.err = p.TxnForget(ctx, req.TxnID)
	default:
		r.err = fmt.Errorf("%w: unknown operation %d", fsm.ErrBadCommand, req.Op)
	}
	return r
}

// toWire readies a local outcome for the network.
func (r *CallResp) toWire() {
	r.E = toWire(r.err)
	if r.tokenErrs != nil {
		r.TokenErrs = make([]WireErr, len(r.tokenErrs))
		for i, e := range r.tokenErrs {
			if w := toWire(e); w != nil {
				r.TokenErrs[i] = *w
			}
		}
	}
}

// fromWire turns a reply from the network into a local outcome.
func (r *CallResp) fromWire() {
	r.err = r.E.err()
	if r.TokenErrs != nil {
		r.tokenErrs = make([]error, len(r.TokenErrs))
		for i := range r.TokenErrs {
			if e := &r.TokenErrs[i]; e.Msg != "" || e.Kinds != 0 {
				r.tokenErrs[i] = e.err()
			}
		}
	}
}

// group is one partition of a resolved entity: its Raft group and where it runs.
type group struct {
	id       uint32
	index    int
	replicas []string
	local    *replica // nil when no replica is hosted here
}

// retriable reports whether a failed attempt of o may be tried again on another replica:
// the attempt certainly did not take effect (the node was not the leader and the command
// never entered its log, or the node could not be reached), or o may be repeated
// whatever its first attempt did (repeatable).
func retriable(o op, err error) bool {
	unknown := errors.Is(err, partition.ErrOutcomeUnknown)
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) {
		unknown = unknown || nl.Unknown
	}
	failover := errors.Is(err, partition.ErrNotLeader) || errors.Is(err, ErrUnavailable) || errors.Is(err, partition.ErrClosed)
	return failover && (!unknown || repeatable(o))
}

// repeatable reports whether an operation may be applied again after an attempt whose
// outcome is unknown: reads; settlements, which a second time either apply or, when the
// first applied, get its outcome again (S-LOCK-12, fsm/settled.go); renewals, which
// apply again or find the lock gone; session operations of the holder, which
// set what they set again. Not sends (a repeat stores a second copy: the client decides,
// knowing it may duplicate) nor receives (a repeat locks other messages while the first
// ones wait for their locks to expire).
func repeatable(o op) bool {
	switch o {
	case opGetState, opListSessions, opSessionsUpdatedSince, opPeek, opStats, opLockedWithSalt,
		opSettle, opRenewLock, opAcceptSession, opReleaseSession, opRenewSession, opSetState, opSyncConfig, opCancel,
		// Two-phase commit: each is idempotent for its transaction id (fsm/txn2pc.go).
		opTxnPrepare, opTxnDecide, opTxnComplete, opTxnForget:
		return true
	}
	return false
}

// call runs req on the leader of g: here when the local replica leads, otherwise on the
// node that does, retrying on leader changes and unreachable nodes until ctx ends (at most
// callPatience when ctx has no deadline). abandon, when set, receives the outcome of a
// forwarded call whose caller gave up, so that locks it took can be released.
func (n *Node) call(ctx context.Context, g group, req *CallReq, abandon func(*CallResp)) *CallResp {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callPatience)
		defer cancel()
	}
	req.Group = g.id
	backoff := 5 * time.Millisecond
	var last *CallResp
	tried := 0
	start := time.Now()
	for {
		target := n.leaderOf(g, tried)
		var r *CallResp
		if n.leaderSilent(g, target, start) {
			// Wait for the election instead (silent.go): not a failed guess.
			r = &CallResp{err: fmt.Errorf("%w: %w: partition group %d", ErrUnavailable, errLeaderSilent, g.id)}
			n.hints.Delete(g.id)
		} else if target == n.cfg.NodeID && g.local != nil {
			r = n.execLocal(ctx, g.local, req)
		} else if target == "" {
			r = &CallResp{err: fmt.Errorf("%w: partition group %d has no known leader", ErrUnavailable, g.id)}
		} else {
			r = n.remote(ctx, target, req, abandon)
		}
		if r.err == nil || !retriable(req.Op, r.err) {
			if r.err == nil {
				n.noteLeader(g.id, target)
			}
			return r
		}
		last = r
		if !n.groupExists(g.id) {
			return &CallResp{err: fmt.Errorf("%w: partition group %d no longer exists (its entity was deleted)", fsm.ErrNotFound, g.id)}
		}
		if debugCalls {
			fmt.Printf("DBG call from %s group %d op %d target %s local=%v: %v\n", n.cfg.NodeID, g.id, req.Op, target, g.local != nil, r.err)
		}
		var nl *partition.NotLeaderError
		switch {
		case errors.Is(r.err, errLeaderSilent):
		case errors.As(r.err, &nl) && nl.LeaderID != "" && nl.LeaderID != target:
			n.hints.Store(g.id, nl.LeaderID)
		default:
			n.hints.Delete(g.id)
			tried++
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if last.err != nil {
				last.err = fmt.Errorf("%w: %w", partition.ErrTimeout, last.err)
			}
			return last
		case <-n.closing:
			t.Stop()
			return &CallResp{err: ErrClosed}
		case <-t.C:
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// callPatience bounds how long a call without a deadline follows leader changes.
const callPatience = 30 * time.Second

// noteLeader records that id served group g as its leader. Most calls find the leader
// they were told, and a sync.Map store allocates, so it stores only a change.
func (n *Node) noteLeader(g uint32, id string) {
	if v, ok := n.hints.Load(g); ok && v.(string) == id {
		return
	}
	n.hints.Store(g, id)
}

// leaderOf guesses which node leads g: the local replica when it leads, the leader a
// local follower hears from, then the last node that answered, then the local replica's
// view, then the replicas in turn (tried counts failed guesses).
func (n *Node) leaderOf(g group, tried int) string {
	if g.local != nil && g.local.p.IsLeader() {
		return n.cfg.NodeID
	}
	// A follower that hears from its leader knows better than a hint, which may name a
	// leader that has since been paused or cut off (silent.go).
	if id := n.heardLeader(g); id != "" {
		return id
	}
	if v, ok := n.hints.Load(g.id); ok {
		return v.(string)
	}
	if g.local != nil && tried == 0 {
		if id, _ := g.local.p.Leader(); id != "" {
			return id
		}
	}
	if len(g.replicas) == 0 {
		return ""
	}
	return g.replicas[tried%len(g.replicas)]
}

// remote sends req to node id.
func (n *Node) remote(ctx context.Context, id string, req *CallReq, abandon func(*CallResp)) *CallResp {
	addr := n.addrOf(id)
	if addr == "" {
		return &CallResp{err: fmt.Errorf("%w: node %q has no known address", ErrUnavailable, id)}
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Timeout = time.Until(dl)
	}
	if req.Op == opEnqueue || req.Op == opSchedule {
		return n.batcher(addr).send(ctx, req)
	}
	resp := &CallResp{}
	var onAbandon func()
	if abandon != nil {
		onAbandon = func() { resp.fromWire(); abandon(resp) }
		// A receive the caller gives up is cancelled on the peer too: a long-poll still
		// waiting there then locks nothing that nobody would take (what it locked before
		// the cancel arrives is released by onAbandon).
		req.ID = randomID()
		finished := make(chan struct{})
		defer close(finished)
		go func() {
			select {
			case <-ctx.Done():
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var ok bool
				_ = n.rpc.call(cctx, addr, "Cancel", req.ID, &ok, nil)
			case <-finished:
			}
		}()
	}
	if err := n.rpc.call(ctx, addr, "Call", req, resp, onAbandon); err != nil {
		return &CallResp{err: err}
	}
	resp.fromWire()
	return resp
}

// rpcService is what a node serves to its peers.
type rpcService struct{ n *Node }

// Call executes an operation on a partition replica hosted here.
func (s *rpcService) Call(req *CallReq, resp *CallResp) error {
	ctx, cancel := s.n.rpcContext(req.Timeout)
	defer cancel()
	if req.ID != 0 {
		s.n.inflight.Store(req.ID, cancel)
		defer s.n.inflight.Delete(req.ID)
	}
	s.n.mu.RLock()
	r := s.n.parts[req.Group]
	s.n.mu.RUnlock()
	switch {
	case r != nil:
		*resp = *s.n.execLocal(ctx, r, req)
	case !s.n.groupExists(req.Group):
		*resp = CallResp{err: fmt.Errorf("%w: partition group %d does not exist", fsm.ErrNotFound, req.Group)}
	default:
		*resp = CallResp{err: &partition.NotLeaderError{}}
	}
	resp.toWire()
	return nil
}

// rpcContext is the context of a call served for a peer: its deadline, and the node's
// shutdown.
func (n *Node) rpcContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		timeout = callPatience
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// WaitReq asks a peer to wait until a partition it leads may have a message for recv.
type WaitReq struct {
	Group   uint32
	Receive fsm.Receive
	Accept  bool // waiting to accept the next available session of Receive.Target
	Timeout time.Duration
}

// WaitChange returns when the partition changed (or may have a message for the receive)
// or the timeout passed; a remote receiver spanning several partitions sleeps on it.
func (s *rpcService) WaitChange(req *WaitReq, resp *bool) error {
	s.n.mu.RLock()
	r := s.n.parts[req.Group]
	s.n.mu.RUnlock()
	if r == nil {
		*resp = true
		return nil
	}
	ch := r.p.Changed()
	var ok bool
	var err error
	if req.Accept {
		ok, err = r.p.SessionAvailable(req.Receive.Target)
	} else {
		ok, err = r.p.Available(req.Receive)
	}
	if ok || err != nil { // something to take, or not the leader: the caller tries again
		*resp = true
		return nil
	}
	t := time.NewTimer(min(req.Timeout, remoteWaitCap))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-s.n.closing:
	}
	*resp = true
	return nil
}

// remoteWaitCap bounds one remote wait (the leader may change meanwhile). No wake-up is
// lost: the leader takes the change signal before it checks availability.
const remoteWaitCap = 5 * time.Second

// MetaApplyReq forwards a metadata command to the metadata leader.
type MetaApplyReq struct {
	Entry   []byte // meta.EncodeEntry of the command (Now 0: the leader stamps it)
	Timeout time.Duration
}

// MetaApplyResp is its outcome and the index at which it committed, for read-your-writes.
type MetaApplyResp struct {
	E     *WireErr
	Index uint64
}

// MetaApply applies a metadata command on the leader.
func (s *rpcService) MetaApply(req *MetaApplyReq, resp *MetaApplyResp) error {
	ctx, cancel := s.n.rpcContext(req.Timeout)
	defer cancel()
	e, err := meta.DecodeEntry(req.Entry)
	if err == nil {
		resp.Index, err = s.n.meta.ProposeIndex(ctx, e.Cmd)
	}
	resp.E = toWire(err)
	return nil
}

// GroupInfo is what a node knows of one partition group it hosts.
type GroupInfo struct {
	Group     uint32
	Leader    string
	IsLeader  bool
	LastIndex uint64
	Applied   uint64
	Servers   []ServerInfo
}

type ServerInfo struct {
	ID    string
	Voter bool
}

// GroupStatus reports the groups hosted here (all of them when ids is empty).
func (s *rpcService) GroupStatus(ids []uint32, resp *[]GroupInfo) error {
	*resp = s.n.localGroupStatus(ids)
	return nil
}

// TransferReq asks the leader of a group to hand leadership to another voter.
type TransferReq struct {
	Group   uint32
	To      string
	Timeout time.Duration
}

// Transfer hands leadership of a group led here to another voter.
func (s *rpcService) Transfer(req *TransferReq, resp *WireErr) error {
	if w := toWire(s.n.transferLocal(req.Group, req.To)); w != nil {
		*resp = *w
	}
	return nil
}

var debugCalls = os.Getenv("QB_DEBUG") != ""

// execLocal runs req on a replica hosted here: the partition API, or a configuration
// sync.
func (n *Node) execLocal(ctx context.Context, r *replica, req *CallReq) *CallResp {
	if req.Op != opSyncConfig {
		return exec(ctx, r.p, req)
	}
	return &CallResp{err: n.syncConfig(ctx, r, req.MetaIndex)}
}

// syncConfig makes the group r leads apply the entity configuration of this node's
// metadata as of index (or later): a metadata change that alters an entity is visible
// to the entity's next operation through any node, as it was on a single node (S-ENT-3).
func (n *Node) syncConfig(ctx context.Context, r *replica, index uint64) error {
	if !r.p.IsLeader() {
		return r.p.NotLeader()
	}
	if err := n.meta.WaitIndex(ctx, index); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	want, ok := n.desiredConfig(r.cfg.GroupID)
	if !ok {
		return nil // the entity is gone
	}
	if reflect.DeepEqual(r.p.EntityConfig(), want) {
		return nil
	}
	return r.p.UpdateEntity(ctx, want)
}

// desiredConfig is the configuration group id must run with according to the local
// metadata.
func (n *Node) desiredConfig(id uint32) (fsm.Config, bool) {
	var cfg fsm.Config
	var ok bool
	n.meta.Read(func(s *meta.State) {
		for _, pl := range s.Placements() {
			for i, p := range pl.Partitions {
				if p.GroupID == id {
					c, err := s.PartitionConfig(pl.Entity, i)
					cfg, ok = c, err == nil
					return
				}
			}
		}
	})
	return cfg, ok
}

// groupExists reports whether group id exists or may exist: the local metadata places
// it, or has not allocated it yet (this replica lags behind the change that created
// it). False means it was deleted.
func (n *Node) groupExists(id uint32) bool {
	found := false
	n.meta.Read(func(s *meta.State) {
		if id >= s.NextGroupID() {
			found = true
			return
		}
		for _, pl := range s.Placements() {
			for _, p := range pl.Partitions {
				found = found || p.GroupID == id
			}
		}
	})
	return found
}

// ctxOutcome is the error of a call whose caller gave up after it was handed on.
func ctxOutcome(ctx context.Context) error {
	return fmt.Errorf("%w: %w: %w", partition.ErrTimeout, partition.ErrOutcomeUnknown, ctx.Err())
}

// Cancel cancels a long-polling call whose caller gave up.
func (s *rpcService) Cancel(id uint64, resp *bool) error {
	if c, ok := s.n.inflight.LoadAndDelete(id); ok {
		c.(context.CancelFunc)()
		*resp = true
	}
	return nil
}

func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return binary.BigEndian.Uint64(b[:]) | 1
}
