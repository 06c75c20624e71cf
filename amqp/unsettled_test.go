package amqp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// fill sends n small messages to entity in batches (with sessionID when not empty).
func fill(t *testing.T, c *azservicebus.Client, entity, sessionID string, n int) {
	t.Helper()
	s, err := c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for sent := 0; sent < n; {
		batch, err := s.NewMessageBatch(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for ; sent < n; sent++ {
			m := &azservicebus.Message{Body: []byte(fmt.Sprint("m", sent))}
			if sessionID != "" {
				m.SessionID = &sessionID
			}
			if err := batch.AddMessage(m, nil); errors.Is(err, azservicebus.ErrMessageTooLarge) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SendMessageBatch(ctxT(t), batch, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// availableCount is how many messages of entity's main queue a receiver could get now.
func (b *memBackend) availableCount(entity string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(entity)
	if err != nil {
		return -1
	}
	n := 0
	for _, m := range e.queues[0] {
		if b.available(m, b.now()) {
			n++
		}
	}
	return n
}

// waitUnsettled waits until the server holds want unsettled deliveries with no
// receive in flight that could add more (a receiver asked and was told to
// wait: stalls went past since), and entity has left messages available.
func waitUnsettled(t *testing.T, srv *Server, b *memBackend, entity string, want, left int, since uint64) {
	t.Helper()
	testutil.WaitFor(t, 15*time.Second, func() error {
		st := srv.Stats()
		if st.Unsettled > int64(want) {
			return testutil.Permanent(fmt.Errorf("%d unsettled deliveries, more than the bound %d", st.Unsettled, want))
		}
		if n := b.availableCount(entity); st.Unsettled != int64(want) || n != left || st.UnsettledStalls <= since {
			return fmt.Errorf("unsettled %d (want %d), available %d (want %d), stalls %d (want > %d)",
				st.Unsettled, want, n, left, st.UnsettledStalls, since)
		}
		return nil
	})
}

// TestSDKUnsettledBoundPerLink: an SDK receiver that received 5000 messages
// (the default MaxUnsettledPerLink) without settling gets no more, without
// any error, although it asks; once it completes some, the next messages come.
func TestSDKUnsettledBoundPerLink(t *testing.T) {
	srv, b, addr := testServer(t, nil)
	c := rootClient(t, addr)
	fill(t, c, "q1", "", 5100)
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	got := receiveN(t, r, 5000)
	stalls := srv.Stats().UnsettledStalls
	type result struct {
		ms  []*azservicebus.ReceivedMessage
		err error
	}
	more := make(chan result, 1)
	ctx := ctxT(t)
	go func() {
		ms, err := r.ReceiveMessages(ctx, 10, nil)
		more <- result{ms, err}
	}()
	waitUnsettled(t, srv, b, "q1", 5000, 100, stalls)
	select {
	case res := <-more:
		t.Fatalf("received %d more messages (err %v) while 5000 were unsettled", len(res.ms), res.err)
	default:
	}
	for _, m := range got[:10] {
		if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	res := <-more
	if res.err != nil || len(res.ms) == 0 {
		t.Fatalf("after completing 10: %d messages, %v", len(res.ms), res.err)
	}
	for _, m := range res.ms {
		if *m.SequenceNumber <= 5000 {
			t.Fatalf("got message %d again", *m.SequenceNumber)
		}
	}
}

// TestSDKUnsettledBoundSessionReceiver: a session receiver at
// MaxUnsettledPerLink resumes once it completes messages, as a plain one does.
func TestSDKUnsettledBoundSessionReceiver(t *testing.T) {
	srv, b, addr := testServer(t, func(c *Config) { c.MaxUnsettledPerLink = 20 })
	c := rootClient(t, addr)
	fill(t, c, "sq", "A", 30)
	sr, err := c.AcceptSessionForQueue(ctxT(t), "sq", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(context.Background())
	got := receiveN(t, sr, 20)
	stalls := srv.Stats().UnsettledStalls
	more := make(chan []*azservicebus.ReceivedMessage, 1)
	ctx := ctxT(t)
	go func() {
		ms, _ := sr.ReceiveMessages(ctx, 5, nil)
		more <- ms
	}()
	waitUnsettled(t, srv, b, "sq", 20, 10, stalls)
	for _, m := range got[:5] {
		if err := sr.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ms := <-more; len(ms) == 0 || *ms[0].SequenceNumber <= 20 {
		t.Fatalf("after completing 5: %d messages", len(ms))
	}
}

// TestUnsettledBoundRawCredit: a client granting a credit of 1,000,000 on
// each of two receivers of one connection gets at most MaxUnsettledPerLink on
// the first and MaxUnsettledPerConn over both; settling some brings more; a
// receive-and-delete receiver of the same connection is not held back.
func TestUnsettledBoundRawCredit(t *testing.T) {
	srv, b, addr := testServer(t, func(c *Config) { c.MaxUnsettledPerLink = 300; c.MaxUnsettledPerConn = 500 })
	fill(t, rootClient(t, addr), "q1", "", 1000)
	s, err := dialPlain(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := s.NewReceiver(ctxT(t), "q1", &goamqp.ReceiverOptions{Credit: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	waitUnsettled(t, srv, b, "q1", 300, 700, 0)
	stalls := srv.Stats().UnsettledStalls
	if _, err := s.NewReceiver(ctxT(t), "q1", &goamqp.ReceiverOptions{Credit: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	waitUnsettled(t, srv, b, "q1", 500, 500, stalls)

	stalls = srv.Stats().UnsettledStalls
	for range 50 {
		m, err := r1.Receive(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r1.AcceptMessage(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
	waitUnsettled(t, srv, b, "q1", 500, 450, stalls)

	rad, err := s.NewReceiver(ctxT(t), "q1", &goamqp.ReceiverOptions{Credit: 10,
		RequestedSenderSettleMode: goamqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := rad.Receive(ctxT(t), nil); err != nil {
			t.Fatalf("receive-and-delete message %d: %v", i, err)
		}
	}
	if st := srv.Stats(); st.Unsettled != 500 {
		t.Fatalf("unsettled after receive-and-delete: %d", st.Unsettled)
	}
}

// TestUnsettledBoundLockExpiry: deliveries whose lock expired stop counting
// (the messages are back in the queue), so a receiver at the bound that never
// settles gets messages again; a lock renewed through $management keeps its
// delivery counted past the first expiry. The server's clock is a manual one.
func TestUnsettledBoundLockExpiry(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	srv, b, addr := testServer(t, func(c *Config) {
		c.Clock = clk
		c.AuthCheckInterval = 10 * time.Millisecond
		c.MaxUnsettledPerLink = 10
	})
	c := rootClient(t, addr)
	fill(t, c, "q1", "", 30)

	// Renewed locks keep counting: nothing more comes although the old expiry passed.
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, r, 10)
	stalls := srv.Stats().UnsettledStalls
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.ReceiveMessages(ctx, 5, nil)
	}()
	waitUnsettled(t, srv, b, "q1", 10, 20, stalls)
	clk.Advance(20 * time.Second) // locks last 30 s
	for _, m := range got {
		if err := r.RenewMessageLock(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(15 * time.Second) // past the first expiry, before the renewed one
	waitChecks(t, srv)
	if n, st := b.availableCount("q1"), srv.Stats(); n != 20 || st.Unsettled != 10 {
		t.Fatalf("after renewing: %d available, %d unsettled; want 20 and 10", n, st.Unsettled)
	}
	cancel()
	<-done
	if err := r.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// A raw receiver that never settles gets the next 10 once the locks of its first 10 expire.
	s, err := dialPlain(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := s.NewReceiver(ctxT(t), "q1", &goamqp.ReceiverOptions{Credit: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := rr.Receive(ctxT(t), nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(31 * time.Second)
	for i := range 10 {
		if _, err := rr.Receive(ctxT(t), nil); err != nil {
			t.Fatalf("message %d after the locks expired: %v", 11+i, err)
		}
	}
}
