package amqp

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

// mgmtCall is one $management request as its handler sees it: the entity
// resolved to its canonical path and the session the request acts for.
type mgmtCall struct {
	addr      Address
	info      EntityInfo
	req       *rpcRequest
	body      Map
	sessionID string // the body's session-id, else the associated link's session
}

// mgmtOp is one $management operation: the claim a caller needs, whether it
// acts under a session lock (a holder whose lock expired gets session lock
// lost before the Backend is asked, S-SES-6), and its handler. A handler's
// error becomes the response through the error table.
type mgmtOp struct {
	claim         Rights
	sessionScoped bool
	run           func(c *conn, ctx context.Context, m *mgmtCall) (rpcResponse, error)
}

// managementOps is the table of $management operations (protocol.md §7).
// An operation not in it needs Listen and answers 501.
var managementOps = map[string]mgmtOp{
	"com.microsoft:renew-lock":                 {claim: RightListen, sessionScoped: true, run: (*conn).mgmtRenewLock},
	"com.microsoft:peek-message":               {claim: RightListen, run: (*conn).mgmtPeek},
	"com.microsoft:receive-by-sequence-number": {claim: RightListen, sessionScoped: true, run: (*conn).mgmtReceiveBySequence},
	"com.microsoft:update-disposition":         {claim: RightListen, sessionScoped: true, run: (*conn).mgmtUpdateDisposition},
	"com.microsoft:schedule-message":           {claim: RightSend, run: (*conn).mgmtSchedule},
	"com.microsoft:cancel-scheduled-message":   {claim: RightSend, run: (*conn).mgmtCancelScheduled},
	"com.microsoft:renew-session-lock":         {claim: RightListen, sessionScoped: true, run: (*conn).mgmtRenewSessionLock},
	"com.microsoft:get-session-state":          {claim: RightListen, sessionScoped: true, run: (*conn).mgmtGetSessionState},
	"com.microsoft:set-session-state":          {claim: RightListen, sessionScoped: true, run: (*conn).mgmtSetSessionState},
	"com.microsoft:get-message-sessions":       {claim: RightListen, run: (*conn).mgmtGetMessageSessions},
	"com.microsoft:batch-delete-messages":      {claim: RightListen, run: (*conn).mgmtBatchDelete},
	// The SDKs' rule managers need only Listen (ServiceBusRuleManager's documentation).
	"com.microsoft:add-rule":        {claim: RightListen, run: (*conn).mgmtAddRule},
	"com.microsoft:remove-rule":     {claim: RightListen, run: (*conn).mgmtRemoveRule},
	"com.microsoft:enumerate-rules": {claim: RightListen, run: (*conn).mgmtEnumerateRules},
}

// managementClaim is the claim operation op needs.
func managementClaim(op string) Rights {
	if o, ok := managementOps[op]; ok {
		return o.claim
	}
	return RightListen
}

// sessionScoped reports whether op acts under a session lock.
func sessionScoped(op string) bool {
	return managementOps[op].sessionScoped
}

// management runs one $management operation.
func (c *conn) management(ctx context.Context, addr Address, assocSession string, req *rpcRequest, tracker string) rpcResponse {
	info, err := c.b.Entity(ctx, addr.Entity)
	if err != nil {
		return c.errResponse(err, tracker)
	}
	addr.Entity = info.Path
	op, known := managementOps[req.operation]
	if !known {
		// amqp:not-implemented: the SDKs raise their NotImplemented error, naming the operation.
		return rpcResponse{status: 501, cond: condNotImplemented,
			desc: fmt.Sprintf("The operation '%s' is not supported. %s", req.operation, trackingID(tracker, c.now()))}
	}
	m := &mgmtCall{addr: addr, info: info, req: req, body: bodyMap(req)}
	m.sessionID = mapString(m.body, "session-id")
	if m.sessionID == "" {
		m.sessionID = assocSession
	}
	resp, err := op.run(c, ctx, m)
	if err != nil {
		return c.errResponse(err, tracker)
	}
	return resp
}

