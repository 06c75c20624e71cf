package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// dialAnon opens a connection without SASL credentials: entity links then
// need a token put on $cbs.
func dialAnon(t *testing.T, addr string) *goamqp.Conn {
	t.Helper()
	c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cbsClient puts tokens on $cbs over one request/response link pair, as the SDKs do.
type cbsClient struct {
	snd *goamqp.Sender
	rcv *goamqp.Receiver
	n   int
}

func newCBS(t *testing.T, s *goamqp.Session) *cbsClient {
	t.Helper()
	snd, err := s.NewSender(ctxT(t), "$cbs", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctxT(t), "$cbs", &goamqp.ReceiverOptions{TargetAddress: "cbs-reply"})
	if err != nil {
		t.Fatal(err)
	}
	return &cbsClient{snd: snd, rcv: rcv}
}

// put sends put-token and returns the response's statusCode.
func (cc *cbsClient) put(t *testing.T, audience, token string) int32 {
	t.Helper()
	cc.n++
	id := fmt.Sprint(cc.n)
	err := cc.snd.Send(ctxT(t), &goamqp.Message{
		Properties: &goamqp.MessageProperties{MessageID: id, ReplyTo: ptrTo("cbs-reply")},
		ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken",
			"name": audience},
		Value: token,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cc.rcv.Receive(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = cc.rcv.AcceptMessage(ctxT(t), m)
	code, _ := m.ApplicationProperties["statusCode"].(int32)
	return code
}

// wantUnauthorizedDetach reports nil once err is a link error from the server
// with amqp:unauthorized-access and a TrackingId.
func wantUnauthorizedDetach(err error) error {
	var le *goamqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil {
		return fmt.Errorf("not detached by the server yet: %v", err)
	}
	if le.RemoteErr.Condition != goamqp.ErrCondUnauthorizedAccess || !strings.Contains(le.RemoteErr.Description, "TrackingId:") {
		return testutil.Permanent(fmt.Errorf("detached with %v", le.RemoteErr))
	}
	return nil
}

// authedLinks opens an anonymous connection, puts a token for q1 signed by
// keyName/key, and attaches a sender to and a receiver from q1.
func authedLinks(t *testing.T, addr, keyName, key string, exp time.Time) (*cbsClient, *goamqp.Sender, *goamqp.Receiver) {
	t.Helper()
	s, err := dialAnon(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	cbs := newCBS(t, s)
	aud := "amqp://" + addr + "/q1"
	if code := cbs.put(t, aud, sign(aud, keyName, key, exp)); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	snd, err := s.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctxT(t), "q1", &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return cbs, snd, rcv
}

// waitChecks waits until every connection had its claims checked at least
// twice more: whatever the clock says now has been acted on.
func waitChecks(t *testing.T, s *Server) {
	t.Helper()
	s.mu.Lock()
	n := uint64(len(s.conns))
	s.mu.Unlock()
	start := s.authChecks.Load()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s.authChecks.Load() < start+2*(n+1) {
			return errors.New("auth checks have not run yet")
		}
		return nil
	})
}

// TestExpiredTokenDetachesLinks: when a token expires without renewal, the
// links it authorized are detached with amqp:unauthorized-access, as Service
// Bus does; a put-token before expiry keeps them (before the fix send and receive
// worked 75 s after expiry). The server's clock is a manual one.
func TestExpiredTokenDetachesLinks(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	srv, _, addr := testServer(t, func(c *Config) { c.Clock = clk; c.AuthCheckInterval = 10 * time.Millisecond })
	cbs, snd, rcv := authedLinks(t, addr, "RootManageSharedAccessKey", "secret-key", clk.Now().Add(60*time.Second))

	// Renew at 30 s for another 60 s, then pass the first token's expiry.
	clk.Advance(30 * time.Second)
	aud := "amqp://" + addr + "/q1"
	if code := cbs.put(t, aud, sign(aud, "RootManageSharedAccessKey", "secret-key", clk.Now().Add(60*time.Second))); code != 202 {
		t.Fatalf("renewal: %d", code)
	}
	clk.Advance(40 * time.Second)
	waitChecks(t, srv)
	if err := snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("renewed")}}, nil); err != nil {
		t.Fatalf("send after renewal: %v", err)
	}
	if m, err := rcv.Receive(ctxT(t), nil); err != nil || string(m.GetData()) != "renewed" {
		t.Fatalf("receive after renewal: %v", err)
	} else {
		_ = rcv.AcceptMessage(ctxT(t), m)
	}

	// Past the renewed token's expiry both links are detached.
	clk.Advance(25 * time.Second)
	testutil.WaitFor(t, 10*time.Second, func() error {
		return wantUnauthorizedDetach(snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("late")}}, nil))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for err == nil { // messages sent before the detach may still arrive
		_, err = rcv.Receive(ctx, nil)
	}
	if err := wantUnauthorizedDetach(err); err != nil {
		t.Fatal(err)
	}
	checkHealthy(t, addr)
}

