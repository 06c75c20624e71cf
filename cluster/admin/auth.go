package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// errNoManage: a valid token whose key lacks the Manage right. The handler words it per
// operation, as Service Bus does.
//
//lint:ignore ST1005 Service Bus error texts start with their code
var errNoManage = errors.New("Unauthorized: Manage claim(s) are required for this operation")

var errNoToken = errors.New("missing Authorization header: a SharedAccessSignature token is required")

// parseToken parses the Authorization header with internal/sas, the one SAS
// implementation, and words its errors as the admin API always has.
func parseToken(h string) (sas.Token, error) {
	if h == "" {
		return sas.Token{}, errNoToken
	}
	t, err := sas.Parse(h)
	switch {
	case errors.Is(err, sas.ErrNotSAS):
		return t, errors.New("MalformedToken: the Authorization header is not a SharedAccessSignature token")
	case errors.Is(err, sas.ErrBadExpiry):
		return t, errors.New("MalformedToken: se is not a number")
	case errors.Is(err, sas.ErrMissingField):
		return t, errors.New("MalformedToken: the token must carry sr, sig, se and skn")
	case err != nil:
		return t, fmt.Errorf("MalformedToken: %s", strings.TrimPrefix(err.Error(), "sas: "))
	}
	return t, nil
}

// signature returns a token's sig for sr and se (sas.Sign).
func signature(key, sr, se string) string { return sas.Sign(key, sr, se) }

// resourcePath returns the path a token's sr names (sas.ResourcePath).
func resourcePath(sr string) string { return sas.ResourcePath(sr) }

// covers reports whether a token for resource path res may act on path p (sas.Covers).
func covers(res, p string) bool { return sas.Covers(res, p) }

// authorize checks the request's SAS token: a known key (namespace key, or a key of the
// entity the path belongs to), a valid signature, not expired, a resource that covers the
// path, and the Manage right. entity is the queue or topic the path addresses ("" for
// namespace-level paths).
func authorize(header string, now time.Time, st *meta.State, path, entity string) error {
	t, err := parseToken(header)
	if err != nil {
		return err
	}
	var rules []sas.Rule
	if k, ok := st.SASKey(t.KeyName); ok {
		rules = append(rules, ruleOf(k, ""))
	}
	if entity != "" {
		var entRules []meta.SASKey
		if q, ok := st.Queue(entity); ok {
			entRules = q.Properties.AuthorizationRules
		} else if tp, ok := st.Topic(entity); ok {
			entRules = tp.Properties.AuthorizationRules
		}
		for _, k := range entRules {
			if strings.EqualFold(k.Name, t.KeyName) {
				// An entity's rule authorizes its own paths only: the token's resource
				// must lie under the entity (internal/sas).
				rules = append(rules, ruleOf(k, strings.ToLower(entity)))
			}
		}
	}
	if len(rules) == 0 {
		return unknownKeyError(t.KeyName)
	}
	var cl sas.Claim
	err = sas.ErrInvalidSignature
	for _, r := range rules {
		if c, e := sas.Check(t, r, now); e == nil || errors.Is(err, sas.ErrInvalidSignature) {
			cl, err = c, e
		}
	}
	switch {
	case errors.Is(err, sas.ErrInvalidSignature):
		return errors.New("InvalidSignature: the token has an invalid signature")
	case errors.Is(err, sas.ErrOutOfScope):
		return fmt.Errorf("InvalidAudience: the token is for %q, outside the entity whose rule %q signed it", t.Path, t.KeyName)
	case errors.Is(err, sas.ErrExpired):
		return fmt.Errorf("ExpiredToken: The token is expired. Expiration time: '%s'", t.Expires.UTC().Format(time.RFC3339))
	case err != nil:
		return err
	}
	if !t.Covers(path) {
		return fmt.Errorf("InvalidAudience: the token is for %q, not %q", t.Path, path)
	}
	if !cl.Rights.Has(sas.Manage) {
		return errNoManage
	}
	return nil
}

// unknownKeyError: the token names a key this node's metadata does not hold (yet).
type unknownKeyError string

func (e unknownKeyError) Error() string {
	return fmt.Sprintf("InvalidSignature: the token's key %q is not known", string(e))
}

// MetaSyncer is the optional Store capability that brings the node's metadata up to
// the metadata leader's (cluster.Store.SyncMeta): read-your-writes across nodes.
type MetaSyncer interface {
	SyncMeta(ctx context.Context) error
}

// keySyncWait bounds how long a request whose token names an unknown key waits for the
// metadata to catch up before it is refused.
const keySyncWait = 2 * time.Second

// readAuthorized calls auth (authorize, and whatever else the caller reads) with the
// Store's view and returns its error as authErr; err is the Store's own. When the token
// names a key this node does not know, the key may have been created through another
// node a moment ago: the node catches up with the metadata leader once (MetaSyncer) and
// reads again before the request is refused.
func (h *Handler) readAuthorized(ctx context.Context, auth func(s *meta.State) error) (authErr, err error) {
	for try := 0; ; try++ {
		if err := h.cfg.Store.Read(ctx, func(s *meta.State) { authErr = auth(s) }); err != nil {
			return nil, err
		}
		var unknown unknownKeyError
		sy, ok := h.cfg.Store.(MetaSyncer)
		if try > 0 || !ok || !errors.As(authErr, &unknown) {
			return authErr, nil
		}
		sctx, cancel := context.WithTimeout(ctx, keySyncWait)
		serr := sy.SyncMeta(sctx)
		cancel()
		if serr != nil {
			return authErr, nil
		}
	}
}

// ruleOf converts a stored key to the sas package's rule.
func ruleOf(k meta.SASKey, scope string) sas.Rule {
	return sas.Rule{Name: k.Name, PrimaryKey: k.PrimaryKey, SecondaryKey: k.SecondaryKey, Rights: k.Rights.SAS(), Scope: scope}
}

// Authorize checks r's SAS token as the namespace-level admin API does (a known key, a
// valid unexpired signature whose resource covers r's path, and the Manage right). The
// explorer web UI (cmd/internal/explorer) serves its own JSON endpoints on the admin
// port and guards them with this, so they accept exactly the tokens the admin API does.
// The error text says why; the caller answers 401 with it.
func (h *Handler) Authorize(r *http.Request) error {
	authErr, err := h.readAuthorized(r.Context(), func(s *meta.State) error {
		return authorize(r.Header.Get("Authorization"), h.cfg.Now(), s, r.URL.Path, "")
	})
	if err != nil {
		return err
	}
	return authErr
}
