package bridge

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Every AMQP simple type an application property may carry comes back with its type.
func TestValuesRoundTrip(t *testing.T) {
	for _, v := range []any{nil, true, false, uint8(7), uint16(7), uint32(7), uint64(math.MaxUint64),
		int8(-7), int16(-7), int32(-7), int64(math.MinInt64), float32(1.5), 2.25, amqp.Char('é'),
		amqp.Timestamp(1_700_000_000_123), amqp.UUID{1, 2, 3, 15: 16}, []byte{0, 1, 2}, "text",
		amqp.Symbol("sym"), amqp.Decimal32{1, 2, 3, 4}, amqp.Decimal64{7: 3}, amqp.Decimal128{15: 9}} {
		if got := fromValue(toValue(v)); !reflect.DeepEqual(got, v) {
			t.Errorf("%T %v came back as %T %v", v, v, got, got)
		}
	}
}

func startBackend(t *testing.T) (*Backend, *cluster.Node) {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ClusterAddr = "127.0.0.1:0"
	cfg.Raft = cluster.RaftConfig{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return New(n), n
}

// The backend speaks amqp's vocabulary over a real node: entity lookup, send with typed
// properties, peek-lock receive, a settlement batch with one stale token (S-LOCK-9: only
// that one fails, as lock-lost), and not-found for a missing entity.
func TestBackendOverANode(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "q1", Properties: meta.DefaultQueueProperties()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Entity(ctx, "nope"); !errors.Is(err, amqp.ErrNotFound) {
		t.Fatalf("missing entity: %v", err)
	}
	info, err := b.Entity(ctx, "Q1")
	if err != nil || info.Kind != amqp.KindQueue || info.Path != "q1" || info.MaxMessageSize != 256<<10 {
		t.Fatalf("entity: %+v %v", info, err)
	}
	var msgs []*amqp.Message
	for i := 0; i < 3; i++ {
		msgs = append(msgs, &amqp.Message{Raw: []byte{byte(i)}, MessageID: "m", Subject: "s",
			ApplicationProperties: []amqp.Property{{Key: "n", Value: int32(i)}}})
	}
	if err := b.Send(ctx, "q1", msgs); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: "q1"}, Max: 3, Wait: time.Second})
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive: %d %v", len(ds), err)
	}
	for i, d := range ds {
		if d.SequenceNumber != int64(i+1) || d.DeliveryCount != 1 || d.LockedUntil.IsZero() || d.Message.Raw[0] != byte(i) {
			t.Errorf("delivery %d: %+v", i, d)
		}
	}
	stale := ds[0].LockToken
	stale[15] ^= 0xff
	errs := b.Settle(ctx, []amqp.Settlement{
		{Address: amqp.Address{Entity: "q1"}, LockToken: ds[0].LockToken, Disposition: amqp.Complete},
		{Address: amqp.Address{Entity: "q1"}, LockToken: stale, Disposition: amqp.Complete},
		{Address: amqp.Address{Entity: "q1"}, LockToken: ds[1].LockToken, Disposition: amqp.Complete},
		{Address: amqp.Address{Entity: "q1"}, LockToken: ds[2].LockToken, Disposition: amqp.DeadLetter, DeadLetterReason: "r"},
	})
	if errs[0] != nil || !errors.Is(errs[1], amqp.ErrLockLost) || errs[2] != nil || errs[3] != nil {
		t.Fatalf("settle errors: %v", errs)
	}
	dl, err := b.Peek(ctx, amqp.Address{Entity: "q1", Sub: amqp.SubQueueDeadLetter}, "", 0, 10)
	if err != nil || len(dl) != 1 || !dl[0].DeadLettered || dl[0].DeadLetterReason != "r" {
		t.Fatalf("dead-letter queue: %+v %v", dl, err)
	}
}

