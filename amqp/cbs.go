package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// claim is a CBS authorization held by a connection: what one put-token
// granted, and the token itself so that a later key change can be checked
// against it (recheckClaims).
type claim struct {
	path    string // lower-case entity path prefix ("" = whole namespace)
	rights  Rights
	expires time.Time
	token   sas.Token // the zero Token for claims made in tests
}

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
	tok, err := sas.Parse(token)
	switch {
	case errors.Is(err, sas.ErrBadExpiry):
		return unauthorized("InvalidSignature: malformed expiry")
	case err != nil:
		return unauthorized("InvalidSignature: " + strings.TrimPrefix(err.Error(), "sas: "))
	}
	rule, err := c.lookupRule(ctx, tok.KeyName, tok.Path)
	if err != nil {
		return unauthorized(fmt.Sprintf("InvalidSignature: The token has an invalid signature (unknown key '%s')", tok.KeyName))
	}
	cl, err := sas.Check(tok, rule, c.now())
	switch {
	case errors.Is(err, sas.ErrInvalidSignature):
		return unauthorized("InvalidSignature: The token has an invalid signature")
	case errors.Is(err, sas.ErrOutOfScope):
		return unauthorized(fmt.Sprintf("InvalidAudience: the key '%s' of entity '%s' does not cover '%s'", tok.KeyName, rule.Scope, tok.Path))
	case errors.Is(err, sas.ErrExpired):
		return unauthorized(fmt.Sprintf("ExpiredToken: The token is expired. Expiration time: '%s'", tok.Expires.UTC().Format("2006-01-02 15:04:05Z")))
	case err != nil:
		return unauthorized("InvalidSignature: " + err.Error())
	}
	audPath := sas.ResourcePath(audience)
	if audience != "" && !tok.Covers(audPath) {
		return unauthorized("InvalidAudience: The token audience does not cover '" + audience + "'")
	}
	ent := strings.TrimSuffix(strings.TrimSuffix(audPath, "$management"), "/")
	ent, _ = parseEntityPath(ent)
	// A key without Send or Listen gets its token for a missing entity too: the attach
	// then answers unauthorized for the claim it lacks before looking the entity up,
	// as Service Bus does (the SDK's TestClientUnauthorizedCreds uses a missing queue).
	full := cl.Rights.Has(RightSend | RightListen)
	if ent != "" && full {
		if _, err := c.b.Entity(ctx, ent); err != nil {
			if errors.Is(err, ErrNotFound) {
				return rpcResponse{status: 404, desc: fmt.Sprintf("The messaging entity 'sb://%s/%s' could not be found. %s", c.hostname, ent, trackingID(c.cfg.Namespace, c.now()))}, nil
			}
			return c.errResponse(err, c.cfg.Namespace), nil
		}
	}
	return rpcResponse{status: 202, desc: "Accepted"}, &claim{path: cl.Path, rights: cl.Rights, expires: cl.Expires, token: tok}
}

// lookupRule finds a namespace key, or else an entity-level rule on the
// entity the token's resource names (for a subscription, the subscription's
// rules, then its topic's). An entity rule's Scope is the lower-case entity
// path it is limited to ("" for a namespace key).
func (c *conn) lookupRule(ctx context.Context, name, srPath string) (sas.Rule, error) {
	key, err := c.b.SASKey(ctx, name)
	if err == nil {
		return ruleOf(key, ""), nil
	}
	ea, ok := c.b.(EntityAuthenticator)
	if !ok || srPath == "" {
		return sas.Rule{}, err
	}
	ent, _ := parseEntityPath(strings.TrimSuffix(strings.TrimSuffix(srPath, "$management"), "/"))
	candidates := []string{ent}
	if i := strings.Index(ent, "/subscriptions/"); i > 0 {
		candidates = append(candidates, ent[:i])
	}
	for _, p := range candidates {
		if key, err := ea.EntitySASKey(ctx, p, name); err == nil {
			return ruleOf(key, strings.ToLower(p)), nil
		}
	}
	return sas.Rule{}, ErrNotFound
}

func ruleOf(k SASKey, scope string) sas.Rule {
	return sas.Rule{Name: k.Name, PrimaryKey: k.Key, SecondaryKey: k.SecondaryKey, Rights: k.Rights, Scope: scope}
}

// ---- claims over a connection's life ----

// linkLimit refuses a link beyond MaxLinksPerConnection, or beyond
// MaxUnauthenticatedLinks before the connection authenticated (an anonymous
// connection could otherwise attach $cbs links without end). The new link is
// already counted in linkCount.
func (c *conn) linkLimit() *frames.Error {
	if c.linkCount > c.cfg.MaxLinksPerConnection {
		return newError(condResourceLimit, fmt.Sprintf("This connection has reached the limit of %d links; close links or open another connection.",
			c.cfg.MaxLinksPerConnection), c.cfg.Namespace, c.now())
	}
	if c.cfg.RequireAuth && !c.authenticated && c.linkCount > c.cfg.MaxUnauthenticatedLinks {
		return newError(condUnauthorized, fmt.Sprintf("Unauthorized access. A connection may attach at most %d links before it puts a token on $cbs.",
			c.cfg.MaxUnauthenticatedLinks), c.cfg.Namespace, c.now())
	}
	return nil
}

