package sas

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

var now = time.Unix(1_800_000_000, 0)

// sdkToken builds a token as the Go SDK does (azservicebus internal/sas):
// the resource lower-cased and query-escaped, the signature query-escaped.
func sdkToken(uri, skn, key string, exp time.Time) string {
	sr := strings.ToLower(url.QueryEscape(uri))
	se := strconv.FormatInt(exp.Unix(), 10)
	return "SharedAccessSignature sr=" + sr + "&sig=" + url.QueryEscape(Sign(key, sr, se)) + "&se=" + se + "&skn=" + skn
}

func TestParse(t *testing.T) {
	later := now.Add(time.Hour)
	for _, tc := range []struct {
		name, token string
		err         error
		path        string
	}{
		{"sdk amqps", sdkToken("amqps://ns.example/Q1", "k", "s", later), nil, "q1"},
		{"sdk sb", sdkToken("sb://ns.example/q1/$management", "k", "s", later), nil, "q1/$management"},
		{"admin https with query", sdkToken("https://ns:443/T1/Subscriptions/S1?api-version=2021-05", "k", "s", later), nil, "t1/subscriptions/s1"},
		{"namespace-wide", sdkToken("sb://ns.example", "k", "s", later), nil, ""},
		{"bare host", sdkToken("127.0.0.1:5672", "k", "s", later), nil, ""},
		{"unescaped sr", "SharedAccessSignature sr=amqp://h/Q1&sig=x&se=1&skn=k", nil, "q1"},
		{"fields in any order and case", "sharedaccesssignature SKN=k&SE=1&Sig=x&SR=sb%3a%2f%2fh%2fq1", nil, "q1"},
		{"escaped path segment", "SharedAccessSignature sr=sb%3a%2f%2fns%2f%2524resources&sig=x&se=1&skn=k", nil, "$resources"},
		{"bearer", "Bearer abc", ErrNotSAS, ""},
		{"empty", "", ErrNotSAS, ""},
		{"no skn", "SharedAccessSignature sr=a&sig=b&se=1", ErrMissingField, ""},
		{"empty sig", "SharedAccessSignature sr=a&sig=&se=1&skn=k", ErrMissingField, ""},
		{"se not a number", "SharedAccessSignature sr=a&sig=b&se=soon&skn=k", ErrBadExpiry, ""},
		{"bad escape", "SharedAccessSignature sr=a%zz&sig=b&se=1&skn=k", ErrBadEncoding, ""},
		{"too long", "SharedAccessSignature sr=" + strings.Repeat("a", 9000) + "&sig=b&se=1&skn=k", ErrTooLong, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Parse(tc.token)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err == nil && tok.Path != tc.path {
				t.Fatalf("path %q, want %q", tok.Path, tc.path)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	later := now.Add(time.Hour)
	ns := Rule{Name: "root", PrimaryKey: "p1", SecondaryKey: "s1", Rights: Manage}
	q1 := Rule{Name: "q1rule", PrimaryKey: "qp", Rights: Send, Scope: "q1"}
	for _, tc := range []struct {
		name  string
		token string
		rule  Rule
		err   error
	}{
		{"primary key", sdkToken("sb://h/q1", "root", "p1", later), ns, nil},
		{"secondary key", sdkToken("sb://h/q1", "root", "s1", later), ns, nil},
		{"wrong key", sdkToken("sb://h/q1", "root", "nope", later), ns, ErrInvalidSignature},
		{"no secondary key set", sdkToken("sb://h/q1", "root", "", later), Rule{Name: "root", PrimaryKey: "p1"}, ErrInvalidSignature},
		{"expired", sdkToken("sb://h/q1", "root", "p1", now.Add(-time.Second)), ns, ErrExpired},
		{"expires this second", sdkToken("sb://h/q1", "root", "p1", now), ns, nil},
		{"entity rule on its entity", sdkToken("amqps://h/Q1", "q1rule", "qp", later), q1, nil},
		{"entity rule below its entity", sdkToken("amqps://h/q1/$management", "q1rule", "qp", later), q1, nil},
		{"entity rule on another entity", sdkToken("amqps://h/q10", "q1rule", "qp", later), q1, ErrOutOfScope},
		{"entity rule namespace-wide", sdkToken("amqps://h", "q1rule", "qp", later), q1, ErrOutOfScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Parse(tc.token)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := Check(tok, tc.rule, now)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err == nil && (cl.Rights != tc.rule.Rights || !cl.Expires.Equal(tok.Expires) || cl.KeyName != tc.rule.Name) {
				t.Fatalf("claim %+v", cl)
			}
		})
	}
}

func TestSignatureEncodings(t *testing.T) {
	sr, se := url.QueryEscape("sb://h/q1"), "1900000000"
	raw := Sign("k", sr, se)
	for _, sig := range []string{raw, url.QueryEscape(raw), url.PathEscape(raw)} {
		tok, err := Parse("SharedAccessSignature sr=" + sr + "&sig=" + sig + "&se=" + se + "&skn=n")
		if err != nil || !tok.SignedBy("other", "k") {
			t.Errorf("sig %q not accepted (%v)", sig, err)
		}
	}
	// The signature covers sr as sent: re-encoding it breaks the signature.
	tok, _ := Parse("SharedAccessSignature sr=sb://h/q1&sig=" + url.QueryEscape(raw) + "&se=" + se + "&skn=n")
	if tok.SignedBy("k") {
		t.Error("signature accepted for a differently encoded sr")
	}
}

func TestCoversAndClaims(t *testing.T) {
	for _, tc := range []struct {
		prefix, path string
		want         bool
	}{
		{"", "/anything", true},
		{"t", "/T/Subscriptions/s", true},
		{"q1", "q1/$DeadLetterQueue", true},
		{"q1", "Q1", true},
		{"t", "/t2", false},
		{"q", "q1", false},
		{"a/b", "/a", false},
	} {
		if got := Covers(tc.prefix, tc.path); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v", tc.prefix, tc.path, got)
		}
	}
	cl := Claim{Path: "q1", Rights: Listen, Expires: now}
	if !cl.Allows("q1/$management", Listen, now) || cl.Allows("q1", Send, now) || cl.Allows("q1", Listen, now.Add(time.Second)) {
		t.Error("Claim.Allows")
	}
	if !Manage.Has(Send|Listen) || Send.Has(Listen) || (Send|Listen).String() != "Send,Listen" {
		t.Error("Rights")
	}
}

func TestFormatRoundTrip(t *testing.T) {
	s := Format("amqps://ns/Q1", "rule", "key", now)
	tok, err := Parse(s)
	if err != nil || tok.Path != "q1" || !tok.SignedBy("key") || !tok.Expires.Equal(now) || tok.KeyName != "rule" {
		t.Fatalf("%+v %v", tok, err)
	}
}

// FuzzParse: Parse never panics, and what it accepts is self-consistent: the
// path is normalized, covers itself, and the token checks against the key that
// signed it exactly when the signature matches.
func FuzzParse(f *testing.F) {
	f.Add(sdkToken("amqps://ns/q1", "k", "s", now))
	f.Add(sdkToken("https://ns/T/Subscriptions/S?api-version=1", "k", "s", now))
	f.Add("SharedAccessSignature sr=a%zz&sig=b&se=1&skn=k")
	f.Add("sharedaccesssignature sr=&&&=&sig==&se=-1&skn=k")
	f.Add("SharedAccessSignature sr=%2525&sig=%2B&se=99999999999999999999&skn=k")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			if tok != (Token{}) {
				t.Fatalf("error %v with a non-zero token", err)
			}
			return
		}
		if tok.Path != strings.ToLower(tok.Path) || strings.HasPrefix(tok.Path, "/") || strings.HasSuffix(tok.Path, "/") {
			t.Fatalf("path %q not normalized", tok.Path)
		}
		if !tok.Covers(tok.Path) || !tok.Covers(strings.ToUpper(tok.Path)+"/x") {
			t.Fatalf("path %q does not cover itself", tok.Path)
		}
		re := Token{Resource: tok.Resource, Signature: Sign("key", tok.Resource, tok.Expiry), Expiry: tok.Expiry}
		if !re.SignedBy("key") || re.SignedBy("other") {
			t.Fatal("signature check")
		}
		_, err = Check(tok, Rule{Name: tok.KeyName, PrimaryKey: "key"}, now)
		if err == nil && !tok.SignedBy("key") {
			t.Fatal("Check accepted an unsigned token")
		}
	})
}
