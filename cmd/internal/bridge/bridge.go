package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// Backend implements amqp.Backend over a cluster node.
//
// Session locks belong to client connections (S-SES-2): the holder the fsm records
// (fsm.AcceptSession.Owner) is amqp.ConnectionID of the calling connection, and every
// session-scoped call (receive, settle, receive-deferred, renew, set state, release)
// presents it. The owner is cluster state, so any node can check it, and a failover
// keeps it; another connection, on this node or any other, is not the holder.
type Backend struct {
	r     *cluster.Router // the data plane
	store *cluster.Store  // the metadata: rules, and catching up with its leader for keys
}

var _ amqp.Backend = (*Backend)(nil)
var _ amqp.SessionUpdateLister = (*Backend)(nil)
var _ amqp.MessageDeleter = (*Backend)(nil)

// New returns the Backend for node n.
func New(n *cluster.Node) *Backend {
	return &Backend{r: n.Router(), store: n.Store()}
}

var _ amqp.EntityAuthenticator = (*Backend)(nil)

// SASKey implements amqp.Authenticator: the namespace's keys.
func (b *Backend) SASKey(ctx context.Context, name string) (amqp.SASKey, error) {
	k, ok := b.r.SASKey(name)
	if !ok && b.syncMeta(ctx) {
		k, ok = b.r.SASKey(name)
	}
	if !ok {
		return amqp.SASKey{}, fmt.Errorf("%w: key %q", amqp.ErrNotFound, name)
	}
	return sasKey(k), nil
}

// EntitySASKey implements amqp.EntityAuthenticator: a queue's or topic's own
// authorization rules, which authorize only that entity.
func (b *Backend) EntitySASKey(ctx context.Context, path, name string) (amqp.SASKey, error) {
	k, ok := b.r.EntitySASKey(path, name)
	if !ok && b.syncMeta(ctx) {
		k, ok = b.r.EntitySASKey(path, name)
	}
	if !ok {
		return amqp.SASKey{}, fmt.Errorf("%w: key %q on %q", amqp.ErrNotFound, name, path)
	}
	return sasKey(k), nil
}

// keySyncWait bounds how long a token naming an unknown key waits for this node's
// metadata to catch up with the leader's before it is refused.
const keySyncWait = 2 * time.Second

// syncMeta brings this node's metadata up to the leader's (cluster.Store.SyncMeta), so
// that a key created through another node a moment ago is found here too (a
// Listen key created through n1 was once refused on n2 50 ms later). It reports whether
// the lookup is worth repeating.
func (b *Backend) syncMeta(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, keySyncWait)
	defer cancel()
	return b.store.SyncMeta(ctx) == nil
}

func sasKey(k meta.SASKey) amqp.SASKey {
	return amqp.SASKey{Name: k.Name, Key: k.PrimaryKey, SecondaryKey: k.SecondaryKey, Rights: k.Rights.SAS()}
}

// Entity implements amqp.Entities.
func (b *Backend) Entity(ctx context.Context, path string) (amqp.EntityInfo, error) {
	info, err := b.r.Lookup(path)
	if err != nil {
		return amqp.EntityInfo{}, mapErr(err)
	}
	out := amqp.EntityInfo{
		Path:            info.Entity,
		RequiresSession: info.RequiresSession,
		MaxMessageSize:  uint64(max(info.MaxMessageSize, 0)),
		LockDuration:    info.LockDuration,
		Disabled:        info.Status == meta.StatusDisabled,
	}
	switch {
	case info.Subscription != "":
		out.Kind = amqp.KindSubscription
		out.Path = info.Entity + "/Subscriptions/" + info.Subscription
	case info.Kind == meta.KindQueue:
		out.Kind = amqp.KindQueue
	default:
		out.Kind = amqp.KindTopic
	}
	return out, nil
}

// address turns an amqp address ("q", "t/Subscriptions/s", with a sub-queue) into the
// cluster's.
func address(a amqp.Address) (cluster.Address, error) {
	if a.Sub == amqp.SubQueueTransferDeadLetter {
		// Auto-forwarding abandons a message its destination refuses and dead-letters it
		// at the source after MaxDeliveryCount tries, so nothing reaches a transfer
		// dead-letter queue; receiving from one is refused rather than served empty.
		return cluster.Address{}, fmt.Errorf("%w: transfer dead-letter queues are not supported yet", amqp.ErrNotAllowed)
	}
	ent, sub := a.Entity, ""
	if i := strings.LastIndex(strings.ToLower(a.Entity), "/subscriptions/"); i >= 0 {
		ent, sub = a.Entity[:i], a.Entity[i+len("/subscriptions/"):]
	}
	return cluster.Address{Entity: ent, Subscription: sub, DeadLetter: a.Sub == amqp.SubQueueDeadLetter}, nil
}