// TestRemovedRuleDetachesLinks: removing a shared access rule, or changing the
// key that signed a token, detaches the links the token authorized within
// ClaimRecheckInterval; changing the other key of the rule does not (key
// rotation, docs/security.md).
func TestRemovedRuleDetachesLinks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		entity bool // an entity-level rule on q1 instead of a namespace key
		change func(k *SASKey) bool
	}{
		{"namespace key removed", false, func(*SASKey) bool { return false }},
		{"entity rule removed", true, func(*SASKey) bool { return false }},
		{"signing key regenerated", false, func(k *SASKey) bool { k.Key = "new-primary"; return true }},
		{"rule lost Send", true, func(k *SASKey) bool { k.Rights = RightListen; return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, b, addr := testServer(t, func(c *Config) {
				c.AuthCheckInterval = 10 * time.Millisecond
				c.ClaimRecheckInterval = 20 * time.Millisecond
			})
			key := SASKey{Name: "app", Key: "primary", SecondaryKey: "secondary", Rights: RightSend | RightListen}
			set := func(k *SASKey) {
				b.mu.Lock()
				defer b.mu.Unlock()
				switch {
				case tc.entity && k == nil:
					delete(b.entityKeys["q1"], key.Name)
				case tc.entity:
					b.entityKeys["q1"] = map[string]SASKey{key.Name: *k}
				case k == nil:
					delete(b.keys, key.Name)
				default:
					b.keys[key.Name] = *k
				}
			}
			set(&key)
			_, snd, _ := authedLinks(t, addr, key.Name, key.Key, time.Now().Add(time.Hour))
			// Rotating the other key keeps the link.
			rotated := key
			rotated.SecondaryKey = "new-secondary"
			set(&rotated)
			waitChecks(t, srv)
			if err := snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("x")}}, nil); err != nil {
				t.Fatalf("send after the secondary key changed: %v", err)
			}
			if tc.change(&rotated) {
				set(&rotated)
			} else {
				set(nil)
			}
			testutil.WaitFor(t, 10*time.Second, func() error {
				return wantUnauthorizedDetach(snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("x")}}, nil))
			})
			checkHealthy(t, addr)
		})
	}
}

// TestUnauthenticatedLinkLimit: a connection without a claim may attach only
// MaxUnauthenticatedLinks links (before the fix a million $cbs links took one
// connection to 1 GB); once it put a token it may attach more, up to
// MaxLinksPerConnection, past which attaches are refused with
// amqp:resource-limit-exceeded while the connection keeps working.
func TestUnauthenticatedLinkLimit(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxUnauthenticatedLinks = 4; c.MaxLinksPerConnection = 10 })
	s, err := dialAnon(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	cbs := newCBS(t, s) // 2 links
	attach := func(i int) error {
		_, err := s.NewReceiver(ctxT(t), "$cbs", &goamqp.ReceiverOptions{TargetAddress: fmt.Sprint("reply-", i)})
		return err
	}
	for i := range 2 {
		if err := attach(i); err != nil {
			t.Fatalf("link %d: %v", i+3, err)
		}
	}
	err = attach(2)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondUnauthorizedAccess || !strings.Contains(ae.Description, "TrackingId:") {
		t.Fatalf("fifth link before a token: %v", err)
	}
	aud := "amqp://" + addr + "/q1"
	if code := cbs.put(t, aud, sign(aud, "RootManageSharedAccessKey", "secret-key", time.Now().Add(time.Hour))); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	for i := 2; i < 8; i++ {
		if err := attach(i); err != nil {
			t.Fatalf("link %d after the token: %v", i+3, err)
		}
	}
	err = attach(8)
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded || !strings.Contains(ae.Description, "TrackingId:") {
		t.Fatalf("link 11: %v", err)
	}
	// The connection still works: a put-token round trip on its first links.
	if code := cbs.put(t, aud, sign(aud, "RootManageSharedAccessKey", "secret-key", time.Now().Add(time.Hour))); code != 202 {
		t.Fatalf("put-token after the refusal: %d", code)
	}
}

