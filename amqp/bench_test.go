package amqp

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// noopBackend accepts every send at once and hands out a ready message for
// every receive: it measures the protocol layer alone.
type noopBackend struct {
	memBackend
	msg *Message
	seq atomic.Int64
}

func (n *noopBackend) Entity(context.Context, string) (EntityInfo, error) {
	return EntityInfo{Kind: KindQueue, Path: "q"}, nil
}
func (n *noopBackend) Send(context.Context, string, []*Message) error   { return nil }
func (n *noopBackend) Settle(_ context.Context, s []Settlement) []error { return make([]error, len(s)) }
func (n *noopBackend) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	out := make([]*Delivery, req.Max)
	now := time.Now()
	for i := range out {
		out[i] = &Delivery{Message: n.msg, SequenceNumber: n.seq.Add(1), EnqueuedTime: now,
			LockedUntil: now.Add(time.Minute), DeliveryCount: 1, LockToken: UUID{1}}
	}
	return out, nil
}

// countingListener counts the write syscalls of the connections it accepts
// (the server's writes to its clients), for writes per message.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, writes: &l.writes}, nil
}

// countingConn counts the Write calls on a net.Conn.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// benchWrites reports the server's writes per message since w0.
func benchWrites(b *testing.B, ln *countingListener, w0 int64) {
	b.ReportMetric(float64(ln.writes.Load()-w0)/float64(b.N), "writes/msg")
}

func benchServer(b *testing.B, wrap func(*noopBackend) Backend) (*goamqp.Session, *noopBackend, *countingListener) {
	b.Helper()
	raw, _ := (&goamqp.Message{Data: [][]byte{make([]byte, 1024)}}).MarshalBinary()
	m, _, err := parseMessage(raw)
	if err != nil {
		b.Fatal(err)
	}
	nb := &noopBackend{memBackend: *newMemBackend(), msg: m}
	var backend Backend = nb
	if wrap != nil {
		backend = wrap(nb)
	}
	s, err := New(DefaultConfig(), backend)
	if err != nil {
		b.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln := &countingListener{Listener: tl}
	go func() { _ = s.Serve(ln) }() // returns when s.Close closes ln
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	c, err := goamqp.Dial(ctx, "amqp://"+ln.Addr().String(), &goamqp.ConnOptions{
		SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "secret-key"),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	return sess, nb, ln
}

// BenchmarkSend: one go-amqp client pushes acknowledged (unsettled,
// disposition awaited) 1 KiB transfers with 256 in flight.
func BenchmarkSend(b *testing.B) { benchSend(b, nil) }

// benchSend runs BenchmarkSend against wrap(the no-op backend) (nil: the
// no-op backend itself).
func benchSend(b *testing.B, wrap func(*noopBackend) Backend) {
	sess, _, ln := benchServer(b, wrap)
	ctx := context.Background()
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		b.Fatal(err)
	}
	const window = 256
	var receipts [window]*goamqp.SendReceipt
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, w0 := cpu(), ln.writes.Load()
	for i := 0; i < b.N; i++ {
		slot := i % window
		if r := receipts[slot]; r != nil {
			if st, err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			} else if _, ok := st.(*goamqp.StateAccepted); !ok {
				b.Fatalf("state %T", st)
			}
		}
		r, err := snd.SendWithReceipt(ctx, goamqp.NewMessage(body), nil)
		if err != nil {
			b.Fatal(err)
		}
		receipts[slot] = &r
	}
	for _, r := range receipts {
		if r != nil {
			if _, err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu()-cpu0)/float64(b.N), "cpu-ns/msg")
	benchWrites(b, ln, w0)
}

// groupCommitBackend is noopBackend whose sends return only at the next
// "commit", every interval, as a Raft group commit answers the sends of one
// round together: it keeps many sends in flight at once, as the real broker does.
type groupCommitBackend struct {
	*noopBackend
	mu    sync.Mutex
	round chan struct{} // closed at the next commit
}

func (g *groupCommitBackend) Send(ctx context.Context, _ string, _ []*Message) error {
	g.mu.Lock()
	r := g.round
	g.mu.Unlock()
	select {
	case <-r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BenchmarkSendGroupCommit is BenchmarkSend against a backend that answers
// sends in rounds every 200 µs (groupCommitBackend).
func BenchmarkSendGroupCommit(b *testing.B) {
	g := &groupCommitBackend{round: make(chan struct{})}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				g.mu.Lock()
				close(g.round)
				g.round = make(chan struct{})
				g.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	b.Cleanup(func() { close(stop); <-done })
	benchSend(b, func(nb *noopBackend) Backend { g.noopBackend = nb; return g })
}

// BenchmarkReceive: one go-amqp receiver (credit 256) receives 1 KiB
// messages and settles each one individually.
func BenchmarkReceive(b *testing.B) {
	sess, _, ln := benchServer(b, nil)
	ctx := context.Background()
	rcv, err := sess.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{Credit: 256})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, w0 := cpu(), ln.writes.Load()
	for i := 0; i < b.N; i++ {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu()-cpu0)/float64(b.N), "cpu-ns/msg")
	benchWrites(b, ln, w0)
}

// cpu returns the process's user+system CPU time in ns. On a shared
// machine CPU per message is steadier than wall-clock throughput.
func cpu() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
