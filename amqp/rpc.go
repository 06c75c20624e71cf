package amqp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
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
			c.log.Info("amqp: request refused", "operation", req.operation,
				"address", addr.String(), "status", resp.status, "description", resp.desc)
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

// ---- $cbs ----

// putToken validates a SAS token (protocol.md §3) and returns the claim.
func (c *conn) putToken(ctx context.Context, req *rpcRequest) (rpcResponse, *claim) {
	unauthorized := func(msg string) (rpcResponse, *claim) {
		return rpcResponse{status: 401, desc: msg + ". " + trackingID(c.cfg.Namespace, c.now())}, nil
	}
	if req.operation != "put-token" {
		return rpcResponse{status: 400, desc: "Unsupported operation '" + req.operation + "'. " + trackingID(c.cfg.Namespace, c.now())}, nil
	}
	typ := propString(req.props, "type")
	if typ == "jwt" {
		return unauthorized("InvalidIssuer: JWT tokens are not supported by this broker; use a shared access signature")
	}
	token, _ := req.body.(string)
	audience := propString(req.props, "name")
	sas, err := parseSAS(token)
	if err != nil {
		return unauthorized("InvalidSignature: " + err.Error())
	}
	srPath := resourcePath(sas.srUnescaped)
	key, scope, err := c.lookupKey(ctx, sas.skn, srPath)
	if err != nil {
		return unauthorized(fmt.Sprintf("InvalidSignature: The token has an invalid signature (unknown key '%s')", sas.skn))
	}
	if !sasValid(key.Key, sas) && (key.SecondaryKey == "" || !sasValid(key.SecondaryKey, sas)) {
		return unauthorized("InvalidSignature: The token has an invalid signature")
	}
	if scope != "" && srPath != scope && !strings.HasPrefix(srPath, scope+"/") {
		return unauthorized(fmt.Sprintf("InvalidAudience: the key '%s' of entity '%s' does not cover '%s'", sas.skn, scope, srPath))
	}
	se, err := strconv.ParseInt(sas.se, 10, 64)
	if err != nil {
		return unauthorized("InvalidSignature: malformed expiry")
	}
	expires := time.Unix(se, 0)
	if c.now().After(expires) {
		return unauthorized(fmt.Sprintf("ExpiredToken: The token is expired. Expiration time: '%s'", expires.UTC().Format("2006-01-02 15:04:05Z")))
	}
	audPath := resourcePath(audience)
	if audience != "" && srPath != "" && audPath != srPath && !strings.HasPrefix(audPath, srPath+"/") {
		return unauthorized("InvalidAudience: The token audience does not cover '" + audience + "'")
	}
	ent := strings.TrimSuffix(strings.TrimSuffix(audPath, "$management"), "/")
	ent, _ = parseEntityPath(ent)
	// A key without Send or Listen gets its token for a missing entity too: the attach
	// then answers unauthorized for the claim it lacks before looking the entity up,
	// as Service Bus does (the SDK's TestClientUnauthorizedCreds uses a missing queue).
	full := key.Rights.Has(RightSend | RightListen)
	if ent != "" && full {
		if _, err := c.b.Entity(ctx, ent); err != nil {
			if errors.Is(err, ErrNotFound) {
				return rpcResponse{status: 404, desc: fmt.Sprintf("The messaging entity 'sb://%s/%s' could not be found. %s", c.hostname, ent, trackingID(c.cfg.Namespace, c.now()))}, nil
			}
			return c.errResponse(err, c.cfg.Namespace), nil
		}
	}
	return rpcResponse{status: 202, desc: "Accepted"}, &claim{path: srPath, rights: key.Rights, expires: expires}
}

// sasValid checks the token's signature with one key: HMAC-SHA256 over the
// raw sr, a newline and the raw se, keyed by the key's UTF-8 bytes.
func sasValid(key string, sas sasToken) bool {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(sas.sr + "\n" + sas.se))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(sas.sig))
}

// lookupKey finds a namespace key, or else an entity-level rule on the
// entity the token's resource names (for a subscription, the subscription's
// rules, then its topic's). scope is the lower-case entity path an entity
// key is limited to ("" for a namespace key).
func (c *conn) lookupKey(ctx context.Context, name, srPath string) (SASKey, string, error) {
	key, err := c.b.SASKey(ctx, name)
	if err == nil {
		return key, "", nil
	}
	ea, ok := c.b.(EntityAuthenticator)
	if !ok || srPath == "" {
		return SASKey{}, "", err
	}
	ent, _ := parseEntityPath(strings.TrimSuffix(strings.TrimSuffix(srPath, "$management"), "/"))
	candidates := []string{ent}
	if i := strings.Index(ent, "/subscriptions/"); i > 0 {
		candidates = append(candidates, ent[:i])
	}
	for _, p := range candidates {
		if key, err := ea.EntitySASKey(ctx, p, name); err == nil {
			return key, strings.ToLower(p), nil
		}
	}
	return SASKey{}, "", ErrNotFound
}

type sasToken struct {
	sr, srUnescaped, sig, se, skn string
}

// parseSAS splits "SharedAccessSignature sr=..&sig=..&se=..&skn=..".
func parseSAS(token string) (sasToken, error) {
	var t sasToken
	rest, ok := strings.CutPrefix(token, "SharedAccessSignature ")
	if !ok {
		return t, errors.New("not a SharedAccessSignature token")
	}
	for _, part := range strings.Split(rest, "&") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "sr":
			t.sr = v
		case "sig":
			t.sig = v
		case "se":
			t.se = v
		case "skn":
			t.skn = v
		}
	}
	if t.sr == "" || t.sig == "" || t.se == "" || t.skn == "" {
		return t, errors.New("token lacks sr, sig, se or skn")
	}
	var err error
	if t.sig, err = url.QueryUnescape(t.sig); err != nil {
		return t, err
	}
	if t.srUnescaped, err = url.QueryUnescape(t.sr); err != nil {
		return t, err
	}
	return t, nil
}

// resourcePath drops scheme and host from a resource URI and lower-cases the
// path: "amqp://host:1/Q1/$management" -> "q1/$management". A bare host
// (namespace-wide token) gives "".
func resourcePath(uri string) string {
	p := uri
	if i := strings.Index(p, "://"); i >= 0 {
		p = p[i+3:]
	}
	if j := strings.IndexByte(p, '/'); j >= 0 {
		p = p[j+1:]
	} else {
		p = ""
	}
	return strings.ToLower(strings.Trim(p, "/"))
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