// TestUnauthenticatedTimeout: a connection that never puts a token is closed
// UnauthenticatedTimeout after its open with amqp:unauthorized-access; an
// authenticated one stays.
func TestUnauthenticatedTimeout(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	srv, _, addr := testServer(t, func(c *Config) { c.Clock = clk; c.AuthCheckInterval = 10 * time.Millisecond })
	anon := dialAnon(t, addr)
	plain := dialPlain(t, addr)
	clk.Advance(59 * time.Second)
	waitChecks(t, srv)
	if _, err := anon.NewSession(ctxT(t), nil); err != nil {
		t.Fatalf("closed before the timeout: %v", err)
	}
	clk.Advance(2 * time.Second)
	select {
	case <-anon.Done():
	case <-ctxT(t).Done():
		t.Fatal("the unauthenticated connection is still open")
	}
	var ce *goamqp.ConnError
	if err := anon.Err(); !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondUnauthorizedAccess {
		t.Fatalf("closed with %v", err)
	}
	if _, err := plain.NewSession(ctxT(t), nil); err != nil {
		t.Fatalf("authenticated connection: %v", err)
	}
}

// TestMaxConnections: past MaxConnections a connection's open is answered with
// a close carrying amqp:resource-limit-exceeded, and once one closes a new one
// is served.
func TestMaxConnections(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxConnections = 3 })
	var conns []*goamqp.Conn
	for range 3 {
		conns = append(conns, dialPlain(t, addr))
	}
	refused := func() error {
		c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{
			SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "secret-key")})
		if err == nil {
			defer c.Close()
			select {
			case <-c.Done():
				err = c.Err()
			case <-ctxT(t).Done():
				return errors.New("the fourth connection was served")
			}
		}
		var ce *goamqp.ConnError
		if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded ||
			!strings.Contains(ce.RemoteErr.Description, "TrackingId:") {
			return fmt.Errorf("fourth connection: %v", err)
		}
		return nil
	}
	if err := refused(); err != nil {
		t.Fatal(err)
	}
	conns[0].Close()
	testutil.WaitFor(t, 10*time.Second, func() error {
		c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{
			SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "secret-key")})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.NewSession(ctxT(t), nil)
		return err
	})
	for _, c := range conns[1:] {
		if _, err := c.NewSession(ctxT(t), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPlainLoginWithEitherKey: SASL PLAIN accepts a rule's secondary key as well
// as its primary one, as put-token does, so clients can move keys during a
// rotation; a wrong key fails the SASL exchange.
func TestPlainLoginWithEitherKey(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.mu.Lock()
	b.keys["app"] = SASKey{Name: "app", Key: "primary", SecondaryKey: "secondary", Rights: RightSend}
	b.mu.Unlock()
	for key, ok := range map[string]bool{"primary": true, "secondary": true, "other": false, "": false} {
		c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("app", key)})
		if err == nil {
			_, err = c.NewSession(ctxT(t), nil)
			c.Close()
		}
		if (err == nil) != ok {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

// TestRemovedRuleDetachesPlainLogin: a connection that logged in with SASL
// PLAIN (key name and key) loses its links within ClaimRecheckInterval when
// the key is removed, regenerated or loses the right, as a token's links do;
// rotating the key it did not log in with keeps them.
func TestRemovedRuleDetachesPlainLogin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(k *SASKey) bool // false: remove the key
	}{
		{"key removed", func(*SASKey) bool { return false }},
		{"login key regenerated", func(k *SASKey) bool { k.Key = "new-primary"; return true }},
		{"key lost Send", func(k *SASKey) bool { k.Rights = RightListen; return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, b, addr := testServer(t, func(c *Config) {
				c.AuthCheckInterval = 10 * time.Millisecond
				c.ClaimRecheckInterval = 20 * time.Millisecond
			})
			key := SASKey{Name: "app", Key: "primary", SecondaryKey: "secondary", Rights: RightSend | RightListen}
			set := func(k *SASKey) {
				b.mu.Lock()
				defer b.mu.Unlock()
				if k == nil {
					delete(b.keys, key.Name)
				} else {
					b.keys[key.Name] = *k
				}
			}
			set(&key)
			c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(key.Name, key.Key)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			s, err := c.NewSession(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			snd, err := s.NewSender(ctxT(t), "q1", nil)
			if err != nil {
				t.Fatal(err)
			}
			rotated := key
			rotated.SecondaryKey = "new-secondary"
			set(&rotated)
			waitChecks(t, srv)
			if err := snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("x")}}, nil); err != nil {
				t.Fatalf("send after the other key changed: %v", err)
			}
			if tc.change(&rotated) {
				set(&rotated)
			} else {
				set(nil)
			}
			testutil.WaitFor(t, 10*time.Second, func() error {
				return wantUnauthorizedDetach(snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("x")}}, nil))
			})
			// A new link is refused too: the login no longer grants Send.
			snd2, err := s.NewSender(ctxT(t), "q1", nil)
			if err == nil {
				err = snd2.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("x")}}, nil)
			}
			var ae *goamqp.Error
			if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondUnauthorizedAccess {
				t.Fatalf("new sender after the change: %v", err)
			}
			checkHealthy(t, addr)
		})
	}
}
