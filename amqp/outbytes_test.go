package amqp

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// outSlack is what framing adds beyond the reserved bytes: performatives, flows and
// heartbeats framed while the connection is at its bound.
const outSlack = 64 << 10

// TestOutgoingBytesBoundedForNonReader: a raw client that attaches a receiver with a
// credit of 1,000,000 on a queue of 200 messages of 250 KB (50 MB) and then never
// reads its socket makes the node hold at most MaxConnOutgoing bytes for it (the
// default, 16 MiB): its receiver waits for the writer instead of fetching everything.
// Other clients keep being served, and closing the connection frees what it held.
func TestOutgoingBytesBoundedForNonReader(t *testing.T) {
	srv, b, addr := testServer(t, nil)
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q2"})
	bound := DefaultConfig().MaxConnOutgoing
	body := bytes.Repeat([]byte("x"), 250_000)
	msgs := make([]*azservicebus.Message, 200)
	for i := range msgs {
		msgs[i] = &azservicebus.Message{Body: body}
	}
	send(t, rootClient(t, addr), "q1", msgs...)

	rc := dialRaw(t, addr)
	if tc, ok := rc.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10) // keep what the kernel absorbs small
	}
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 1 << 31, OutgoingWindow: 100, HandleMax: 10}, nil)
	if _, ok := rc.next().(*frames.Begin); !ok {
		t.Fatal("no begin")
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	if _, ok := rc.next().(*frames.Attach); !ok {
		t.Fatal("no attach")
	}
	zero, h, credit := uint32(0), uint32(0), uint32(1_000_000)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &zero, IncomingWindow: 1 << 31, OutgoingWindow: 100,
		Handle: &h, DeliveryCount: &zero, LinkCredit: &credit}, nil)
	// From here on the client reads nothing.

	testutil.WaitFor(t, 20*time.Second, func() error {
		st := srv.Stats()
		if st.OutgoingQueuedPeak > bound+outSlack {
			return testutil.Permanent(fmt.Errorf("one connection held %d bytes, more than the bound %d", st.OutgoingQueuedPeak, bound))
		}
		if st.OutgoingStalls == 0 || st.OutgoingQueued < bound/2 {
			return fmt.Errorf("not yet waiting for the writer: %d bytes queued, %d stalls", st.OutgoingQueued, st.OutgoingStalls)
		}
		// Deliveries that did not fit went back to the queue: the bound holds about
		// 67 of these messages and the kernel's buffers (a 4 MiB send buffer by
		// default) about 17 more, so most are still there.
		if n := b.availableCount("q1"); n < 50 {
			return fmt.Errorf("%d of 200 messages available", n)
		}
		return nil
	})

	// Other clients are served meanwhile, receivers included.
	checkHealthy(t, addr)
	s, err := dialPlain(t, addr).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctxT(t), "q2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctxT(t), goamqp.NewMessage([]byte("other")), nil); err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReceiver(ctxT(t), "q2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := r.Receive(ctxT(t), nil); err != nil || string(m.GetData()) != "other" {
		t.Fatalf("another client's receive: %v", err)
	}
	if st := srv.Stats(); st.OutgoingQueuedPeak > bound+outSlack {
		t.Fatalf("one connection held %d bytes, more than the bound %d", st.OutgoingQueuedPeak, bound)
	}

	rc.nc.Close()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if q := srv.Stats().OutgoingQueued; q > outSlack {
			return fmt.Errorf("%d bytes still queued after the client went", q)
		}
		return nil
	})
}