func toMessages(ms []*amqp.Message) []*fsm.Message {
	out := make([]*fsm.Message, len(ms))
	// One allocation for a batch's messages: the send proposes them together, and
	// nothing keeps one once it is committed.
	block := make([]fsm.Message, len(ms))
	for i, m := range ms {
		fm := &block[i]
		fm.Payload = m.Raw
		fm.MessageID = m.MessageID
		fm.CorrelationID = m.CorrelationID
		fm.To = m.To
		fm.ReplyTo = m.ReplyTo
		fm.Subject = m.Subject
		fm.SessionID = m.SessionID
		fm.ReplyToSessionID = m.ReplyToSessionID
		fm.ContentType = m.ContentType
		fm.PartitionKey = m.PartitionKey
		if fm.PartitionKey == "" {
			fm.PartitionKey = m.ViaPartitionKey
		}
		fm.TimeToLive = m.TimeToLive.Milliseconds()
		if !m.ScheduledEnqueueTime.IsZero() {
			fm.ScheduledEnqueueTime = m.ScheduledEnqueueTime.UnixMilli()
		}
		fm.Size = int64(len(m.Raw))
		fm.App = toProps(m.ApplicationProperties)
		out[i] = fm
	}
	return out
}

func unixMs(ms int64) time.Time {
	if ms <= 0 || ms == fsm.NeverMs {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// delivered is a delivery and its message in one allocation: they live as long as
// each other.
type delivered struct {
	d amqp.Delivery
	m amqp.Message
}

func deliveries(ms []*fsm.Message) []*amqp.Delivery {
	out := make([]*amqp.Delivery, len(ms))
	for i, m := range ms {
		dm := &delivered{}
		am := &dm.m
		*am = amqp.Message{
			Raw: m.Payload, MessageID: m.MessageID, SessionID: m.SessionID, PartitionKey: m.PartitionKey,
			CorrelationID: m.CorrelationID, To: m.To, ReplyTo: m.ReplyTo, Subject: m.Subject,
			ReplyToSessionID: m.ReplyToSessionID, ContentType: m.ContentType,
			TimeToLive: time.Duration(m.TimeToLive) * time.Millisecond,
		}
		d := &dm.d
		*d = amqp.Delivery{
			Message:        am,
			LockToken:      amqp.UUID(m.LockToken),
			SequenceNumber: m.SequenceNumber,
			EnqueuedTime:   unixMs(m.EnqueuedTime),
			LockedUntil:    unixMs(m.LockedUntil),
			DeliveryCount:  uint32(max(m.DeliveryCount, 0)),
			ExpiresAt:      unixMs(m.ExpiresAt),
		}
		switch m.State {
		case fsm.StateDeferred:
			d.State = amqp.StateDeferred
		case fsm.StateScheduled:
			d.State = amqp.StateScheduled
		}
		if m.DeadLetter != nil {
			d.DeadLettered = true
			d.DeadLetterReason = m.DeadLetter.Reason
			d.DeadLetterDescription = m.DeadLetter.Description
			d.DeadLetterSource = m.DeadLetter.Source
		}
		if m.Modified {
			// A rule action, abandon, defer or dead-letter changed the copy's properties
			// (S-TOP-1, S-LOCK-3): rebuild its properties and application-properties
			// sections; every other section keeps its bytes.
			am.ApplicationProperties = fromProps(m.App)
			if err := am.Reencode(); err != nil {
				am.Raw = m.Payload // could not rebuild: amqp rewrites application properties only
				d.Properties = am.ApplicationProperties
				d.PropertiesModified = true
			}
		}
		out[i] = d
	}
	return out
}

// Send implements amqp.Sender.
func (b *Backend) Send(ctx context.Context, entity string, msgs []*amqp.Message) error {
	return mapErr(b.r.Send(ctx, entity, toMessages(msgs)))
}

// Schedule implements amqp.Scheduler.
func (b *Backend) Schedule(ctx context.Context, entity string, msgs []*amqp.Message) ([]int64, error) {
	seqs, err := b.r.Schedule(ctx, entity, toMessages(msgs))
	return seqs, mapErr(err)
}

// CancelScheduled implements amqp.Scheduler.
func (b *Backend) CancelScheduled(ctx context.Context, entity string, seqs []int64) error {
	return mapErr(b.r.Cancel(ctx, entity, seqs))
}

func mode(m amqp.ReceiveMode) fsm.ReceiveMode {
	if m == amqp.ReceiveAndDelete {
		return fsm.ReceiveAndDelete
	}
	return fsm.PeekLock
}

// Receive implements amqp.Receiver.
func (b *Backend) Receive(ctx context.Context, req amqp.ReceiveRequest) ([]*amqp.Delivery, error) {
	a, err := address(req.Address)
	if err != nil {
		return nil, err
	}
	msgs, err := b.r.Receive(ctx, a, req.SessionID, owner(ctx), mode(req.Mode), req.Max, req.Wait)
	return deliveries(msgs), mapErr(err)
}

var dispositions = map[amqp.Disposition]fsm.Disposition{
	amqp.Complete: fsm.Complete, amqp.Abandon: fsm.Abandon, amqp.DeadLetter: fsm.DeadLetter,
	amqp.Defer: fsm.Defer, amqp.Release: fsm.Release,
}

// Settle implements amqp.Receiver. Consecutive settlements that differ only in their
// lock token (the common case: a receiver completing what it received) are settled
// together, so each partition sees one proposal for them.
func (b *Backend) Settle(ctx context.Context, ss []amqp.Settlement) []error {
	errs := make([]error, len(ss))
	for start := 0; start < len(ss); {
		end := start + 1
		for end < len(ss) && sameOutcome(ss[start], ss[end]) {
			end++
		}
		b.settleRun(ctx, ss[start:end], errs[start:end])
		start = end
	}
	return errs
}

func sameOutcome(a, b amqp.Settlement) bool {
	return a.Address == b.Address && a.SessionID == b.SessionID && a.Disposition == b.Disposition &&
		len(a.PropertiesToModify) == 0 && len(b.PropertiesToModify) == 0 &&
		a.DeadLetterReason == b.DeadLetterReason && a.DeadLetterDescription == b.DeadLetterDescription
}

func (b *Backend) settleRun(ctx context.Context, run []amqp.Settlement, errs []error) {
	s := run[0]
	fail := func(err error) {
		for i := range errs {
			errs[i] = err
		}
	}
	a, err := address(s.Address)
	if err != nil {
		fail(err)
		return
	}
	d, ok := dispositions[s.Disposition]
	if !ok {
		fail(fmt.Errorf("%w: disposition %d", amqp.ErrBadRequest, s.Disposition))
		return
	}
	toks := make([]fsm.LockToken, len(run))
	for i, r := range run {
		toks[i] = fsm.LockToken(r.LockToken)
	}
	for i, err := range b.r.Settle(ctx, cluster.Settlement{
		Address: a, Tokens: toks, Disposition: d, Properties: toProps(s.PropertiesToModify),
		Reason: s.DeadLetterReason, Description: s.DeadLetterDescription,
		SessionID: s.SessionID, Owner: owner(ctx),
	}) {
		errs[i] = mapErr(err)
	}
}

// RenewLock implements amqp.Receiver.
func (b *Backend) RenewLock(ctx context.Context, addr amqp.Address, sessionID string, tokens []amqp.UUID) ([]time.Time, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	toks := make([]fsm.LockToken, len(tokens))
	for i, t := range tokens {
		toks[i] = fsm.LockToken(t)
	}
	until, err := b.r.RenewLock(ctx, a, toks)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]time.Time, len(until))
	for i, u := range until {
		out[i] = unixMs(u)
	}
	return out, nil
}

