package cluster

import (
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
)

// Version 1 of the node-to-node wire: net/rpc with gob on route 0 of the cluster
// port's RPC stream type, as releases before the versioned wire (cluster/wire) spoke
// it. gob matches struct fields by name, so the types below are frozen: their Go field
// names are the format (testdata/wire holds it; wire_golden_test.go checks it). A node
// serves version 1 to peers that dial route 0 and speaks it to peers that do not
// negotiate a version (rpc.go); everything else is version 2. The conversions below
// are the only place that knows both.

// op is wire.Op as version 1 names its type.
type op uint8

// CallReq is one operation on one partition group (version 1).
type CallReq struct {
	Group   uint32
	Op      op
	Timeout time.Duration // what is left of the caller's deadline; 0: none
	ID      uint64        // names a long-poll its caller may cancel (Cancel); 0 for other calls

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

// CallResp is its outcome (version 1).
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
	// TxnCommitted is the decision in force after a TxnDecide (also with an error).
	TxnCommitted bool
}

// MultiReq is a batch of independent calls (version 1).
type MultiReq struct {
	Calls []CallReq
}

// MultiResp holds their outcomes, in order (version 1).
type MultiResp struct {
	Resps []CallResp
}

// WaitReq asks a peer to wait until a partition it leads may have a message for a
// receive (version 1 of wire.Wait).
type WaitReq struct {
	Group   uint32
	Receive fsm.Receive
	Accept  bool // waiting to accept the next available session of Receive.Target
	Timeout time.Duration
}

// MetaApplyReq forwards a metadata command to the metadata leader (version 1).
type MetaApplyReq struct {
	Entry   []byte // meta.EncodeEntry of the command (Now 0: the leader stamps it)
	Timeout time.Duration
}

// MetaApplyResp is its outcome and the index at which it committed (version 1).
type MetaApplyResp struct {
	E     *WireErr
	Index uint64
}

// TransferReq asks for a leadership transfer, a drain or a node's removal (version 1).
type TransferReq struct {
	Group   uint32
	To      string
	Timeout time.Duration
}

// v1Call is c as version 1 carries it. An operation version 1 lacks is an error: the
// peer's release cannot run it.
func v1Call(c *wire.Call) (*CallReq, error) {
	r := &CallReq{Group: c.Group, Op: op(c.Req.Op()), Timeout: c.Timeout, ID: c.ID}
	switch q := c.Req.(type) {
	case *wire.Enqueue:
		r.Msgs = q.Msgs
	case *wire.Schedule:
		r.Msgs = q.Msgs
	case *wire.Cancel:
		r.Seqs = q.Seqs
	case *wire.Receive:
		r.Receive, r.Wait = q.Req, q.Wait
	case *wire.ReceiveDeferred:
		r.Deferred = q.Req
	case *wire.Settle:
		r.Settle = q.Req
	case *wire.RenewLock:
		r.Target, r.Tokens = q.Target, q.Tokens
	case *wire.AcceptSession:
		r.Accept, r.Wait = q.Req, q.Wait
	case *wire.ReleaseSession:
		r.Target, r.Session, r.Owner = q.Target, q.Session, q.Owner
	case *wire.RenewSession:
		r.Target, r.Session, r.Owner = q.Target, q.Session, q.Owner
	case *wire.SetState:
		r.SetState = q.Req
	case *wire.GetState:
		r.Target, r.Session, r.Owner = q.Target, q.Session, q.Owner
	case *wire.ListSessions:
		r.Target = q.Target
	case *wire.SessionsUpdatedSince:
		r.Target, r.From = q.Target, q.From
	case *wire.Peek:
		r.Target, r.From, r.Max = q.Target, q.From, q.Max
	case *wire.Stats:
	case *wire.Purge:
		r.Target = q.Target
	case *wire.SyncConfig:
		r.MetaIndex = q.MetaIndex
	case *wire.LockedWithSalt:
		r.Target, r.Receive.Salt = q.Target, q.Salt
	case *wire.Txn:
		r.Msgs, r.TxnSettles = q.Msgs, q.Settles
	case *wire.TxnPrepare:
		r.TxnID, r.TxnCoord, r.TxnDeadline, r.Msgs, r.TxnSettles = q.ID, q.Coordinator, q.Deadline, q.Msgs, q.Settles
	case *wire.TxnDecide:
		r.TxnID, r.TxnCommit, r.TxnDeadline, r.TxnParts = q.ID, q.Commit, q.Deadline, q.Participants
	case *wire.TxnComplete:
		r.TxnID, r.TxnCommit = q.ID, q.Commit
	case *wire.TxnForget:
		r.TxnID = q.ID
	default:
		return nil, fmt.Errorf("%w: operation %v is unknown to a peer speaking wire version 1", fsm.ErrBadCommand, c.Req.Op())
	}
	return r, nil
}

