package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Entities of the workload.
const (
	queue        = "q"  // peek-lock queue, partly scheduled messages
	sessionQueue = "qs" // session queue
	lockDuration = 5 * time.Second
	maxDelivery  = 1000 // nothing should ever be dead-lettered
	opTimeout    = 10 * time.Second
)

// clients hands out SDK clients connected to nodes chosen at random.
type clients struct {
	mu    sync.Mutex
	conns []string // connection string of every host that ever served; owner: mu
	names []string // owner: mu
}

// add makes the node on host name one the clients may pick (a node added to the
// cluster); a node removed later stays, as a stale address in a client's
// configuration would: dialling it fails and the client moves on.
func (cs *clients) add(conn, name string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, n := range cs.names {
		if n == name {
			return
		}
	}
	cs.conns, cs.names = append(cs.conns, conn), append(cs.names, name)
}

func (cs *clients) dial(rng *rand.Rand) (*azservicebus.Client, string) {
	cs.mu.Lock()
	i := rng.IntN(len(cs.conns))
	conn, name := cs.conns[i], cs.names[i]
	cs.mu.Unlock()
	c, err := azservicebus.NewClientFromConnectionString(conn, &azservicebus.ClientOptions{
		// One attempt per call: the workload retries itself, with a new MessageId for a
		// send, so that an ID is never sent twice.
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		panic(err) // only a malformed connection string fails here
	}
	return c, name
}

// conn is one worker's client, replaced by one to another random node after an error.
type conn struct {
	cs   *clients
	rng  *rand.Rand
	c    *azservicebus.Client
	node string
}

func (w *conn) get() (*azservicebus.Client, string) {
	if w.c == nil {
		w.c, w.node = w.cs.dial(w.rng)
	}
	return w.c, w.node
}

// drop closes the client after an error and waits a little, as a user's retry would.
func (w *conn) drop() {
	if w.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.c.Close(ctx)
		cancel()
		w.c = nil
	}
	time.Sleep(time.Duration(100+w.rng.IntN(300)) * time.Millisecond) // client back-off
}

func (w *conn) close() {
	if w.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.c.Close(ctx)
		cancel()
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
	}
	if s == "" {
		s = "error"
	}
	return s
}

// lockLost reports whether err says the lock of a message or session is gone: the
// receiver may keep its link.
func lockLost(err error) bool {
	var sbe *azservicebus.Error
	return errors.As(err, &sbe) && (sbe.Code == azservicebus.CodeLockLost || sbe.Code == azservicebus.CodeTimeout)
}

// workload is every client of one run.
type workload struct {
	h    *History
	cs   *clients
	seed uint64
	stop chan struct{}
	wg   sync.WaitGroup
	// last is when any client last got a message (UnixNano): the drain stops once
	// nothing has come for a while.
	last atomic.Int64
	// lockedUntil is the latest LockedUntil of a delivered message (UnixNano): the drain
	// does not stop before it. A lock taken from a leader whose clock jumped ahead lasts
	// that much longer in real time (up to 30 s past lockDuration), so a message whose
	// lock was left to run out comes back only then.
	lockedUntil atomic.Int64
}

// noteLock records m's lock expiry in wl.lockedUntil.
func (wl *workload) noteLock(m *azservicebus.ReceivedMessage) {
	if m.LockedUntil == nil {
		return
	}
	until := m.LockedUntil.UnixNano()
	for {
		cur := wl.lockedUntil.Load()
		if until <= cur || wl.lockedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

func (wl *workload) rng(i uint64) *rand.Rand {
	return rand.New(rand.NewPCG(wl.seed, i))
}

func (wl *workload) stopped() bool {
	select {
	case <-wl.stop:
		return true
	default:
		return false
	}
}

func (wl *workload) start(senders, receivers, sessionReceivers, sessions int) {
	wl.stop = make(chan struct{})
	for i := 0; i < senders; i++ {
		wl.goFunc(func() { wl.sender(fmt.Sprintf("send%d", i), wl.rng(uint64(100+i))) })
	}
	for i := 0; i < receivers; i++ {
		wl.goFunc(func() { wl.receiver(fmt.Sprintf("recv%d", i), wl.rng(uint64(200+i)), true) })
	}
	wl.goFunc(func() { wl.sessionSender("ssend", wl.rng(300), sessions) })
	for i := 0; i < sessionReceivers; i++ {
		wl.goFunc(func() { wl.sessionReceiver(fmt.Sprintf("srecv%d", i), wl.rng(uint64(400+i)), true) })
	}
}

func (wl *workload) goFunc(f func()) {
	wl.wg.Add(1)
	go func() { defer wl.wg.Done(); f() }()
}

// finish stops every client and waits for them.
func (wl *workload) finish() {
	close(wl.stop)
	wl.wg.Wait()
}

// sender sends messages with IDs worker-k, one in ten scheduled 1 to 3 s ahead.
func (wl *workload) sender(name string, rng *rand.Rand) {
	w := &conn{cs: wl.cs, rng: rng}
	defer w.close()
	var s *azservicebus.Sender
	for k := 0; !wl.stopped(); k++ {
		c, node := w.get()
		if s == nil {
			var err error
			if s, err = c.NewSender(queue, nil); err != nil {
				wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "sender", Err: errText(err)})
				w.drop()
				continue
			}
		}
		id := fmt.Sprintf("%s-%d", name, k)
		m := &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}
		op := Op{T: time.Now(), Worker: name, Node: node, ID: id}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var err error
		if rng.IntN(10) == 0 {
			op.Kind = "schedule"
			op.At = time.Now().Add(time.Second + time.Duration(rng.IntN(2000))*time.Millisecond)
			_, err = s.ScheduleMessages(ctx, []*azservicebus.Message{m}, op.At, nil)
		} else {
			op.Kind = "send"
			err = s.SendMessage(ctx, m, nil)
		}
		cancel()
		op.End, op.Err = time.Now(), errText(err)
		wl.h.Add(op)
		if err != nil {
			s = nil
			w.drop()
		}
	}
}