// Peek implements amqp.Receiver.
func (b *Backend) Peek(ctx context.Context, addr amqp.Address, sessionID string, from int64, n int) ([]*amqp.Delivery, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	msgs, err := b.r.Peek(ctx, a, sessionID, from, n)
	return deliveries(msgs), mapErr(err)
}

// DeleteMessages implements amqp.MessageDeleter (com.microsoft:batch-delete-messages).
func (b *Backend) DeleteMessages(ctx context.Context, addr amqp.Address, sessionID string, n int, before time.Time) (int, error) {
	a, err := address(addr)
	if err != nil {
		return 0, err
	}
	deleted, err := b.r.DeleteMessages(ctx, a, sessionID, n, before.UnixMilli())
	return deleted, mapErr(err)
}

// ReceiveDeferred implements amqp.Receiver.
func (b *Backend) ReceiveDeferred(ctx context.Context, addr amqp.Address, sessionID string, m amqp.ReceiveMode, seqs []int64) ([]*amqp.Delivery, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	msgs, err := b.r.ReceiveDeferred(ctx, a, sessionID, owner(ctx), mode(m), seqs)
	if errors.Is(err, fsm.ErrNotFound) {
		return deliveries(msgs), fmt.Errorf("%w: %v", amqp.ErrMessageNotFound, err)
	}
	return deliveries(msgs), mapErr(err)
}