// fromV1Call is the request a version-1 caller sent.
func fromV1Call(r *CallReq) (*wire.Call, error) {
	c := &wire.Call{Group: r.Group, Timeout: r.Timeout, ID: r.ID}
	switch wire.Op(r.Op) {
	case wire.OpEnqueue:
		c.Req = &wire.Enqueue{Msgs: r.Msgs}
	case wire.OpSchedule:
		c.Req = &wire.Schedule{Msgs: r.Msgs}
	case wire.OpCancel:
		c.Req = &wire.Cancel{Seqs: r.Seqs}
	case wire.OpReceive:
		c.Req = &wire.Receive{Req: r.Receive, Wait: r.Wait}
	case wire.OpReceiveDeferred:
		c.Req = &wire.ReceiveDeferred{Req: r.Deferred}
	case wire.OpSettle:
		c.Req = &wire.Settle{Req: r.Settle}
	case wire.OpRenewLock:
		c.Req = &wire.RenewLock{Target: r.Target, Tokens: r.Tokens}
	case wire.OpAcceptSession:
		c.Req = &wire.AcceptSession{Req: r.Accept, Wait: r.Wait}
	case wire.OpReleaseSession:
		c.Req = &wire.ReleaseSession{SessionRef: wire.SessionRef{Target: r.Target, Session: r.Session, Owner: r.Owner}}
	case wire.OpRenewSession:
		c.Req = &wire.RenewSession{SessionRef: wire.SessionRef{Target: r.Target, Session: r.Session, Owner: r.Owner}}
	case wire.OpSetState:
		c.Req = &wire.SetState{Req: r.SetState}
	case wire.OpGetState:
		c.Req = &wire.GetState{SessionRef: wire.SessionRef{Target: r.Target, Session: r.Session, Owner: r.Owner}}
	case wire.OpListSessions:
		c.Req = &wire.ListSessions{Target: r.Target}
	case wire.OpSessionsUpdatedSince:
		c.Req = &wire.SessionsUpdatedSince{Target: r.Target, From: r.From}
	case wire.OpPeek:
		c.Req = &wire.Peek{Target: r.Target, From: r.From, Max: r.Max}
	case wire.OpStats:
		c.Req = &wire.Stats{}
	case wire.OpPurge:
		c.Req = &wire.Purge{Target: r.Target}
	case wire.OpSyncConfig:
		c.Req = &wire.SyncConfig{MetaIndex: r.MetaIndex}
	case wire.OpLockedWithSalt:
		c.Req = &wire.LockedWithSalt{Target: r.Target, Salt: r.Receive.Salt}
	case wire.OpTxn:
		c.Req = &wire.Txn{Msgs: r.Msgs, Settles: r.TxnSettles}
	case wire.OpTxnPrepare:
		c.Req = &wire.TxnPrepare{ID: r.TxnID, Coordinator: r.TxnCoord, Deadline: r.TxnDeadline, Msgs: r.Msgs, Settles: r.TxnSettles}
	case wire.OpTxnDecide:
		c.Req = &wire.TxnDecide{ID: r.TxnID, Commit: r.TxnCommit, Deadline: r.TxnDeadline, Participants: r.TxnParts}
	case wire.OpTxnComplete:
		c.Req = &wire.TxnComplete{ID: r.TxnID, Commit: r.TxnCommit}
	case wire.OpTxnForget:
		c.Req = &wire.TxnForget{ID: r.TxnID}
	default:
		return nil, fmt.Errorf("%w: unknown operation %d", fsm.ErrBadCommand, r.Op)
	}
	return c, nil
}

// v1Reply is r as version 1 carries it.
func v1Reply(r *wire.Reply) CallResp {
	out := CallResp{E: toWire(r.Err), Seqs: r.Seqs, Msgs: r.Msgs, Session: r.Session, State: r.State,
		Sessions: r.Sessions, Count: int(r.Count), Tokens: r.Tokens, TxnCommitted: r.Committed, Until: r.Untils}
	if r.Until != 0 || r.Session != "" {
		out.Until = []int64{r.Until}
	}
	if r.Stats != nil {
		out.Stats = *r.Stats
	}
	if r.TokenErrs != nil {
		out.TokenErrs = make([]WireErr, len(r.TokenErrs))
		for i, e := range r.TokenErrs {
			if w := toWire(e); w != nil {
				out.TokenErrs[i] = *w
			}
		}
	}
	return out
}

// fromV1Reply is the reply of a version-1 callee to req.
func fromV1Reply(req wire.Request, r *CallResp) wire.Reply {
	out := wire.Reply{Err: r.E.err(), Result: wire.Result{Seqs: r.Seqs, Msgs: r.Msgs, Session: r.Session,
		State: r.State, Sessions: r.Sessions, Count: int64(r.Count), Tokens: r.Tokens, Committed: r.TxnCommitted}}
	switch req.(type) {
	case *wire.AcceptSession, *wire.RenewSession:
		if len(r.Until) > 0 {
			out.Until = r.Until[0]
		}
	default:
		out.Untils = r.Until
	}
	if _, ok := req.(*wire.Stats); ok {
		s := r.Stats
		out.Stats = &s
	}
	if r.TokenErrs != nil {
		out.TokenErrs = make([]error, len(r.TokenErrs))
		for i := range r.TokenErrs {
			if e := &r.TokenErrs[i]; e.Msg != "" || e.Kinds != 0 {
				out.TokenErrs[i] = e.err()
			}
		}
	}
	return out
}