// receiver receives from q (or its dead-letter queue when dlq) in peek-lock mode and,
// per message, completes (85 %), abandons (8 %) or lets the lock expire (7 %). With
// chaos false it completes everything (the drain).
func (wl *workload) receiver(name string, rng *rand.Rand, chaos bool) {
	w := &conn{cs: wl.cs, rng: rng}
	defer w.close()
	wl.receive(name, w, rng, chaos, false, wl.stopped)
}

func (wl *workload) receive(name string, w *conn, rng *rand.Rand, chaos, dlq bool, done func() bool) {
	var r *azservicebus.Receiver
	epoch := 0
	for !done() {
		c, node := w.get()
		if r == nil {
			var opts *azservicebus.ReceiverOptions
			if dlq {
				opts = &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
			}
			var err error
			if r, err = c.NewReceiverForQueue(queue, opts); err != nil {
				wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "receiver", Err: errText(err)})
				w.drop()
				continue
			}
			epoch++
		}
		t := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		msgs, err := r.ReceiveMessages(ctx, 10, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "receive", Epoch: epoch, Err: errText(err)})
			r = nil
			w.drop()
			continue
		}
		if len(msgs) > 0 {
			wl.last.Store(time.Now().UnixNano())
		}
		refs := make([]int, len(msgs))
		for i, m := range msgs {
			wl.noteLock(m)
			refs[i] = wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "deliver", ID: m.MessageID, Seq: seqOf(m),
				DC: m.DeliveryCount, Epoch: epoch, DLQ: dlq, Value: lockValue(m)})
		}
		broken := false
		for i, m := range msgs {
			if broken {
				wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "unsettled", ID: m.MessageID, Ref: refs[i]})
				continue
			}
			p := rng.IntN(100)
			op := Op{T: time.Now(), Worker: name, Node: node, ID: m.MessageID, Ref: refs[i]}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			switch {
			case !chaos || p < 85:
				op.Kind = "complete"
				err = r.CompleteMessage(ctx, m, nil)
			case p < 93:
				op.Kind = "abandon"
				err = r.AbandonMessage(ctx, m, nil)
			default:
				op.Kind = "expire" // the lock is left to run out
				err = nil
			}
			cancel()
			op.End, op.Err = time.Now(), errText(err)
			wl.h.Add(op)
			if err != nil && !lockLost(err) {
				broken = true
			}
		}
		if broken {
			r = nil
			w.drop()
		}
	}
	if r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r.Close(ctx)
		cancel()
	}
}

func seqOf(m *azservicebus.ReceivedMessage) int64 {
	if m.SequenceNumber == nil {
		return 0
	}
	return *m.SequenceNumber
}

func lockValue(m *azservicebus.ReceivedMessage) string {
	if m.LockedUntil == nil {
		return ""
	}
	return m.LockedUntil.UTC().Format(time.RFC3339Nano)
}

func sessionID(i int) string { return "s" + strconv.Itoa(i) }

// sessionSender sends messages numbered 1, 2, ... to each session in turn, waiting for
// each send: within a session, message n is acknowledged before n+1 is sent.
func (wl *workload) sessionSender(name string, rng *rand.Rand, sessions int) {
	w := &conn{cs: wl.cs, rng: rng}
	defer w.close()
	next := make([]int, sessions)
	var s *azservicebus.Sender
	for k := 0; !wl.stopped(); k++ {
		c, node := w.get()
		if s == nil {
			var err error
			if s, err = c.NewSender(sessionQueue, nil); err != nil {
				wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "sender", Err: errText(err)})
				w.drop()
				continue
			}
		}
		si := k % sessions
		next[si]++
		n := next[si]
		id := fmt.Sprintf("%s-%d", sessionID(si), n)
		op := Op{T: time.Now(), Worker: name, Node: node, Kind: "send", ID: id, Session: sessionID(si), N: n}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(id), SessionID: to.Ptr(sessionID(si)), Body: []byte(id)}, nil)
		cancel()
		op.End, op.Err = time.Now(), errText(err)
		wl.h.Add(op)
		if err != nil {
			s = nil
			w.drop()
		}
	}
}