var rpcOK = rpcResponse{status: 200}

func (c *conn) mgmtRenewLock(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	tokens, err := mapUUIDs(m.body, "lock-tokens")
	if err != nil {
		return rpcResponse{}, err
	}
	exp, err := c.b.RenewLock(ctx, m.addr, m.sessionID, tokens)
	if err != nil {
		return rpcResponse{}, err
	}
	c.post(func() { c.renewedLocks(tokens, exp) })
	return rpcResponse{status: 200, body: Map{{Key: "expirations", Value: exp}}}, nil
}

func (c *conn) mgmtPeek(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	from, _ := mapInt(m.body, "from-sequence-number")
	n, _ := mapInt(m.body, "message-count")
	if n <= 0 {
		n = 1
	}
	ds, err := c.b.Peek(ctx, m.addr, m.sessionID, from, int(min(n, 5000)))
	if err != nil {
		return rpcResponse{}, err
	}
	// omit-message-body (the JavaScript SDK's peekMessages omitMessageBody): each message
	// without its body, so the response limit below counts what is sent.
	omit, _ := m.body.GetString("omit-message-body")
	if omit == true {
		for _, d := range ds {
			msg := *d.Message // the Backend's message is immutable
			msg.Raw = withoutBody(msg.Raw)
			d.Message = &msg
		}
	}
	// One response holds at most MaxConnOutgoing bytes of messages (at least one
	// message): the SDKs peek on from the last sequence number they got.
	var size int64
	for i, d := range ds {
		if size += int64(len(d.Message.Raw)); i > 0 && size > c.cfg.MaxConnOutgoing {
			ds = ds[:i]
			break
		}
	}
	for _, d := range ds {
		// Service Bus shows a message that is not locked with the count its next
		// delivery will carry (S-LOCK-5): 1 when new, 2 after one abandon.
		if d.LockedUntil.IsZero() {
			d.DeliveryCount++
		}
	}
	return messagesResponse(ds, false), nil
}

func (c *conn) mgmtReceiveBySequence(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	seqs, err := mapLongs(m.body, "sequence-numbers")
	if err != nil {
		return rpcResponse{}, err
	}
	mode := PeekLock
	if v, ok := mapInt(m.body, "receiver-settle-mode"); ok && v == 0 {
		mode = ReceiveAndDelete
	}
	ds, err := c.b.ReceiveDeferred(ctx, m.addr, m.sessionID, mode, seqs)
	if err != nil {
		return rpcResponse{}, err
	}
	if len(ds) == 0 {
		return rpcResponse{}, fmt.Errorf("%w: no deferred message with the requested sequence numbers", ErrMessageNotFound)
	}
	return messagesResponse(ds, mode == PeekLock), nil
}

func (c *conn) mgmtUpdateDisposition(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	tokens, err := mapUUIDs(m.body, "lock-tokens")
	if err != nil {
		return rpcResponse{}, err
	}
	st := Settlement{Address: m.addr, SessionID: m.sessionID}
	switch mapString(m.body, "disposition-status") {
	case "completed":
		st.Disposition = Complete
	case "abandoned":
		st.Disposition = Abandon
	case "suspended":
		st.Disposition = DeadLetter
	case "defered", "deferred":
		st.Disposition = Defer
	default:
		return rpcResponse{}, fmt.Errorf("%w: unknown disposition-status %q", ErrBadRequest, mapString(m.body, "disposition-status"))
	}
	st.DeadLetterReason = mapString(m.body, "deadletter-reason")
	st.DeadLetterDescription = mapString(m.body, "deadletter-description")
	if v, found := m.body.GetString("properties-to-modify"); found {
		if pm, isMap := v.(Map); isMap {
			st.PropertiesToModify = propertiesFromMap(pm)
		}
	}
	batch := make([]Settlement, len(tokens))
	for i, t := range tokens {
		batch[i] = st
		batch[i].LockToken = t
	}
	for _, err := range c.b.Settle(ctx, batch) {
		if err != nil {
			return rpcResponse{}, err
		}
	}
	return rpcOK, nil
}