// linkAuthorized reports whether l is still covered by the connection's
// claims: an entity link by the right it attached with, a $management link
// of an entity by Listen or Send. $cbs links and namespace $management need
// none.
func (c *conn) linkAuthorized(l *link) bool {
	switch l.node {
	case nodeEntity:
		return l.want == 0 || c.hasClaim(l.claimPath, l.want)
	case nodeManagement:
		return l.addr.Entity == "" || c.hasClaim(l.claimPath, RightListen) || c.hasClaim(l.claimPath, RightSend)
	}
	return true
}

// checkAuth runs every AuthCheckInterval on the owner goroutine. It closes a
// connection that did not authenticate within UnauthenticatedTimeout, drops
// expired claims and detaches the links they authorized (Service Bus detaches
// a link whose token lapsed unrenewed; a put-token before expiry adds a claim
// that keeps them), and starts a recheck of the claims against the current
// rules every ClaimRecheckInterval.
func (c *conn) checkAuth() error {
	if !c.cfg.RequireAuth {
		return nil
	}
	defer c.s.authChecks.Add(1)
	now := c.now()
	if !c.authenticated && now.Sub(c.opened) >= c.cfg.UnauthenticatedTimeout {
		return &errClose{newError(condUnauthorized, fmt.Sprintf("Unauthorized access. No token was put on $cbs within %v of the connection's open.",
			c.cfg.UnauthenticatedTimeout), c.cfg.Namespace, now)}
	}
	kept, expired := c.claims[:0], false
	for _, cl := range c.claims {
		if now.After(cl.expires) {
			expired = true
			continue
		}
		kept = append(kept, cl)
	}
	c.claims = kept
	if expired {
		c.detachUnauthorized("Unauthorized access. The token that authorized this link expired and was not renewed; put a new token on $cbs before the old one expires.")
	}
	if (len(c.claims) > 0 || c.loginRights != 0) && !c.rechecking && now.Sub(c.lastRecheck) >= c.cfg.ClaimRecheckInterval {
		c.recheckClaims()
	}
	return nil
}

// detachUnauthorized detaches every link the claims no longer cover with
// amqp:unauthorized-access.
func (c *conn) detachUnauthorized(desc string) {
	for _, s := range c.sessions {
		for _, l := range s.links {
			if l.attached && !l.detached && !c.linkAuthorized(l) {
				s.detachLink(l, s.errorFor(l, condUnauthorized, desc))
			}
		}
	}
}

// recheckClaims checks each claim's token against the rule that signed it as
// the Backend has it now, off the owner goroutine, and a SASL PLAIN login's
// key name and key the same way. A claim whose rule is gone or whose keys no
// longer sign its token is dropped (a login loses all its rights); one whose
// rule lost rights keeps only the rights left. Links the claims then no
// longer cover are detached. A Backend error other than not-found keeps the
// claim (a broker that cannot answer does not cut everyone off).
func (c *conn) recheckClaims() {
	c.rechecking = true
	claims := append([]claim(nil), c.claims...)
	login, loginHad := c.login, c.loginRights
	c.goFunc(func() {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
		defer cancel()
		now := c.now()
		loginLeft := fullRights(loginHad)
		if loginHad != 0 {
			r, err := login.check(ctx, c.b)
			switch {
			case err == nil:
				loginLeft = fullRights(r) & fullRights(loginHad)
			case errors.Is(err, ErrUnauthorized):
				loginLeft = 0
			}
		}
		rights := make(map[string]Rights, len(claims)) // by signature: what is left of each claim
		type found struct {
			rule sas.Rule
			err  error
		}
		rules := map[[2]string]found{} // one lookup per key name and path, however many claims share them
		for _, cl := range claims {
			if cl.token.KeyName == "" {
				continue // not from a token (tests)
			}
			k := [2]string{cl.token.KeyName, cl.token.Path}
			f, ok := rules[k]
			if !ok {
				f.rule, f.err = c.lookupRule(ctx, cl.token.KeyName, cl.token.Path)
				rules[k] = f
			}
			rule, err := f.rule, f.err
			if err != nil && !errors.Is(err, ErrNotFound) {
				continue
			}
			had, left := fullRights(cl.rights), Rights(0)
			if err == nil {
				if _, err := sas.Check(cl.token, rule, now); err == nil || errors.Is(err, sas.ErrExpired) {
					left = fullRights(rule.Rights) & had
				}
			}
			if left != had {
				rights[cl.token.Signature] = left
			}
		}
		c.post(func() {
			c.rechecking = false
			c.lastRecheck = c.now()
			loginChanged := loginLeft != fullRights(loginHad)
			if loginChanged {
				c.loginRights = loginLeft
			}
			if len(rights) == 0 && !loginChanged {
				return
			}
			kept := c.claims[:0]
			for _, cl := range c.claims {
				if r, ok := rights[cl.token.Signature]; ok && cl.token.Signature != "" {
					if cl.rights = r; r == 0 {
						continue
					}
				}
				kept = append(kept, cl)
			}
			c.claims = kept
			c.detachUnauthorized("Unauthorized access. The shared access rule that authorized this link was removed, lost this right, or its keys changed; put a token signed with a current key on $cbs.")
		})
	})
}

// fullRights spells out what Manage implies.
func fullRights(r Rights) Rights {
	if r&RightManage != 0 {
		return RightManage | RightSend | RightListen
	}
	return r
}