// S-SES-2: a session locked through the backend is held by the connection that
// accepted it (amqp.ConnectionID): another connection can neither accept it, receive
// from it, settle its messages, renew it, set its state nor release it (a release by a
// non-holder is harmless); the holder can, and its release frees the session.
func TestBackendSessions(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := meta.DefaultQueueProperties()
	p.RequiresSession = true
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "sq", Properties: p}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, "sq", []*amqp.Message{{Raw: []byte("x"), SessionID: "s1"}}); err != nil {
		t.Fatal(err)
	}
	connA, connB := amqp.WithConnectionID(ctx, "conn-a"), amqp.WithConnectionID(ctx, "conn-b")
	addr := amqp.Address{Entity: "sq"}
	id, until, err := b.AcceptSession(connA, addr, "", time.Second)
	if err != nil || id != "s1" || until.IsZero() {
		t.Fatalf("accept next: %q %v %v", id, until, err)
	}
	for _, c := range []context.Context{connB, ctx} { // another connection; no connection
		if _, _, err := b.AcceptSession(c, addr, "s1", 0); !errors.Is(err, amqp.ErrSessionCannotBeLocked) {
			t.Fatalf("second accept: %v", err)
		}
	}
	ds, err := b.Receive(connA, amqp.ReceiveRequest{Address: addr, SessionID: "s1", Max: 1, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("holder receive: %d %v", len(ds), err)
	}
	tok := ds[0].LockToken

	// Connection B, and a call without a connection, act on A's session in vain.
	for _, c := range []context.Context{connB, ctx} {
		if _, err := b.Receive(c, amqp.ReceiveRequest{Address: addr, SessionID: "s1", Max: 1}); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("non-holder receive: %v", err)
		}
		for _, sid := range []string{"s1", ""} {
			errs := b.Settle(c, []amqp.Settlement{{Address: addr, SessionID: sid, LockToken: tok, Disposition: amqp.Complete}})
			if !errors.Is(errs[0], amqp.ErrSessionLockLost) {
				t.Errorf("non-holder settle (session %q): %v", sid, errs[0])
			}
		}
		if _, err := b.RenewSessionLock(c, addr, "s1"); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("non-holder renew: %v", err)
		}
		if err := b.SetSessionState(c, addr, "s1", []byte("B")); !errors.Is(err, amqp.ErrSessionLockLost) {
			t.Errorf("non-holder set state: %v", err)
		}
		if err := b.ReleaseSession(c, addr, "s1"); err != nil {
			t.Errorf("non-holder release: %v, want a harmless no-op", err)
		}
	}
	if _, _, err := b.AcceptSession(connB, addr, "s1", 0); !errors.Is(err, amqp.ErrSessionCannotBeLocked) {
		t.Fatalf("accept after a non-holder's release: %v (the release freed A's session)", err)
	}

	// The holder still can.
	if _, err := b.RenewSessionLock(connA, addr, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetSessionState(connA, addr, "s1", []byte("st")); err != nil {
		t.Fatal(err)
	}
	if st, err := b.SessionState(connA, addr, "s1"); err != nil || string(st) != "st" {
		t.Fatalf("state %q %v", st, err)
	}
	if errs := b.Settle(connA, []amqp.Settlement{{Address: addr, SessionID: "s1", LockToken: tok, Disposition: amqp.Complete}}); errs[0] != nil {
		t.Fatalf("holder settle: %v", errs[0])
	}
	if err := b.ReleaseSession(connA, addr, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.AcceptSession(connB, addr, "s1", 0); err != nil {
		t.Fatalf("accept after release: %v", err)
	}
	if _, _, err := b.AcceptSession(connA, addr, "", 200*time.Millisecond); !errors.Is(err, amqp.ErrTimeout) {
		t.Fatalf("accept next with none free: %v", err)
	}
}

// S-TOP-1: a rule action that SETs a system property and an application property changes
// the copy that enters that subscription, on the wire; another subscription's copy keeps
// the sender's bytes.
func TestActionChangesTheDeliveredCopy(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Store().Apply(ctx, &meta.CreateTopic{Name: "t", Properties: meta.DefaultTopicProperties()}); err != nil {
		t.Fatal(err)
	}
	set := rule.Spec{Name: "set", Filter: rule.FilterSpec{Kind: rule.FilterTrue},
		Action: rule.ActionSpec{SQL: "SET sys.Label = 'changed'; SET tag = 'yes'"}}
	for _, c := range []meta.Command{
		&meta.CreateSubscription{Topic: "t", Name: "acted", Properties: meta.DefaultSubscriptionProperties(), Rules: []rule.Spec{set}},
		&meta.CreateSubscription{Topic: "t", Name: "plain", Properties: meta.DefaultSubscriptionProperties()},
	} {
		if err := n.Store().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	subject := "orig"
	raw, err := (&goamqp.Message{Data: [][]byte{[]byte("body")}, Properties: &goamqp.MessageProperties{Subject: &subject},
		ApplicationProperties: map[string]any{"keep": int64(7)}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, "t", []*amqp.Message{{Raw: raw, Subject: subject,
		ApplicationProperties: []amqp.Property{{Key: "keep", Value: int64(7)}}}}); err != nil {
		t.Fatal(err)
	}
	got := func(sub string) *goamqp.Message {
		ds, err := b.Receive(ctx, amqp.ReceiveRequest{Address: amqp.Address{Entity: "t/Subscriptions/" + sub},
			Mode: amqp.ReceiveAndDelete, Max: 1, Wait: time.Second})
		if err != nil || len(ds) != 1 {
			t.Fatalf("%s: %d %v", sub, len(ds), err)
		}
		var m goamqp.Message
		if err := m.UnmarshalBinary(ds[0].Message.Raw); err != nil {
			t.Fatalf("%s: the delivered bytes do not decode: %v", sub, err)
		}
		return &m
	}
	acted := got("acted")
	if *acted.Properties.Subject != "changed" || acted.ApplicationProperties["tag"] != "yes" ||
		acted.ApplicationProperties["keep"] != int64(7) || string(acted.Data[0]) != "body" {
		t.Errorf("acted copy: subject %q props %v body %q", *acted.Properties.Subject, acted.ApplicationProperties, acted.Data)
	}
	plain := got("plain")
	if *plain.Properties.Subject != "orig" || len(plain.ApplicationProperties) != 1 {
		t.Errorf("plain copy changed: subject %q props %v", *plain.Properties.Subject, plain.ApplicationProperties)
	}
}

// Entity-level authorization rules authorize their own entity (a subscription path uses
// its topic's rules); other names are not found.
func TestEntityKeys(t *testing.T) {
	b, n := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qp := meta.DefaultQueueProperties()
	qp.AuthorizationRules = []meta.SASKey{{Name: "listener", PrimaryKey: "p", SecondaryKey: "s", Rights: meta.RightListen}}
	tp := meta.DefaultTopicProperties()
	tp.AuthorizationRules = []meta.SASKey{{Name: "sender", PrimaryKey: "t", Rights: meta.RightSend}}
	for _, c := range []meta.Command{&meta.CreateQueue{Name: "q", Properties: qp}, &meta.CreateTopic{Name: "t", Properties: tp}} {
		if err := n.Store().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	k, err := b.EntitySASKey(ctx, "q", "listener")
	if err != nil || k.Key != "p" || k.SecondaryKey != "s" || !k.Rights.Has(amqp.RightListen) || k.Rights.Has(amqp.RightSend) {
		t.Fatalf("queue rule: %+v %v", k, err)
	}
	if k, err := b.EntitySASKey(ctx, "t/Subscriptions/any", "sender"); err != nil || !k.Rights.Has(amqp.RightSend) {
		t.Fatalf("topic rule through a subscription path: %+v %v", k, err)
	}
	for _, c := range [][2]string{{"q", "sender"}, {"t", "listener"}, {"missing", "listener"}} {
		if _, err := b.EntitySASKey(ctx, c[0], c[1]); !errors.Is(err, amqp.ErrNotFound) {
			t.Errorf("EntitySASKey(%q, %q): %v, want not found", c[0], c[1], err)
		}
	}
	if _, err := b.SASKey(ctx, "listener"); !errors.Is(err, amqp.ErrNotFound) {
		t.Errorf("an entity rule is not a namespace key: %v", err)
	}
}

// amqp and the rule engine agree on how a SessionId set to "" is stored, so that SQL
// filters see it as the empty string.
func TestBlankSessionIDAgrees(t *testing.T) {
	if amqp.BlankSessionID != rule.BlankSessionID {
		t.Fatalf("amqp stores %q, rules expect %q", amqp.BlankSessionID, rule.BlankSessionID)
	}
}
