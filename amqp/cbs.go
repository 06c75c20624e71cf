package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
