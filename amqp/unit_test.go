package amqp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := DefaultConfig()
	bad.MaxFrameSize = 100
	bad.LinkCredit = 0
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxFrameSize") || !strings.Contains(err.Error(), "LinkCredit") {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := New(bad, newMemBackend()); err == nil {
		t.Fatal("New accepted an invalid config")
	}
}

// TestErrorTable: each sentinel maps to the condition and status the SDK
// needs (protocol.md §9), also when wrapped; descriptions carry a TrackingId.
func TestErrorTable(t *testing.T) {
	cases := []struct {
		err    error
		cond   string
		status int32
	}{
		{ErrLockLost, "com.microsoft:message-lock-lost", 410},
		{ErrSessionLockLost, "com.microsoft:session-lock-lost", 410},
		{ErrSessionCannotBeLocked, "com.microsoft:session-cannot-be-locked", 409},
		{ErrNotFound, "amqp:not-found", 404},
		{ErrUnauthorized, "amqp:unauthorized-access", 401},
		{ErrQuotaExceeded, "amqp:resource-limit-exceeded", 403},
		{ErrMessageTooLarge, "amqp:link:message-size-exceeded", 413},
		{ErrEntityDisabled, "com.microsoft:entity-disabled", 400},
		{ErrTimeout, "com.microsoft:timeout", 408},
		{ErrServerBusy, "com.microsoft:server-busy", 503},
		{ErrNotAllowed, "amqp:not-allowed", 400},
		{fmt.Errorf("partition 3: %w", ErrLockLost), "com.microsoft:message-lock-lost", 410},
		{errors.New("boom"), "amqp:internal-error", 500},
	}
	for _, c := range cases {
		cond, status := classify(c.err)
		if cond != c.cond || status != c.status {
			t.Errorf("%v: got %s %d, want %s %d", c.err, cond, status, c.cond, c.status)
		}
	}
	e := amqpError(ErrLockLost, "ns:queue:q1", time.Unix(0, 0))
	if !strings.Contains(e.Description, "TrackingId:") || !strings.Contains(e.Description, "SystemTracker:ns:queue:q1") ||
		!strings.Contains(e.Description, "Timestamp:1970-01-01T00:00:00") {
		t.Fatalf("description %q", e.Description)
	}
}

// sign builds a token exactly as the SDK does (sas.go: SignWithExpiry).
func sign(audience, keyName, key string, exp time.Time) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := fmt.Sprint(exp.Unix())
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", sr, sig, se, keyName)
}

// TestPutToken covers SAS validation (protocol.md §3).
func TestPutToken(t *testing.T) {
	s, _, _ := testServer(t, nil)
	c := newConn(s, fakeAddrConn{})
	c.hostname = "127.0.0.1:5672"
	future := time.Now().Add(time.Hour)
	req := func(aud, token string) *rpcRequest {
		return &rpcRequest{operation: "put-token", body: token, props: Map{
			{Key: "operation", Value: "put-token"}, {Key: "type", Value: "servicebus.windows.net:sastoken"}, {Key: "name", Value: aud}}}
	}
	aud := "amqp://127.0.0.1:5672/Q1"
	cases := []struct {
		name   string
		r      *rpcRequest
		status int32
		path   string
	}{
		{"valid", req(aud, sign(aud, "RootManageSharedAccessKey", "secret-key", future)), 202, "q1"},
		{"management audience", req(aud+"/$management", sign(aud+"/$management", "RootManageSharedAccessKey", "secret-key", future)), 202, "q1/$management"},
		{"namespace-wide token", req(aud, sign("127.0.0.1:5672", "RootManageSharedAccessKey", "secret-key", future)), 202, ""},
		{"expired", req(aud, sign(aud, "RootManageSharedAccessKey", "secret-key", time.Now().Add(-time.Minute))), 401, ""},
		{"wrong key", req(aud, sign(aud, "RootManageSharedAccessKey", "nope", future)), 401, ""},
		{"unknown key name", req(aud, sign(aud, "ghost", "secret-key", future)), 401, ""},
		{"token for another entity", req(aud, sign("amqp://127.0.0.1:5672/other", "RootManageSharedAccessKey", "secret-key", future)), 401, ""},
		{"missing entity", req("amqp://127.0.0.1:5672/nope", sign("amqp://127.0.0.1:5672/nope", "RootManageSharedAccessKey", "secret-key", future)), 404, ""},
		{"not a SAS token", req(aud, "Bearer x"), 401, ""},
		// A Listen-only key gets a token for a missing entity: the attach then answers
		// unauthorized for Send before not-found, as Service Bus does.
		{"missing entity, limited key", req("amqp://127.0.0.1:5672/nope", sign("amqp://127.0.0.1:5672/nope", "listen", "listen-key", future)), 202, "nope"},
	}
	for _, tc := range cases {
		resp, cl := c.putToken(context.Background(), tc.r)
		if resp.status != tc.status {
			t.Errorf("%s: status %d (%s), want %d", tc.name, resp.status, resp.desc, tc.status)
			continue
		}
		if tc.status == 202 && (cl == nil || cl.path != tc.path) {
			t.Errorf("%s: claim %+v, want path %q", tc.name, cl, tc.path)
		}
		if tc.status != 202 && !strings.Contains(resp.desc, "TrackingId:") {
			t.Errorf("%s: description without TrackingId: %q", tc.name, resp.desc)
		}
	}
}

// TestClaimPrefix: claims cover their path and everything below it, by segment.
func TestClaimPrefix(t *testing.T) {
	s, _, _ := testServer(t, nil)
	c := newConn(s, fakeAddrConn{})
	c.claims = []claim{{path: "q1", rights: RightListen, expires: time.Now().Add(time.Hour)}}
	for path, want := range map[string]bool{
		"q1": true, "Q1/$DeadLetterQueue": true, "q1/$management": true, "q10": false, "q": false,
	} {
		if got := c.hasClaim(path, RightListen); got != want {
			t.Errorf("%s: %v", path, got)
		}
	}
	if c.hasClaim("q1", RightSend) {
		t.Error("listen claim allowed send")
	}
}

// fakeAddrConn is a net.Conn placeholder for conn values built in unit tests
// (only RemoteAddr is used).
type fakeAddrConn struct{ net.Conn }

func (fakeAddrConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
