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
	cbs          bool      // a $cbs response: the status also under the CBS draft's key names
}

// responseLink is the reply address of this session's response link attached with
// source node (the one with the lowest handle when there are several), "" when none.
func (s *session) responseLink(node string) string {
	var found *link
	for _, l := range s.links {
		if l.role == frames.RoleReceiver && l.replyAddr != "" && !l.detached && strings.EqualFold(l.rpcNode, node) &&
			(found == nil || l.handle < found.handle) {
			found = l
		}
	}
	if found == nil {
		return ""
	}
	return found.replyAddr
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
	if r.cbs {
		// The CBS draft names them status-code and status-description, which is what
		// uamqp (the Python SDK) reads on $cbs; the other SDKs read either.
		b = encoding.AppendString(b, "status-code")
		b = encoding.AppendInt(b, r.status)
		b = encoding.AppendString(b, "status-description")
		b = encoding.AppendString(b, r.desc)
		n += 4
	}
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
	if req.replyTo == "" {
		// uamqp (the Python SDK) sends no reply-to: Service Bus answers on the link the
		// client attached from the same node in this session (protocol.md §3).
		req.replyTo = s.responseLink(l.rpcNode)
	}
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
		want := managementClaim(req.operation)
		if !c.hasClaim(l.claimPath, want) {
			authErr = fmt.Errorf("%w: Unauthorized access. '%s' claim(s) are required to perform this operation", ErrUnauthorized, want)
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
	octx := holder.ownerCtx(c.ctx) // a resumed session link acts for its lock's holder (resume.go)
	c.goFunc(func() {
		ctx, cancel := context.WithTimeout(octx, timeout)
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
		var msg []byte
		if req.replyTo != "" {
			// Encode (copy) one response of this connection at a time, and queue
			// it once it fits under the bound (outbytes.go).
			c.rpcOutMu.Lock()
			resp.cbs = node == nodeCBS
			msg = encodeRPCResponse(req.messageID, resp)
			err := c.reserveOut(c.ctx, int64(len(msg)), 0)
			c.rpcOutMu.Unlock()
			if err != nil {
				return // the connection ended while the client did not read
			}
		}
		c.post(func() {
			l.inflight--
			if cl != nil {
				c.addClaim(*cl)
			}
			if holder != nil && !resp.renewedUntil.IsZero() && !holder.detached {
				holder.sessionLockedUntil = resp.renewedUntil
			}
			if req.replyTo != "" {
				c.deliverReply(req.replyTo, msg) // reserved above
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