func (c *conn) mgmtSchedule(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	v, _ := m.body.GetString("messages")
	list, isList := v.(List)
	if !isList {
		return rpcResponse{}, fmt.Errorf("%w: 'messages' must be a list", ErrBadRequest)
	}
	msgs := make([]*Message, 0, len(list))
	for _, it := range list {
		im, isMap := it.(Map)
		if !isMap {
			return rpcResponse{}, fmt.Errorf("%w: each scheduled message must be a map", ErrBadRequest)
		}
		raw, _ := im.GetString("message")
		rb, isBin := raw.([]byte)
		if !isBin {
			return rpcResponse{}, fmt.Errorf("%w: 'message' must be binary", ErrBadRequest)
		}
		msg, err := parseClientMessage(c.cfg, rb)
		if err != nil {
			return rpcResponse{}, err
		}
		if uint64(len(rb)) > maxSize(m.info, c.cfg) {
			return rpcResponse{}, ErrMessageTooLarge
		}
		if m.info.RequiresSession && msg.SessionID == "" {
			return rpcResponse{}, fmt.Errorf("%w: the SessionId was not set on a message sent to a session-enabled entity", ErrBadRequest)
		}
		msgs = append(msgs, msg)
	}
	seqs, err := c.b.Schedule(ctx, m.addr.Entity, msgs)
	if err != nil {
		return rpcResponse{}, err
	}
	return rpcResponse{status: 200, body: Map{{Key: "sequence-numbers", Value: seqs}}}, nil
}

func (c *conn) mgmtCancelScheduled(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	seqs, err := mapLongs(m.body, "sequence-numbers")
	if err != nil {
		return rpcResponse{}, err
	}
	if err := c.b.CancelScheduled(ctx, m.addr.Entity, seqs); err != nil {
		return rpcResponse{}, err
	}
	return rpcOK, nil
}

func (c *conn) mgmtRenewSessionLock(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	until, err := c.b.RenewSessionLock(ctx, m.addr, m.sessionID)
	if err != nil {
		return rpcResponse{}, err
	}
	return rpcResponse{status: 200, body: Map{{Key: "expiration", Value: encoding.TimestampOf(until)}}, renewedUntil: until}, nil
}

func (c *conn) mgmtGetSessionState(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	state, err := c.b.SessionState(ctx, m.addr, m.sessionID)
	if err != nil {
		return rpcResponse{}, err
	}
	var v any
	if len(state) > 0 {
		v = state
	}
	return rpcResponse{status: 200, body: Map{{Key: "session-state", Value: v}}}, nil
}

func (c *conn) mgmtSetSessionState(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	v, _ := m.body.GetString("session-state")
	state, _ := v.([]byte)
	if uint64(len(state)) > maxSize(m.info, c.cfg) {
		return rpcResponse{}, ErrMessageTooLarge
	}
	if err := c.b.SetSessionState(ctx, m.addr, m.sessionID, state); err != nil {
		return rpcResponse{}, err
	}
	return rpcOK, nil
}

func (c *conn) mgmtGetMessageSessions(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	skip, _ := mapInt(m.body, "skip")
	top, found := mapInt(m.body, "top")
	if !found || top <= 0 {
		top = 100
	}
	var ids []string
	var err error
	// The SDKs send DateTime.MaxValue (or year 10000, which .NET clamps to it) for
	// the default listing: sessions with messages or state.
	if t, ok := mapTime(m.body, "last-updated-time"); ok && t.Year() < 9999 {
		ids, err = c.sessionsWithState(ctx, m.addr, t, int(max(skip, 0)), int(min(top, 1000)))
	} else {
		ids, err = c.b.ListSessions(ctx, m.addr, int(max(skip, 0)), int(min(top, 1000)))
	}
	if err != nil {
		return rpcResponse{}, err
	}
	if len(ids) == 0 {
		return rpcResponse{status: 204, desc: "No sessions"}, nil
	}
	for i, id := range ids {
		ids[i] = wireSessionID(id)
	}
	return rpcResponse{status: 200, body: Map{{Key: "skip", Value: int32(skip)}, {Key: "sessions-ids", Value: ids}}}, nil
}

