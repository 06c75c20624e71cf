package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Errors of Parse. Callers word them for their protocol (the SDKs surface the
// texts of amqp and admin, which differ), so these are matched with errors.Is.
var (
	// ErrNotSAS: the string does not start with "SharedAccessSignature ".
	ErrNotSAS = errors.New("sas: not a SharedAccessSignature token")
	// ErrMissingField: sr, sig, se or skn is missing or empty.
	ErrMissingField = errors.New("sas: token lacks sr, sig, se or skn")
	// ErrBadExpiry: se is not a decimal Unix time.
	ErrBadExpiry = errors.New("sas: se is not a number")
	// ErrBadEncoding: sr is not valid URL encoding.
	ErrBadEncoding = errors.New("sas: sr is not URL-encoded correctly")
	// ErrTooLong: the token is longer than any real one (8 KiB).
	ErrTooLong = errors.New("sas: token too long")
)

// Prefix starts every token (compared case-insensitively).
const Prefix = "SharedAccessSignature "

// maxTokenLen bounds what Parse looks at; real tokens are a few hundred bytes.
const maxTokenLen = 8 << 10

// Token is a parsed SharedAccessSignature.
type Token struct {
	// Raw field values as they appear in the token: the signature covers
	// Resource and Expiry exactly as sent.
	Resource  string // sr
	Signature string // sig
	Expiry    string // se
	KeyName   string // skn

	// Path is the lower-case entity path sr names ("" = the whole namespace);
	// see ResourcePath.
	Path string
	// Expires is se as a time.
	Expires time.Time
}

// Parse splits a token. Field names compare case-insensitively; a repeated
// field keeps its last value. It never panics and bounds its work by the
// token's length.
func Parse(s string) (Token, error) {
	var t Token
	if len(s) > maxTokenLen {
		return t, ErrTooLong
	}
	if len(s) < len(Prefix) || !strings.EqualFold(s[:len(Prefix)], Prefix) {
		return t, ErrNotSAS
	}
	for _, part := range strings.Split(strings.TrimSpace(s[len(Prefix):]), "&") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.ToLower(k) {
		case "sr":
			t.Resource = v
		case "sig":
			t.Signature = v
		case "se":
			t.Expiry = v
		case "skn":
			t.KeyName = v
		}
	}
	if t.Resource == "" || t.Signature == "" || t.Expiry == "" || t.KeyName == "" {
		return Token{}, ErrMissingField
	}
	se, err := strconv.ParseInt(t.Expiry, 10, 64)
	if err != nil {
		return Token{}, ErrBadExpiry
	}
	if _, err := url.QueryUnescape(t.Resource); err != nil {
		return Token{}, ErrBadEncoding
	}
	t.Expires = time.Unix(se, 0)
	t.Path = ResourcePath(t.Resource)
	return t, nil
}

// Sign returns the base64 HMAC-SHA256 of sr + "\n" + se keyed by key's UTF-8
// bytes: the sig of a token for the raw sr and se.
func Sign(key, sr, se string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sr + "\n" + se))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Format builds a token: sr is query-escaped, as the SDKs do, and the
// signature covers the escaped form.
func Format(resourceURI, keyName, key string, expires time.Time) string {
	sr := url.QueryEscape(resourceURI)
	se := strconv.FormatInt(expires.Unix(), 10)
	return Prefix + "sr=" + sr + "&sig=" + url.QueryEscape(Sign(key, sr, se)) + "&se=" + se + "&skn=" + url.QueryEscape(keyName)
}

// SignedBy reports whether one of keys (empty ones skipped) signed t. The SDKs
// query-escape sig; a path-escaped or raw base64 sig is accepted too (a raw '+'
// would become a space under query unescaping).
func (t Token) SignedBy(keys ...string) bool {
	sigs := []string{t.Signature}
	if u, err := url.QueryUnescape(t.Signature); err == nil && u != t.Signature {
		sigs = append(sigs, u)
	}
	if u, err := url.PathUnescape(t.Signature); err == nil && u != t.Signature {
		sigs = append(sigs, u)
	}
	ok := false
	for _, k := range keys {
		if k == "" {
			continue
		}
		want := []byte(Sign(k, t.Resource, t.Expiry))
		for _, sig := range sigs {
			if hmac.Equal(want, []byte(sig)) { // no early exit: timing does not tell which key
				ok = true
			}
		}
	}
	return ok
}

