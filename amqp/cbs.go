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
)

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