// sessionReceiver accepts the next session, reads its state, receives a few batches,
// completes each message in order and sets the state to the number last completed.
func (wl *workload) sessionReceiver(name string, rng *rand.Rand, chaos bool) {
	w := &conn{cs: wl.cs, rng: rng}
	defer w.close()
	wl.sessionLoop(name, w, chaos, wl.stopped)
}

// sessionLoop runs until done; in the drain (chaos false) it returns once no session
// has been accepted for idle.
func (wl *workload) sessionLoop(name string, w *conn, chaos bool, done func() bool) {
	epoch := 0
	idleSince := time.Now()
	for !done() {
		if !chaos && time.Since(idleSince) > 3*lockDuration {
			return
		}
		c, node := w.get()
		t := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sr, err := c.AcceptNextSessionForQueue(ctx, sessionQueue, nil)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || isNoSession(err) {
				continue
			}
			wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "accept", Err: errText(err)})
			w.drop()
			continue
		}
		epoch++
		if wl.session(name, node, sr, epoch, chaos, done) {
			idleSince = time.Now()
		}
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		err = sr.Close(ctx)
		cancel()
		if err != nil {
			w.drop()
		}
	}
}

func isNoSession(err error) bool {
	var sbe *azservicebus.Error
	return errors.As(err, &sbe) && sbe.Code == azservicebus.CodeTimeout
}

// session works one accepted session; it reports whether it received anything.
func (wl *workload) session(name, node string, sr *azservicebus.SessionReceiver, epoch int, chaos bool, done func() bool) bool {
	sid := sr.SessionID()
	t := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	st, err := sr.GetSessionState(ctx, nil)
	cancel()
	wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "state-get", Session: sid, Epoch: epoch, Value: string(st), Err: errText(err)})
	if err != nil {
		return false
	}
	// The state the workload keeps is the highest message number completed, as an
	// application tracking its progress would: a message the SDK's releaser gave
	// back may come after later ones (see checkSessions), and must not move it back.
	state, _ := strconv.Atoi(strings.TrimSpace(string(st)))
	// left is the credit the previous ReceiveMessages left on the link: each call
	// tops it up to 5, so a call that returns r messages leaves 5-r.
	const batchSize = 5
	left := 0
	got := false
	for batch := 0; (batch < 4 || !chaos) && !done(); batch++ {
		t := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		msgs, err := sr.ReceiveMessages(ctx, batchSize, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "receive", Session: sid, Epoch: epoch, Err: errText(err)})
			return got
		}
		if len(msgs) == 0 {
			return got
		}
		got = true
		wl.last.Store(time.Now().UnixNano())
		refs, ns := make([]int, len(msgs)), make([]int, len(msgs))
		for i, m := range msgs {
			n := 0
			if strings.HasPrefix(m.MessageID, sid+"-") {
				n, _ = strconv.Atoi(m.MessageID[len(sid)+1:])
			}
			refs[i] = wl.h.Add(Op{T: t, Worker: name, Node: node, Kind: "deliver", ID: m.MessageID, Session: sid, N: n,
				Seq: seqOf(m), DC: m.DeliveryCount, Epoch: epoch, Left: left, Value: lockValue(m)})
			ns[i] = n
		}
		left = batchSize - len(msgs)
		for i, m := range msgs {
			op := Op{T: time.Now(), Worker: name, Node: node, Kind: "complete", ID: m.MessageID, Session: sid, Ref: refs[i], Epoch: epoch}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := sr.CompleteMessage(ctx, m, nil)
			cancel()
			op.End, op.Err = time.Now(), errText(err)
			wl.h.Add(op)
			if err != nil {
				for _, r := range refs[i+1:] {
					wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "unsettled", Session: sid, Ref: r})
				}
				return got
			}
			state = max(state, ns[i])
			n := strconv.Itoa(state)
			so := Op{T: time.Now(), Worker: name, Node: node, Kind: "state-set", Session: sid, Epoch: epoch, Value: n}
			ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
			err = sr.SetSessionState(ctx, []byte(n), nil)
			cancel()
			so.End, so.Err = time.Now(), errText(err)
			wl.h.Add(so)
			if err != nil {
				for _, r := range refs[i+1:] {
					wl.h.Add(Op{T: time.Now(), Worker: name, Node: node, Kind: "unsettled", Session: sid, Ref: r})
				}
				return got
			}
		}
	}
	return got
}