// TestOutgoingBoundStillDelivers: with a small MaxConnOutgoing a client that reads
// gets every message, in order, peek-lock and receive-and-delete, including one
// larger than the bound.
func TestOutgoingBoundStillDelivers(t *testing.T) {
	srv, b, addr := testServer(t, func(c *Config) { c.MaxConnOutgoing = 64 << 10 })
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q2"})
	c := rootClient(t, addr)
	for _, q := range []string{"q1", "q2"} {
		msgs := make([]*azservicebus.Message, 40)
		for i := range msgs {
			size := 20_000
			if i == 7 {
				size = 200_000 // larger than the bound
			}
			msgs[i] = &azservicebus.Message{Body: bytes.Repeat([]byte{byte(i)}, size)}
		}
		send(t, c, q, msgs...)
	}
	for _, tc := range []struct {
		q    string
		mode azservicebus.ReceiveMode
	}{{"q1", azservicebus.ReceiveModePeekLock}, {"q2", azservicebus.ReceiveModeReceiveAndDelete}} {
		r, err := c.NewReceiverForQueue(tc.q, &azservicebus.ReceiverOptions{ReceiveMode: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		got := receiveN(t, r, 40)
		for i, m := range got {
			if len(m.Body) == 0 || m.Body[0] != byte(i) {
				var order []int
				for _, m := range got {
					order = append(order, int(m.Body[0]))
				}
				t.Fatalf("%s: message %d out of order or empty: %v", tc.q, i, order)
			}
			if tc.mode == azservicebus.ReceiveModePeekLock {
				if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if st := srv.Stats(); st.OutgoingStalls == 0 {
		t.Fatal("the bound was never reached: the test proves nothing")
	}
}

// TestPeekResponseBounded: a peek of many large messages answers at most
// MaxConnOutgoing bytes of them at once (before, 5000 messages of 256 KB made one
// 1.25 GB response); the SDK peeks on from there and sees every message once, in order.
func TestPeekResponseBounded(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxConnOutgoing = 64 << 10 })
	c := rootClient(t, addr)
	msgs := make([]*azservicebus.Message, 10)
	for i := range msgs {
		msgs[i] = &azservicebus.Message{Body: bytes.Repeat([]byte{byte(i)}, 20_000)}
	}
	send(t, c, "q1", msgs...)
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || len(first) > 4 {
		t.Fatalf("first peek: %d messages of 20 KB, want 1..4 under a 64 KiB bound", len(first))
	}
	got := first
	for len(got) < 10 {
		ms, err := r.PeekMessages(ctxT(t), 10, nil)
		if err != nil || len(ms) == 0 {
			t.Fatalf("peek after %d: %d messages, %v", len(got), len(ms), err)
		}
		got = append(got, ms...)
	}
	for i, m := range got {
		if len(got) != 10 || m.Body[0] != byte(i) {
			t.Fatalf("peeked %d messages; message %d has body %d", len(got), i, m.Body[0])
		}
	}
}

// peekRequest is a $management peek of up to 5000 messages from sequence number 1,
// answered to the link whose target is "reply".
func peekRequest(t *testing.T, id int) []byte {
	t.Helper()
	b := encoding.AppendDescriptor(nil, secProperties)
	b, lo := encoding.ListStart(b)
	b = encoding.AppendString(b, fmt.Sprint("req-", id)) // message-id
	b = encoding.AppendNull(b)                           // user-id
	b = encoding.AppendNull(b)                           // to
	b = encoding.AppendNull(b)                           // subject
	b = encoding.AppendString(b, "reply")                // reply-to
	b = encoding.ListEnd(b, lo, 5)
	b = encoding.AppendDescriptor(b, secAppProperties)
	b, mo := encoding.MapStart(b)
	b = encoding.AppendString(b, "operation")
	b = encoding.AppendString(b, "com.microsoft:peek-message")
	b = encoding.MapEnd(b, mo, 2)
	b = encoding.AppendDescriptor(b, secValue)
	b, err := encoding.Append(b, Map{{Key: "from-sequence-number", Value: int64(1)}, {Key: "message-count", Value: int32(5000)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestManagementResponsesBoundedForNonReader: a raw client that sends 100 peek
// requests, each answered with about MaxConnOutgoing bytes of messages, and reads
// nothing makes the node hold at most the bound for it: requests wait for their
// responses to be written instead of every response being queued (before, 100
// responses of 1 MiB each).
func TestManagementResponsesBoundedForNonReader(t *testing.T) {
	const bound = 1 << 20
	srv, _, addr := testServer(t, func(c *Config) { c.MaxConnOutgoing = bound })
	body := bytes.Repeat([]byte("x"), 100_000)
	msgs := make([]*azservicebus.Message, 30)
	for i := range msgs {
		msgs[i] = &azservicebus.Message{Body: body}
	}
	send(t, rootClient(t, addr), "q1", msgs...)

	rc := dialRaw(t, addr)
	if tc, ok := rc.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10)
	}
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 1 << 31, OutgoingWindow: 1 << 31, HandleMax: 10}, nil)
	if _, ok := rc.next().(*frames.Begin); !ok {
		t.Fatal("no begin")
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "req", Handle: 0, Role: frames.RoleSender,
		Source: &frames.Source{}, Target: &frames.Target{Address: "q1/$management"}}, nil)
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "resp", Handle: 1, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: "q1/$management"}, Target: &frames.Target{Address: "reply"}}, nil)
	zero, h, credit := uint32(0), uint32(1), uint32(1_000_000)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &zero, IncomingWindow: 1 << 31, OutgoingWindow: 1 << 31,
		Handle: &h, DeliveryCount: &zero, LinkCredit: &credit}, nil)
	format := uint32(0)
	for i := range 100 {
		id := uint32(i)
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{byte(i)},
			MessageFormat: &format, Settled: true, SettledSet: true}, peekRequest(t, i))
	}
	// From here on the client reads nothing.

	testutil.WaitFor(t, 20*time.Second, func() error {
		st := srv.Stats()
		if st.OutgoingQueuedPeak > bound+outSlack {
			return testutil.Permanent(fmt.Errorf("one connection held %d bytes, more than the bound %d", st.OutgoingQueuedPeak, bound))
		}
		if st.OutgoingQueued < bound/2 {
			return fmt.Errorf("responses not yet queued: %d bytes", st.OutgoingQueued)
		}
		return nil
	})
	checkHealthy(t, addr)
	if st := srv.Stats(); st.OutgoingQueuedPeak > bound+outSlack {
		t.Fatalf("one connection held %d bytes, more than the bound %d", st.OutgoingQueuedPeak, bound)
	}
}
