package amqp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// rpcRequest is a $cbs or $management request message (protocol.md §3, §7).
type rpcRequest struct {
	messageID []byte // raw encoding, echoed as correlation-id
	replyTo   string
	props     Map
	body      any
	operation string
}

func parseRPC(b []byte) (*rpcRequest, error) {
	s, err := splitSections(b)
	if err != nil {
		return nil, err
	}
	r := &rpcRequest{}
	if s.properties != nil {
		f, err := sectionFields(s.properties)
		if err != nil {
			return nil, err
		}
		var vals [5][]byte
		for i := range vals {
			if vals[i], err = f.Next(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
		}
		if !encoding.IsNull(vals[0]) {
			r.messageID = append([]byte(nil), vals[0]...)
		}
		if !encoding.IsNull(vals[4]) {
			r.replyTo, _ = encoding.ReadString(vals[4])
		}
	}
	if s.appProps != nil {
		if r.props, err = sectionMap(s.appProps); err != nil {
			return nil, err
		}
	}
	if s.value != nil {
		if r.body, _, err = encoding.Decode(s.value); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	r.operation = propString(r.props, "operation")
	return r, nil
}

func propString(m Map, key string) string {
	v, _ := m.GetString(key)
	switch x := v.(type) {
	case string:
		return x
	case Symbol:
		return string(x)
	}
	return ""
}

// rpcResponse is a response before encoding.
type rpcResponse struct {
	status int32
	desc   string
	cond   string // errorCondition of a failed request ("" on success)
	body   any    // encoded as amqp-value; nil for none

	renewedUntil time.Time // renew-session-lock: the new expiry, for the holder link
}

// sessionScoped lists the operations that act under a session lock.
func sessionScoped(op string) bool {
	switch op {
	case "com.microsoft:renew-session-lock", "com.microsoft:get-session-state", "com.microsoft:set-session-state",
		"com.microsoft:renew-lock", "com.microsoft:update-disposition", "com.microsoft:receive-by-sequence-number":
		return true
	}
	return false
}

// sessionHolder finds this connection's receiver link holding session id on addr.
func (c *conn) sessionHolder(addr Address, id string) *link {
	for _, s := range c.sessions {
		for _, l := range s.links {
			if l.sessionID == id && strings.EqualFold(l.addr.Entity, addr.Entity) && l.addr.Sub == addr.Sub {
				return l
			}
		}
	}
	return nil
}

func encodeRPCResponse(msgID []byte, r rpcResponse) []byte {
	b := encoding.AppendDescriptor(nil, secProperties)
	b, lo := encoding.ListStart(b)
	for range 5 {
		b = encoding.AppendNull(b)
	}
	if msgID != nil {
		b = append(b, msgID...) // correlation-id = the request's message-id, same type
	} else {
		b = encoding.AppendNull(b)
	}
	b = encoding.ListEnd(b, lo, 6)
	b = encoding.AppendDescriptor(b, secAppProperties)
	b, mo := encoding.MapStart(b)
	b = encoding.AppendString(b, "statusCode")
	b = encoding.AppendInt(b, r.status) // must be int32 (protocol.md §3)
	b = encoding.AppendString(b, "statusDescription")
	b = encoding.AppendString(b, r.desc)
	n := 4
	if r.cond != "" {
		// Service Bus names the condition of a failed request; the JavaScript SDK maps
		// its errors from it (without it a 404 reads as ServiceCommunicationProblem).
		b = encoding.AppendString(b, "errorCondition")
		b = encoding.AppendSymbol(b, Symbol(r.cond))
		n += 2
	}
	b = encoding.MapEnd(b, mo, n)
	b = encoding.AppendDescriptor(b, secValue)
	var err error
	if b, err = encoding.Append(b, r.body); err != nil {
		b = encoding.AppendNull(b)
	}
	return b
}

func (c *conn) errResponse(err error, tracker string) rpcResponse {
	cond, status := classify(err)
	return rpcResponse{status: status, desc: describe(err, tracker, c.now()), cond: cond}
}

// rpcRequest handles a complete request on a $cbs or $management sender link.
func (s *session) rpcRequest(l *link, p *partial) {
	c := s.c
	req, err := parseRPC(p.buf)
	if err != nil {
		s.settleIncoming(l, p, &frames.Rejected{Error: amqpError(err, s.tracker(l), c.now())})
		s.deliveryDone(l)
		return
	}
	s.settleIncoming(l, p, frames.Accepted{}) // every request needs a settled disposition (protocol.md §11.3)
	// Owner-side context the handler needs: claims and the session of the
	// associated receiver link.
	var assocSession string
	var holder *link // the session receiver link this request acts for, if any
	if name := propString(req.props, "associated-link-name"); name != "" {
		if al := c.linksByName[linkKey{name, frames.RoleReceiver}]; al != nil {
			assocSession = al.sessionID
			if al.sessionID != "" {
				holder = al
			}
		}
	}
	if holder == nil {
		if id := mapString(bodyMap(req), "session-id"); id != "" {
			holder = c.sessionHolder(l.addr, id)
		}
	}
	// A holder whose session lock expired has lost it (S-SES-6): answer
	// session-scoped operations with lock lost instead of asking the Backend,
	// which may by now have given the session to another receiver.
	holderLost := holder != nil && !c.sessionLockHeld(holder)
	var authErr error
	if l.node == nodeManagement {
		want := RightListen
		switch req.operation {
		case "com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message":
			want = RightSend
		}
		if !c.hasClaim(l.claimPath, want) {
			authErr = fmt.Errorf("%w: Unauthorized access. '%s' claim(s) are required to perform this operation", ErrUnauthorized, map[Rights]string{RightListen: "Listen", RightSend: "Send"}[want])
		}
	}
	timeout := c.cfg.RPCTimeout
	for _, k := range []string{"server-timeout", "com.microsoft:server-timeout"} {
		if v, ok := req.props.GetString(k); ok {
			if ms, ok := toInt64(v); ok && ms > 0 {
				timeout = min(timeout, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	l.inflight++
	node, addr, tracker := l.node, l.addr, s.tracker(l)
	c.goFunc(func() {
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		defer cancel()
		var resp rpcResponse
		var cl *claim
		switch {
		case authErr != nil:
			resp = c.errResponse(authErr, tracker)
		case holderLost && sessionScoped(req.operation):
			resp = c.errResponse(fmt.Errorf("%w: the session lock has expired", ErrSessionLockLost), tracker)
		case node == nodeCBS:
			resp, cl = c.putToken(ctx, req)
		default:
			resp = c.management(ctx, addr, assocSession, req, tracker)
		}
		// Every refusal is visible at the default level; 204 (nothing to list) and a
		// 404 for a message looked up by sequence number are answers, not refusals.
		if resp.status >= 400 && resp.cond != condMessageNotFound {
			c.refused("amqp: request refused", &frames.Error{Condition: Symbol(condOf(resp)), Description: resp.desc},
				"operation", req.operation, "address", addr.String(), "status", resp.status)
		}
		msg := encodeRPCResponse(req.messageID, resp)
		c.post(func() {
			l.inflight--
			if cl != nil {
				c.addClaim(*cl)
			}
			if holder != nil && !resp.renewedUntil.IsZero() && !holder.detached {
				holder.sessionLockedUntil = resp.renewedUntil
			}
			if req.replyTo != "" {
				c.deliverReply(req.replyTo, msg)
			}
			s.deliveryDone(l)
		})
	})
}

// ---- $management ----

func bodyMap(req *rpcRequest) Map {
	m, _ := req.body.(Map)
	return m
}

func mapString(m Map, k string) string {
	v, _ := m.GetString(k)
	s, _ := v.(string)
	return s
}

func mapInt(m Map, k string) (int64, bool) {
	v, ok := m.GetString(k)
	if !ok {
		return 0, false
	}
	return toInt64(v)
}

func mapLongs(m Map, k string) ([]int64, error) {
	v, _ := m.GetString(k)
	var items []any
	switch x := v.(type) {
	case *Array:
		items = x.Items
	case List:
		items = x
	case int64:
		items = []any{x}
	default:
		return nil, fmt.Errorf("%w: '%s' must be an array of long", ErrBadRequest, k)
	}
	out := make([]int64, 0, len(items))
	for _, it := range items {
		n, ok := toInt64(it)
		if !ok {
			return nil, fmt.Errorf("%w: '%s' must be an array of long", ErrBadRequest, k)
		}
		out = append(out, n)
	}
	return out, nil
}

func mapUUIDs(m Map, k string) ([]UUID, error) {
	v, _ := m.GetString(k)
	var items []any
	switch x := v.(type) {
	case *Array:
		items = x.Items
	case List:
		items = x
	case UUID:
		items = []any{x}
	default:
		return nil, fmt.Errorf("%w: '%s' must be an array of uuid", ErrBadRequest, k)
	}
	out := make([]UUID, 0, len(items))
	for _, it := range items {
		u, ok := it.(UUID)
		if !ok {
			return nil, fmt.Errorf("%w: '%s' must be an array of uuid", ErrBadRequest, k)
		}
		out = append(out, u)
	}
	return out, nil
}

// management runs one $management operation (protocol.md §7).
func (c *conn) management(ctx context.Context, addr Address, assocSession string, req *rpcRequest, tracker string) rpcResponse {
	fail := func(err error) rpcResponse { return c.errResponse(err, tracker) }
	info, err := c.b.Entity(ctx, addr.Entity)
	if err != nil {
		return fail(err)
	}
	addr.Entity = info.Path
	body := bodyMap(req)
	sessionID := mapString(body, "session-id")
	if sessionID == "" {
		sessionID = assocSession
	}
	ok := rpcResponse{status: 200}
	switch req.operation {
	case "com.microsoft:renew-lock":
		tokens, err := mapUUIDs(body, "lock-tokens")
		if err != nil {
			return fail(err)
		}
		exp, err := c.b.RenewLock(ctx, addr, sessionID, tokens)
		if err != nil {
			return fail(err)
		}
		ok.body = Map{{Key: "expirations", Value: exp}}
		return ok
	case "com.microsoft:peek-message":
		from, _ := mapInt(body, "from-sequence-number")
		n, _ := mapInt(body, "message-count")
		if n <= 0 {
			n = 1
		}
		ds, err := c.b.Peek(ctx, addr, sessionID, from, int(min(n, 5000)))
		if err != nil {
			return fail(err)
		}
		for _, d := range ds {
			// Service Bus shows a message that is not locked with the count its next
			// delivery will carry (S-LOCK-5): 1 when new, 2 after one abandon.
			if d.LockedUntil.IsZero() {
				d.DeliveryCount++
			}
		}
		return messagesResponse(ds, false)
	case "com.microsoft:receive-by-sequence-number":
		seqs, err := mapLongs(body, "sequence-numbers")
		if err != nil {
			return fail(err)
		}
		mode := PeekLock
		if m, ok := mapInt(body, "receiver-settle-mode"); ok && m == 0 {
			mode = ReceiveAndDelete
		}
		ds, err := c.b.ReceiveDeferred(ctx, addr, sessionID, mode, seqs)
		if err != nil {
			return fail(err)
		}
		if len(ds) == 0 {
			return fail(fmt.Errorf("%w: no deferred message with the requested sequence numbers", ErrMessageNotFound))
		}
		return messagesResponse(ds, mode == PeekLock)
	case "com.microsoft:update-disposition":
		tokens, err := mapUUIDs(body, "lock-tokens")
		if err != nil {
			return fail(err)
		}
		st := Settlement{Address: addr, SessionID: sessionID}
		switch mapString(body, "disposition-status") {
		case "completed":
			st.Disposition = Complete
		case "abandoned":
			st.Disposition = Abandon
		case "suspended":
			st.Disposition = DeadLetter
		case "defered", "deferred":
			st.Disposition = Defer
		default:
			return fail(fmt.Errorf("%w: unknown disposition-status %q", ErrBadRequest, mapString(body, "disposition-status")))
		}
		st.DeadLetterReason = mapString(body, "deadletter-reason")
		st.DeadLetterDescription = mapString(body, "deadletter-description")
		if v, found := body.GetString("properties-to-modify"); found {
			if m, isMap := v.(Map); isMap {
				st.PropertiesToModify = propertiesFromMap(m)
			}
		}
		batch := make([]Settlement, len(tokens))
		for i, t := range tokens {
			batch[i] = st
			batch[i].LockToken = t
		}
		for _, err := range c.b.Settle(ctx, batch) {
			if err != nil {
				return fail(err)
			}
		}
		return ok
	case "com.microsoft:schedule-message":
		v, _ := body.GetString("messages")
		list, isList := v.(List)
		if !isList {
			return fail(fmt.Errorf("%w: 'messages' must be a list", ErrBadRequest))
		}
		msgs := make([]*Message, 0, len(list))
		for _, it := range list {
			im, isMap := it.(Map)
			if !isMap {
				return fail(fmt.Errorf("%w: each scheduled message must be a map", ErrBadRequest))
			}
			raw, _ := im.GetString("message")
			rb, isBin := raw.([]byte)
			if !isBin {
				return fail(fmt.Errorf("%w: 'message' must be binary", ErrBadRequest))
			}
			m, err := parseClientMessage(c.cfg, rb)
			if err != nil {
				return fail(err)
			}
			if uint64(len(rb)) > maxSize(info, c.cfg) {
				return fail(ErrMessageTooLarge)
			}
			if info.RequiresSession && m.SessionID == "" {
				return fail(fmt.Errorf("%w: the SessionId was not set on a message sent to a session-enabled entity", ErrBadRequest))
			}
			msgs = append(msgs, m)
		}
		seqs, err := c.b.Schedule(ctx, addr.Entity, msgs)
		if err != nil {
			return fail(err)
		}
		ok.body = Map{{Key: "sequence-numbers", Value: seqs}}
		return ok
	case "com.microsoft:cancel-scheduled-message":
		seqs, err := mapLongs(body, "sequence-numbers")
		if err != nil {
			return fail(err)
		}
		if err := c.b.CancelScheduled(ctx, addr.Entity, seqs); err != nil {
			return fail(err)
		}
		return ok
	case "com.microsoft:renew-session-lock":
		until, err := c.b.RenewSessionLock(ctx, addr, sessionID)
		if err != nil {
			return fail(err)
		}
		ok.body = Map{{Key: "expiration", Value: encoding.TimestampOf(until)}}
		ok.renewedUntil = until
		return ok
	case "com.microsoft:get-session-state":
		state, err := c.b.SessionState(ctx, addr, sessionID)
		if err != nil {
			return fail(err)
		}
		var v any
		if len(state) > 0 {
			v = state
		}
		ok.body = Map{{Key: "session-state", Value: v}}
		return ok
	case "com.microsoft:set-session-state":
		v, _ := body.GetString("session-state")
		state, _ := v.([]byte)
		if uint64(len(state)) > maxSize(info, c.cfg) {
			return fail(ErrMessageTooLarge)
		}
		if err := c.b.SetSessionState(ctx, addr, sessionID, state); err != nil {
			return fail(err)
		}
		return ok
	case "com.microsoft:get-message-sessions":
		skip, _ := mapInt(body, "skip")
		top, found := mapInt(body, "top")
		if !found || top <= 0 {
			top = 100
		}
		var ids []string
		var err error
		// The SDKs send DateTime.MaxValue (or year 10000, which .NET clamps to it) for
		// the default listing: sessions with messages or state.
		if t, ok := mapTime(body, "last-updated-time"); ok && t.Year() < 9999 {
			ids, err = c.sessionsWithState(ctx, addr, t, int(max(skip, 0)), int(min(top, 1000)))
		} else {
			ids, err = c.b.ListSessions(ctx, addr, int(max(skip, 0)), int(min(top, 1000)))
		}
		if err != nil {
			return fail(err)
		}
		if len(ids) == 0 {
			return rpcResponse{status: 204, desc: "No sessions"}
		}
		for i, id := range ids {
			ids[i] = wireSessionID(id)
		}
		ok.body = Map{{Key: "skip", Value: int32(skip)}, {Key: "sessions-ids", Value: ids}}
		return ok
	}
	return rpcResponse{status: 501, desc: fmt.Sprintf("The operation '%s' is not supported. %s", req.operation, trackingID(tracker, c.now()))}
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
// then lists the sessions whose state was set after that time. The Backend keeps no
// update time, so this lists the sessions that have state, and none for a time after
// now (docs/compatibility.md).
func (c *conn) sessionsWithState(ctx context.Context, addr Address, t time.Time, skip, top int) ([]string, error) {
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
