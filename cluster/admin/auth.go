package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// token is a parsed SharedAccessSignature (protocol.md §3).
type token struct {
	sr, sig, se, skn string // raw values, as they appear in the token
}

// errNoManage: a valid token whose key lacks the Manage right. The handler words it per
// operation, as Service Bus does.
//
//lint:ignore ST1005 Service Bus error texts start with their code
var errNoManage = errors.New("Unauthorized: Manage claim(s) are required for this operation")

var errNoToken = errors.New("missing Authorization header: a SharedAccessSignature token is required")

func parseToken(h string) (token, error) {
	if h == "" {
		return token{}, errNoToken
	}
	const prefix = "sharedaccesssignature "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return token{}, errors.New("MalformedToken: the Authorization header is not a SharedAccessSignature token")
	}
	var t token
	for _, part := range strings.Split(strings.TrimSpace(h[len(prefix):]), "&") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.ToLower(k) {
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
		return token{}, errors.New("MalformedToken: the token must carry sr, sig, se and skn")
	}
	return t, nil
}

// signature returns the base64 HMAC-SHA256 of sr + "\n" + se with the key's raw UTF-8
// bytes (the key is not base64-decoded, protocol.md §3).
func signature(key, sr, se string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sr + "\n" + se))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// resourcePath returns the path a token's sr names, without scheme, host and query,
// lower-case and without surrounding slashes ("" = the whole namespace).
func resourcePath(sr string) string {
	u, err := url.QueryUnescape(sr)
	if err != nil {
		u = sr
	}
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	u, _, _ = strings.Cut(u, "?")
	_, p, _ := strings.Cut(u, "/") // drop the host
	if up, err := url.PathUnescape(p); err == nil {
		p = up
	}
	return strings.ToLower(strings.Trim(p, "/"))
}

// covers reports whether a token for resource path res may act on path p: res is p or a
// segment-aligned prefix of it (case-insensitive).
func covers(res, p string) bool {
	p = strings.ToLower(strings.Trim(p, "/"))
	return res == "" || p == res || strings.HasPrefix(p, res+"/")
}

// authorize checks the request's SAS token: a known key (namespace key, or a key of the
// entity the path belongs to), a valid signature, not expired, a resource that covers the
// path, and the Manage right. entity is the queue or topic the path addresses ("" for
// namespace-level paths).
func authorize(header string, now time.Time, st *meta.State, path, entity string) error {
	t, err := parseToken(header)
	if err != nil {
		return err
	}
	var keys []meta.SASKey
	if k, ok := st.SASKey(t.skn); ok {
		keys = append(keys, k)
	}
	if entity != "" {
		var rules []meta.SASKey
		if q, ok := st.Queue(entity); ok {
			rules = q.Properties.AuthorizationRules
		} else if tp, ok := st.Topic(entity); ok {
			rules = tp.Properties.AuthorizationRules
		}
		for _, k := range rules {
			if strings.EqualFold(k.Name, t.skn) {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("InvalidSignature: the token's key %q is not known", t.skn)
	}
	// The SDK query-escapes sig; accept a path-escaped or raw base64 one too (a raw '+'
	// would turn into a space under query unescaping).
	sigs := []string{t.sig}
	if u, err := url.QueryUnescape(t.sig); err == nil {
		sigs = append(sigs, u)
	}
	if u, err := url.PathUnescape(t.sig); err == nil {
		sigs = append(sigs, u)
	}
	var key *meta.SASKey
	for i := range keys {
		k := &keys[i]
		for _, secret := range []string{k.PrimaryKey, k.SecondaryKey} {
			if secret == "" {
				continue
			}
			want := []byte(signature(secret, t.sr, t.se))
			for _, sig := range sigs {
				if hmac.Equal(want, []byte(sig)) {
					key = k
				}
			}
		}
	}
	if key == nil {
		return errors.New("InvalidSignature: the token has an invalid signature")
	}
	se, err := strconv.ParseInt(t.se, 10, 64)
	if err != nil {
		return errors.New("MalformedToken: se is not a number")
	}
	if now.Unix() > se {
		return fmt.Errorf("ExpiredToken: The token is expired. Expiration time: '%s'", time.Unix(se, 0).UTC().Format(time.RFC3339))
	}
	res := resourcePath(t.sr)
	if !covers(res, path) {
		return fmt.Errorf("InvalidAudience: the token is for %q, not %q", res, path)
	}
	if !key.Rights.Has(meta.RightManage) {
		return errNoManage
	}
	return nil
}

// Authorize checks r's SAS token as the namespace-level admin API does (a known key, a
// valid unexpired signature whose resource covers r's path, and the Manage right). The
// explorer web UI (cmd/internal/explorer) serves its own JSON endpoints on the admin
// port and guards them with this, so they accept exactly the tokens the admin API does.
// The error text says why; the caller answers 401 with it.
func (h *Handler) Authorize(r *http.Request) error {
	var authErr error
	if err := h.cfg.Store.Read(r.Context(), func(s *meta.State) {
		authErr = authorize(r.Header.Get("Authorization"), h.cfg.Now(), s, r.URL.Path, "")
	}); err != nil {
		return err
	}
	return authErr
}
