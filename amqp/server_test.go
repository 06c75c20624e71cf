package amqp

import (
	"context"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// testServer starts a server on 127.0.0.1:0 with a memBackend holding
// queue q1, session queue sq, topic t1 with subscription s1.
func testServer(t *testing.T, mod func(*Config)) (*Server, *memBackend, string) {
	t.Helper()
	b := newMemBackend()
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "sq", RequiresSession: true})
	b.addEntity(EntityInfo{Kind: KindTopic, Path: "t1"})
	b.addEntity(EntityInfo{Kind: KindSubscription, Path: "t1/Subscriptions/s1"})
	cfg := DefaultConfig()
	cfg.Addresses = []string{"127.0.0.1:0"}
	if mod != nil {
		mod(cfg)
	}
	if cfg.Clock != nil {
		b.now = cfg.Clock.Now // the fake backend keeps time with the server
	}
	s, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b, s.Addrs()[0].String()
}

func dialPlain(t *testing.T, addr string) *goamqp.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{
		SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "secret-key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGoAMQPSendReceive: a generic AMQP 1.0 client (go-amqp used directly,
// SASL PLAIN) sends to and receives from a queue. S-SEND-1, S-LOCK-2.
func TestGoAMQPSendReceive(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if snd.MaxMessageSize() != 262144 {
		t.Fatalf("max-message-size = %d", snd.MaxMessageSize())
	}
	msg := goamqp.NewMessage([]byte("hello"))
	msg.Properties = &goamqp.MessageProperties{MessageID: "m1"}
	msg.ApplicationProperties = map[string]any{"k": int64(42)}
	if err := snd.Send(ctx, msg, nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "q1", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.GetData()) != "hello" || got.Properties.MessageID != "m1" || got.ApplicationProperties["k"] != int64(42) {
		t.Fatalf("got %+v", got)
	}
	if got.Annotations["x-opt-sequence-number"] != int64(1) {
		t.Fatalf("annotations %v", got.Annotations)
	}
	if len(got.DeliveryTag) != 16 || got.DeliveryAnnotations["x-opt-lock-token"] == nil {
		t.Fatalf("lock token missing: tag %x da %v", got.DeliveryTag, got.DeliveryAnnotations)
	}
	if err := rcv.AcceptMessage(ctx, got); err != nil {
		t.Fatal(err)
	}
	// The queue is now empty: a second receive times out.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if m, err := rcv.Receive(short, nil); err == nil {
		t.Fatalf("unexpected message %v", m)
	}
}

// TestSASLPlainRejected: a wrong key fails SASL with an auth outcome and the
// connection is closed; the server keeps serving others.
func TestSASLPlainRejected(t *testing.T) {
	_, _, addr := testServer(t, nil)
	ctx := ctxT(t)
	for _, creds := range [][2]string{{"RootManageSharedAccessKey", "wrong"}, {"ghost", "secret-key"}} {
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(creds[0], creds[1])})
		if err == nil {
			c.Close()
			t.Fatalf("%v: login accepted", creds)
		}
	}
	checkHealthy(t, addr)
}

// TestSenderSettleModeSecond: a sender that asks the receiver to settle second gets
// the mode echoed (go-amqp fails a link whose modes come back changed) and, as from
// Service Bus, a settled confirmation: the message is stored when it is confirmed, and
// uamqp (the Python SDK), which asks for mode second on every sender, completes a send
// only on a settled disposition (protocol.md §5). A sender that settles anyway is
// ignored; go-amqp works with it too.
func TestSenderSettleModeSecond(t *testing.T) {
	_, b, addr := testServer(t, nil)
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	second := frames.RcvSecond
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "s2", Role: frames.RoleSender, RcvSettleMode: &second,
		Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
	if a, ok := rc.next().(*frames.Attach); !ok || a.RcvSettleMode == nil || *a.RcvSettleMode != second {
		t.Fatalf("attach reply %v", a)
	}
	rc.next() // credit
	id := uint32(0)
	rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{1}}, []byte{0x00, 0x53, 0x75, 0xa0, 0x01, 'x'})
	for {
		if d, ok := rc.next().(*frames.Disposition); ok {
			if !d.Settled || d.First != 0 {
				t.Fatalf("want a settled confirmation of delivery 0, got %v", d)
			}
			if _, ok := d.State.(frames.Accepted); !ok {
				t.Fatalf("state %v", d.State)
			}
			break
		}
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleSender, First: 0, Settled: true, State: frames.Accepted{}}, nil)

	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	snd, err := s.NewSender(ctx, "q1", &goamqp.SenderOptions{RequestedReceiverSettleMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("m")), nil); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	n := len(b.entities["q1"].queues[0])
	b.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d stored, want 2", n)
	}
}

// manualClock is a Clock that moves only when the test advances it, for lock and
// expiry times that must not depend on how fast the machine runs.
type manualClock struct {
	mu sync.Mutex
	t  time.Time // owner: mu
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