// Expired reports whether t is past its expiry at now (a token is valid
// through the second it names).
func (t Token) Expired(now time.Time) bool { return now.Unix() > t.Expires.Unix() }

// Covers reports whether t's resource covers path (see the package comment).
func (t Token) Covers(path string) bool { return Covers(t.Path, path) }

// ResourcePath returns the entity path a resource URI names: URL-decoded,
// without scheme, host and query, lower-case, without surrounding slashes.
// "https%3a%2f%2fns%2fQ1%3fapi-version%3d1" and "amqps://ns/q1/" both give
// "q1"; a bare host (a namespace-wide token) gives "".
func ResourcePath(uri string) string {
	u, err := url.QueryUnescape(uri)
	if err != nil {
		u = uri
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

// Covers reports whether a grant for prefix (a lower-case path as
// ResourcePath returns, "" = the namespace) covers path: prefix is path or a
// segment-aligned prefix of it, case-insensitively. Surrounding slashes of
// path are ignored.
func Covers(prefix, path string) bool {
	if prefix == "" {
		return true
	}
	p := strings.ToLower(strings.Trim(path, "/"))
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// Rights are the claims a shared access rule grants.
type Rights uint8

// Rights bits, as Service Bus names them.
const (
	Send Rights = 1 << iota
	Listen
	Manage
)

// Has reports whether r grants all of want. Manage implies Send and Listen,
// as in Service Bus (a Manage rule always carries both).
func (r Rights) Has(want Rights) bool {
	if r&Manage != 0 {
		return true
	}
	return r&want == want
}

// String names the rights: "Send,Listen,Manage".
func (r Rights) String() string {
	var names []string
	for _, x := range []struct {
		r Rights
		n string
	}{{Send, "Send"}, {Listen, "Listen"}, {Manage, "Manage"}} {
		if r&x.r != 0 {
			names = append(names, x.n)
		}
	}
	return strings.Join(names, ",")
}

// Rule is a shared access authorization rule: a namespace key (Scope "") or
// an entity's rule (Scope the entity's lower-case path, which the rule's
// tokens may not leave).
type Rule struct {
	Name         string
	PrimaryKey   string
	SecondaryKey string
	Rights       Rights
	Scope        string
}

// Claim is what a checked token grants until it expires.
type Claim struct {
	Path    string // lower-case path prefix ("" = the namespace)
	Rights  Rights
	Expires time.Time
	KeyName string // the rule that signed it, for re-checks after key changes
	Scope   string // the rule's scope
}

// Allows reports whether c grants want on path at now.
func (c Claim) Allows(path string, want Rights, now time.Time) bool {
	return !now.After(c.Expires) && c.Rights.Has(want) && Covers(c.Path, path)
}

// Reasons Check refuses a token, in the order it checks them.
var (
	ErrInvalidSignature = errors.New("sas: invalid signature")
	ErrExpired          = errors.New("sas: token expired")
	ErrOutOfScope       = errors.New("sas: the rule does not cover the token's resource")
)

// Check verifies t against rule at now: the signature (primary or secondary
// key), the rule's scope and the expiry. It returns the claim t grants; the
// caller then checks that the claim covers what the request addresses
// (Token.Covers), since each protocol names that differently.
func Check(t Token, rule Rule, now time.Time) (Claim, error) {
	if !t.SignedBy(rule.PrimaryKey, rule.SecondaryKey) {
		return Claim{}, ErrInvalidSignature
	}
	if !Covers(rule.Scope, t.Path) {
		return Claim{}, ErrOutOfScope
	}
	if t.Expired(now) {
		return Claim{}, ErrExpired
	}
	return Claim{Path: t.Path, Rights: rule.Rights, Expires: t.Expires, KeyName: rule.Name, Scope: rule.Scope}, nil
}