// anonymous is the session-lock holder of calls that carry no amqp.ConnectionID (none
// does in production: amqp sets it on every connection). An empty owner would match any
// holder in the fsm, so such calls share this one instead and cannot act on sessions
// that connections hold.
const anonymous = "-"

// owner returns the session-lock holder identity of the connection making the call.
func owner(ctx context.Context) string {
	if id := amqp.ConnectionID(ctx); id != "" {
		return id
	}
	return anonymous
}

// AcceptSession implements amqp.Sessions: the calling connection becomes the holder.
func (b *Backend) AcceptSession(ctx context.Context, addr amqp.Address, sessionID string, wait time.Duration) (string, time.Time, error) {
	a, err := address(addr)
	if err != nil {
		return "", time.Time{}, err
	}
	id, until, err := b.r.AcceptSession(ctx, a, sessionID, owner(ctx), wait)
	if err != nil {
		return "", time.Time{}, mapErr(err)
	}
	return id, unixMs(until), nil
}

// ReleaseSession implements amqp.Sessions. Releasing a session this connection does not
// hold (never accepted, expired, or taken over by another connection since) changes
// nothing and is not an error: the link is going away either way.
func (b *Backend) ReleaseSession(ctx context.Context, addr amqp.Address, sessionID string) error {
	a, err := address(addr)
	if err != nil {
		return err
	}
	err = b.r.ReleaseSession(ctx, a, sessionID, owner(ctx))
	if errors.Is(err, fsm.ErrSessionLockLost) {
		return nil
	}
	return mapErr(err)
}

// RenewSessionLock implements amqp.Sessions; only the holder may renew (S-SES-4).
func (b *Backend) RenewSessionLock(ctx context.Context, addr amqp.Address, sessionID string) (time.Time, error) {
	a, err := address(addr)
	if err != nil {
		return time.Time{}, err
	}
	until, err := b.r.RenewSession(ctx, a, sessionID, owner(ctx))
	return unixMs(until), mapErr(err)
}

// SessionState implements amqp.Sessions: a leader read for the holder of the session's
// lock only (SessionLockLost for anyone else), as Service Bus answers.
func (b *Backend) SessionState(ctx context.Context, addr amqp.Address, sessionID string) ([]byte, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	st, err := b.r.HeldSessionState(ctx, a, sessionID, owner(ctx))
	return st, mapErr(err)
}

// SetSessionState implements amqp.Sessions: only the holder may set the state (S-SES-5,
// as Service Bus does); the fsm's owner-less form is for operator paths, not AMQP.
func (b *Backend) SetSessionState(ctx context.Context, addr amqp.Address, sessionID string, state []byte) error {
	a, err := address(addr)
	if err != nil {
		return err
	}
	return mapErr(b.r.SetSessionState(ctx, a, sessionID, owner(ctx), state))
}

// ListSessions implements amqp.Sessions.
func (b *Backend) ListSessions(ctx context.Context, addr amqp.Address, skip, top int) ([]string, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	ids, err := b.r.ListSessions(ctx, a)
	if err != nil {
		return nil, mapErr(err)
	}
	return page(ids, skip, top), nil
}