// mgmtBatchDelete answers com.microsoft:batch-delete-messages (S-DEL-1..4): message-count
// (1..4000), enqueued-time-utc (the cutoff; now when absent), session-id (or the
// associated session receiver's); the answer is message-count, how many were deleted.
func (c *conn) mgmtBatchDelete(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	d, ok := c.b.(MessageDeleter)
	if !ok {
		return rpcResponse{}, fmt.Errorf("%w: the operation 'com.microsoft:batch-delete-messages' is not supported by this broker", errNotImplemented)
	}
	n, found := mapInt(m.body, "message-count")
	if !found || n < 1 || n > MaxDeleteCount {
		return rpcResponse{}, fmt.Errorf("%w: 'message-count' must be an integer between 1 and %d (the most one batch delete request may delete)",
			ErrBadRequest, MaxDeleteCount)
	}
	before := c.now()
	if v, present := m.body.GetString("enqueued-time-utc"); present && v != nil {
		t, ok := mapTime(m.body, "enqueued-time-utc")
		if !ok {
			return rpcResponse{}, fmt.Errorf("%w: 'enqueued-time-utc' must be a timestamp", ErrBadRequest)
		}
		before = t
	}
	deleted, err := d.DeleteMessages(ctx, m.addr, m.sessionID, int(n), before)
	if err != nil {
		return rpcResponse{}, err
	}
	return rpcResponse{status: 200, body: Map{{Key: "message-count", Value: int32(deleted)}}}, nil
}

// mapTime reads a timestamp (or a long of Unix milliseconds) from a request body.
func mapTime(m Map, key string) (time.Time, bool) {
	v, _ := m.GetString(key)
	switch x := v.(type) {
	case Timestamp:
		return x.Time(), true
	case int64:
		return time.UnixMilli(x), true
	}
	return time.Time{}, false
}

// maxStateScan bounds how many sessions a last-updated-time listing looks at.
const maxStateScan = 10000

// sessionsWithState answers get-message-sessions with a last-updated-time: Service Bus
// then lists the sessions whose state was set after that time. A Backend that keeps the
// update time (SessionUpdateLister) answers exactly; otherwise this lists the sessions
// that have state, and none for a time after now.
func (c *conn) sessionsWithState(ctx context.Context, addr Address, t time.Time, skip, top int) ([]string, error) {
	if l, ok := c.b.(SessionUpdateLister); ok {
		return l.SessionsUpdatedSince(ctx, addr, t, skip, top)
	}
	if t.After(c.now()) {
		return nil, nil
	}
	all, err := c.b.ListSessions(ctx, addr, 0, maxStateScan)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range all {
		st, err := c.b.SessionState(ctx, addr, id)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out = append(out, id)
		}
	}
	if skip >= len(out) {
		return nil, nil
	}
	return out[skip:min(len(out), skip+top)], nil
}

func maxSize(info EntityInfo, cfg *Config) uint64 {
	if info.MaxMessageSize > 0 {
		return info.MaxMessageSize
	}
	return cfg.MaxMessageSize
}

// messagesResponse builds {messages: list of {message: binary[, lock-token: uuid]}}.
func messagesResponse(ds []*Delivery, withLock bool) rpcResponse {
	if len(ds) == 0 {
		return rpcResponse{status: 204, desc: "No messages"}
	}
	list := make(List, 0, len(ds))
	for _, d := range ds {
		enc, err := encodeDelivery(d, withLock)
		if err != nil {
			continue
		}
		m := Map{{Key: "message", Value: enc}}
		if withLock {
			m = append(m, encoding.MapEntry{Key: "lock-token", Value: d.LockToken})
		}
		list = append(list, m)
	}
	return rpcResponse{status: 200, body: Map{{Key: "messages", Value: list}}}
}