// SessionsUpdatedSince implements amqp.SessionUpdateLister.
func (b *Backend) SessionsUpdatedSince(ctx context.Context, addr amqp.Address, since time.Time, skip, top int) ([]string, error) {
	a, err := address(addr)
	if err != nil {
		return nil, err
	}
	ids, err := b.r.SessionsUpdatedSince(ctx, a, since)
	if err != nil {
		return nil, mapErr(err)
	}
	return page(ids, skip, top), nil
}

// page returns ids[skip:skip+top] (top <= 0: to the end), nil when skip is past them.
func page(ids []string, skip, top int) []string {
	if skip >= len(ids) {
		return nil
	}
	ids = ids[skip:]
	if top > 0 && top < len(ids) {
		ids = ids[:top]
	}
	return ids
}

// errMap is the one translation from the cluster's errors to amqp's sentinels.
var errMap = []struct{ from, to error }{
	{fsm.ErrLockLost, amqp.ErrLockLost},
	{fsm.ErrSessionLockLost, amqp.ErrSessionLockLost},
	{fsm.ErrSessionCannotBeLocked, amqp.ErrSessionCannotBeLocked},
	{fsm.ErrNoSessionAvailable, amqp.ErrTimeout},
	{fsm.ErrQuotaExceeded, amqp.ErrQuotaExceeded},
	{fsm.ErrMessageTooLarge, amqp.ErrMessageTooLarge},
	{fsm.ErrEntityDisabled, amqp.ErrEntityDisabled},
	{fsm.ErrSessionRequired, amqp.ErrNotAllowed},
	{fsm.ErrSessionNotAllowed, amqp.ErrNotAllowed},
	{fsm.ErrNotFound, amqp.ErrNotFound},
	{fsm.ErrBadCommand, amqp.ErrBadRequest},
	{cluster.ErrCrossPartition, amqp.ErrNotImplemented},
	{fsm.ErrTxnDecided, amqp.ErrTxnRolledBack},
	{fsm.ErrTxnTimeout, amqp.ErrTxnRolledBack},
	{fsm.ErrUploadIncomplete, amqp.ErrServerBusy}, // a chunked body lost its chunks (leader change): retry
	{partition.ErrNotLeader, amqp.ErrServerBusy},
	{partition.ErrClosed, amqp.ErrServerBusy},
	{cluster.ErrUnavailable, amqp.ErrServerBusy},
	{cluster.ErrClosed, amqp.ErrServerBusy},
	{partition.ErrTimeout, amqp.ErrTimeout},
	{context.DeadlineExceeded, amqp.ErrTimeout},
}

func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range errMap {
		if errors.Is(err, m.from) {
			// The text becomes the error's description, which a user reads: without
			// the broker's package prefixes ("fsm: ", "rule: ").
			return fmt.Errorf("%w: %s", m.to, admin.StripPrefixes(err.Error()))
		}
	}
	return publicErr{err}
}

// publicErr is err, worded without the broker's package prefixes (its description
// reaches the client) and classified as err is.
type publicErr struct{ err error }

func (e publicErr) Error() string { return admin.StripPrefixes(e.err.Error()) }
func (e publicErr) Unwrap() error { return e.err }

var _ amqp.Transactor = (*Backend)(nil)

// Commit implements amqp.Transactor: the operations go to cluster.Router.Commit, which
// applies them atomically, on one partition group in one Raft entry or on several by
// two-phase commit (an abort there is amqp.ErrTxnRolledBack).
func (b *Backend) Commit(ctx context.Context, ops []amqp.TxnOp) error {
	var t cluster.Txn
	for _, op := range ops {
		if op.Settlement == nil {
			t.Sends = append(t.Sends, cluster.TxnSend{Entity: op.Entity, Msgs: toMessages(op.Messages)})
			continue
		}
		s := op.Settlement
		a, err := address(s.Address)
		if err != nil {
			return err
		}
		d, ok := dispositions[s.Disposition]
		if !ok {
			return fmt.Errorf("%w: disposition %d", amqp.ErrBadRequest, s.Disposition)
		}
		t.Settles = append(t.Settles, cluster.Settlement{
			Address: a, Tokens: []fsm.LockToken{fsm.LockToken(s.LockToken)}, Disposition: d,
			Properties: toProps(s.PropertiesToModify), Reason: s.DeadLetterReason,
			Description: s.DeadLetterDescription, SessionID: s.SessionID, Owner: owner(ctx),
		})
	}
	return mapErr(b.r.Commit(ctx, t))
}
