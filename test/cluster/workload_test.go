package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	azlog "github.com/Azure/azure-sdk-for-go/sdk/azcore/log"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/test/harness"
)

// The fault tests' shared parts: a workload of SDK senders and peek-lock receivers that
// records what each client saw, its checker (S-DUR-1, S-DUR-3), and cluster probes over
// qbctl (partition leaders, replica digests).

// FAULTS_SDK_LOG=FILE writes the SDK's own log of retries and recoveries to FILE, with
// times to match the workload's records (a debugging aid: the SDK retries settlements
// on its own, and what it retried explains what a client saw).
func init() {
	path := os.Getenv("FAULTS_SDK_LOG")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	azlog.SetListener(func(e azlog.Event, msg string) {
		if !strings.Contains(msg, "Retry") && !strings.Contains(msg, "Recover") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "%s %s: %s\n", time.Now().Format("15:04:05.000"), e, msg)
	})
}

// --- Cluster probes ---

// partitionsOf lists the partition groups as node n sees them (of entity, or of every
// entity when entity is ""), with each replica's digest when digests is set.
func partitionsOf(t *testing.T, n *harness.Node, entity string, digests bool) ([]partition, error) {
	t.Helper()
	args := []string{"cluster", "partitions"}
	if digests {
		args = append(args, "--digests")
	}
	var ps []partition
	if err := qbctlJSON(t, n, &ps, args...); err != nil {
		return nil, err
	}
	if entity == "" {
		return ps, nil
	}
	var mine []partition
	for _, p := range ps {
		if strings.EqualFold(p.Entity, entity) {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return nil, fmt.Errorf("%s lists no partition group of %s", n.ID, entity)
	}
	return mine, nil
}

// running returns the nodes whose process runs.
func running(c *harness.Cluster) []*harness.Node {
	var out []*harness.Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// serving returns nil once every group of entity ("" for all) has a leader and n
// replicas, all of them voters, as a running node sees it.
func serving(t *testing.T, c *harness.Cluster, entity string, n int) error {
	t.Helper()
	ps, err := partitionsOf(t, running(c)[0], entity, false)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := groupShape(p, n, nil); err != nil {
			return err
		}
	}
	return nil
}

// groupShape checks that p has a leader and n voter replicas (exactly the nodes in want,
// when want is not nil).
func groupShape(p partition, n int, want []string) error {
	var nodes []string
	for _, r := range p.Replicas {
		if !r.Voter {
			return fmt.Errorf("group %d of %s: %s is not a voter yet (lag %d)", p.Group, p.Entity, r.Node, r.Lag)
		}
		nodes = append(nodes, r.Node)
	}
	sort.Strings(nodes)
	if p.Leader == "" || len(nodes) != n {
		return fmt.Errorf("group %d of %s: leader %q, replicas %v; want a leader and %d replicas", p.Group, p.Entity, p.Leader, nodes, n)
	}
	if want != nil {
		w := append([]string(nil), want...)
		sort.Strings(w)
		if strings.Join(w, ",") != strings.Join(nodes, ",") {
			return fmt.Errorf("group %d of %s: replicas %v, want %v", p.Group, p.Entity, nodes, w)
		}
	}
	return nil
}

// converged returns nil once every group of entity ("" for all) has a leader, n voter
// replicas (exactly want, when not nil) and the same digest on each of them.
func converged(t *testing.T, c *harness.Cluster, entity string, n int, want []string) error {
	t.Helper()
	ps, err := partitionsOf(t, running(c)[0], entity, true)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := groupShape(p, n, want); err != nil {
			return err
		}
		digests := map[string][]string{}
		for _, r := range p.Replicas {
			d := r.Digest
			if d == "" {
				d = "(no answer)"
			}
			digests[d] = append(digests[d], r.Node)
		}
		if len(digests) != 1 || digests["(no answer)"] != nil {
			return fmt.Errorf("group %d of %s: replicas differ: %v", p.Group, p.Entity, digests)
		}
	}
	return nil
}

// leadersOf returns, for each node, how many groups of entity it leads.
func leadersOf(t *testing.T, c *harness.Cluster, entity string) map[string]int {
	t.Helper()
	out := map[string]int{}
	c.WaitFor(t, 60*time.Second, func() error {
		ps, err := partitionsOf(t, running(c)[0], entity, false)
		if err != nil {
			return err
		}
		clear(out)
		for _, p := range ps {
			if p.Leader == "" {
				return fmt.Errorf("group %d of %s has no leader", p.Group, entity)
			}
			out[p.Leader]++
		}
		return nil
	})
	return out
}

// transferAll moves the leadership of every group of entity to node to, and waits until
// it leads them.
func transferAll(t *testing.T, c *harness.Cluster, entity, to string) {
	t.Helper()
	c.WaitFor(t, 60*time.Second, func() error {
		ps, err := partitionsOf(t, running(c)[0], entity, false)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Leader == to {
				continue
			}
			if _, err := running(c)[0].Qbctl(t, "partition", "transfer-leader", fmt.Sprint(p.Group), "--to", to); err != nil {
				return err
			}
			return fmt.Errorf("group %d of %s led by %s, moving it to %s", p.Group, entity, p.Leader, to)
		}
		return nil
	})
}

// --- Client errors ---

// retriable reports whether err is one a user retries: an azservicebus.Error whose code
// says the connection or link was lost, closed or timed out, one of the AMQP conditions
// the SDK itself retries (server busy, timeout, operation cancelled), a transient
// connection error, or our own per-operation deadline (outcome unknown: retried).
func retriable(err error) bool {
	var sb *azservicebus.Error
	if errors.As(err, &sb) {
		switch sb.Code {
		case azservicebus.CodeConnectionLost, azservicebus.CodeTimeout, azservicebus.CodeClosed:
			return true
		}
		return false
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Condition {
		case "com.microsoft:server-busy", "com.microsoft:timeout", "com.microsoft:operation-cancelled":
			return true
		}
		return false
	}
	var ce *amqp.ConnError
	var se *amqp.SessionError
	var le *amqp.LinkError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &le) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded)
}

// clientErr is one error a client of the workload saw.
type clientErr struct {
	at     time.Time
	worker string // s0, r1, ...
	op     string // send, receive, complete
	id     string // message ID, for send and complete
	err    error
	// afterUnknown: a lock-lost answer to a settlement that may repeat an attempt whose
	// outcome is unknown (delivery.ambiguous); that attempt may have completed it.
	afterUnknown bool
}

func (e clientErr) String() string {
	note := ""
	if e.afterUnknown {
		note = " (may answer a repeat of an attempt that completed it)"
	}
	return fmt.Sprintf("%s %s %s %s: %v%s", e.at.Format("15:04:05.000"), e.worker, e.op, e.id, e.err, note)
}

// errCode is a short class of err for summaries.
func errCode(err error) string {
	var sb *azservicebus.Error
	if errors.As(err, &sb) {
		return string(sb.Code)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return string(ae.Condition)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline"
	}
	return fmt.Sprintf("%T", err)
}

// --- Workload ---

// delivery is one peek-lock delivery of a message and the outcome of completing it.
type delivery struct {
	worker      string
	count       uint32 // DeliveryCount
	seq         int64
	received    time.Time
	lockedUntil time.Time
	settled     time.Time // when CompleteMessage returned
	completeErr error     // nil: completed
	// ambiguous: the final lock-lost may answer a repeat of an attempt that did complete
	// the message (S-LOCK-9: "already settled"): an earlier attempt of ours failed with
	// its outcome unknown (connection lost, deadline), or the SDK may have retried one
	// (a settlement by lock token, which it resends on its own).
	ambiguous bool
}

func (d delivery) String() string {
	out := "ok"
	if d.completeErr != nil {
		out = errCode(d.completeErr)
	}
	if d.ambiguous {
		out += " (ambiguous)"
	}
	return fmt.Sprintf("[%s seq %d count %d received %s locked until %s complete %s at %s]", d.worker, d.seq, d.count,
		d.received.Format("15:04:05.000"), d.lockedUntil.Format("15:04:05.000"), out, d.settled.Format("15:04:05.000"))
}

// workload runs SDK senders and peek-lock receivers against one queue and records every
// send the SDK acknowledged, every delivery and its settlement, and every error.
type workload struct {
	t     *testing.T
	queue string

	stopSend, stopRecv chan struct{}
	sendWG, recvWG     sync.WaitGroup

	mu         sync.Mutex
	acked      map[string]bool       // message ID -> the SDK acknowledged a send of it
	sendFailed map[string]int        // message ID -> failed send attempts (each may have stored a copy)
	deliveries map[string][]delivery // message ID -> its deliveries, in order
	errs       []clientErr
	progress   map[string]int // worker -> successful sends or completions
}

func newWorkload(t *testing.T, queue string) *workload {
	w := &workload{t: t, queue: queue, stopSend: make(chan struct{}), stopRecv: make(chan struct{}),
		acked: map[string]bool{}, sendFailed: map[string]int{}, deliveries: map[string][]delivery{}, progress: map[string]int{}}
	t.Cleanup(func() { w.stopSenders(); w.stopReceivers() }) // a failed test leaves no goroutine behind
	return w
}

func (w *workload) record(e clientErr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, e)
}

func stopped(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// pause waits d unless stop is closed first: a user's back-off between retries, or the
// pacing of a sender.
func pause(stop chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
	case <-t.C:
	}
}

// startSender runs sender name with its own client on node n: it sends up to max
// messages with unique MessageIds, one every interval, retrying a failed send with the
// same MessageId (as a user would) until the SDK acknowledges it or the senders stop.
func (w *workload) startSender(name string, n *harness.Node, max int, interval time.Duration) {
	w.sendWG.Add(1)
	go func() {
		defer w.sendWG.Done()
		var client *azservicebus.Client
		var s *azservicebus.Sender
		closeAll := func() {
			if client != nil {
				s.Close(context.Background())
				client.Close(context.Background())
				client, s = nil, nil
			}
		}
		defer closeAll()
		for i := 0; i < max; i++ {
			id := fmt.Sprintf("%s-%d", name, i)
			for {
				if stopped(w.stopSend) {
					return
				}
				if client == nil {
					// No SDK retries: the SDK would resend a message whose first attempt
					// failed with its outcome unknown (the connection closed before the
					// disposition came back) and report one success for two stored copies.
					// Here every attempt is the workload's own, so a duplicate can be
					// matched with the failed attempt that explains it. Without the SDK's
					// retries nothing recovers its connection either: after an error the
					// sender starts over with a new client, as a user would.
					var err error
					client, err = azservicebus.NewClientFromConnectionString(n.ConnectionString, &azservicebus.ClientOptions{
						RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
					})
					if err == nil {
						s, err = client.NewSender(w.queue, nil)
					}
					if err != nil {
						w.record(clientErr{at: time.Now(), worker: name, op: "new sender", err: err})
						return
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil)
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked[id] = true
					w.progress[name]++
				} else {
					w.sendFailed[id]++
					w.errs = append(w.errs, clientErr{at: time.Now(), worker: name, op: "send", id: id, err: err})
				}
				w.mu.Unlock()
				if err == nil {
					break
				}
				closeAll()
				pause(w.stopSend, 200*time.Millisecond) // the user's back-off before a retry
			}
			pause(w.stopSend, interval) // pacing: keeps the load small on a shared machine
		}
	}()
}

// startReceiver runs peek-lock receiver name with its own client on node n: it receives
// and completes each message at once, recording every delivery and settlement, and opens
// a new receiver after a receive error.
func (w *workload) startReceiver(name string, n *harness.Node) {
	client := n.Client(w.t)
	w.recvWG.Add(1)
	go func() {
		defer w.recvWG.Done()
		var r *azservicebus.Receiver
		defer func() {
			if r != nil {
				r.Close(context.Background())
			}
		}()
		for !stopped(w.stopRecv) {
			if r == nil {
				var err error
				if r, err = client.NewReceiverForQueue(w.queue, nil); err != nil {
					w.record(clientErr{at: time.Now(), worker: name, op: "new receiver", err: err})
					pause(w.stopRecv, 200*time.Millisecond) // back-off before trying again
					continue
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			msgs, err := r.ReceiveMessages(ctx, 10, nil)
			cancel()
			w.receivedAll(name, msgs)
			linkLost := false
			for _, m := range msgs {
				linkLost = w.complete(name, r, m, linkLost) || linkLost
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				w.record(clientErr{at: time.Now(), worker: name, op: "receive", err: err})
			}
			if linkLost || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
				r.Close(context.Background())
				r = nil
				pause(w.stopRecv, 200*time.Millisecond) // the user's back-off before a new receiver
			}
		}
	}()
}

// receivedAll records the deliveries of msgs, in the order the broker handed them out.
func (w *workload) receivedAll(name string, msgs []*azservicebus.ReceivedMessage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		d := delivery{worker: name, count: m.DeliveryCount, received: now}
		if m.SequenceNumber != nil {
			d.seq = *m.SequenceNumber
		}
		if m.LockedUntil != nil {
			d.lockedUntil = *m.LockedUntil
		}
		w.deliveries[m.MessageID] = append(w.deliveries[m.MessageID], d)
	}
}

// complete settles m and records the outcome; byToken settles by lock token alone, on
// the management link of the client's current connection (S-LOCK-10). A failed settlement
// other than lock-lost is retried by lock token, as a user would: the SDK cannot settle a
// message on a link that is gone (it keeps retrying on the dead link until the caller's
// deadline), and the lock is still valid. complete reports whether the settlement failed
// in a way that makes the rest of the batch better settled by token too.
func (w *workload) complete(name string, r *azservicebus.Receiver, m *azservicebus.ReceivedMessage, byToken bool) (linkLost bool) {
	var err error
	unknown := false // an earlier attempt failed with its outcome unknown
	ambiguous := false
	for attempt := 0; attempt < 3; attempt++ {
		target, timeout := m, 5*time.Second
		if byToken || attempt > 0 {
			target, timeout = &azservicebus.ReceivedMessage{LockToken: m.LockToken}, 10*time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = r.CompleteMessage(ctx, target, nil)
		cancel()
		if err == nil {
			break
		}
		var sb *azservicebus.Error
		lockLost := errors.As(err, &sb) && sb.Code == azservicebus.CodeLockLost
		// A lock-lost by token (management link) may answer the SDK's own retry of an
		// attempt that completed the message; on the receive link the SDK's retry of a
		// settlement never reaches the broker, so a lock-lost there is the broker's.
		ambiguous = lockLost && (unknown || target != m)
		w.record(clientErr{at: time.Now(), worker: name, op: "complete", id: m.MessageID, err: err, afterUnknown: ambiguous})
		if lockLost {
			break
		}
		unknown, linkLost = true, true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := w.deliveries[m.MessageID]
	for i := range ds {
		if ds[i].worker == name && ds[i].count == m.DeliveryCount && ds[i].settled.IsZero() {
			ds[i].settled, ds[i].completeErr, ds[i].ambiguous = time.Now(), err, ambiguous
			break
		}
	}
	if err == nil {
		w.progress[name]++
	}
	return linkLost
}

func (w *workload) stopSenders() {
	if !stopped(w.stopSend) {
		close(w.stopSend)
	}
	w.sendWG.Wait()
}

func (w *workload) stopReceivers() {
	if !stopped(w.stopRecv) {
		close(w.stopRecv)
	}
	w.recvWG.Wait()
}

// mark is the progress of every worker at a point in time.
// startRing starts, for each node, a sender through it (1,000 messages, one every
// 25 ms) and a receiver through the next node, and returns the workers' names.
func (w *workload) startRing(nodes []*harness.Node) []string {
	var workers []string
	for i, n := range nodes {
		s, r := fmt.Sprint("s", i), fmt.Sprint("r", i)
		w.startSender(s, n, 1000, 25*time.Millisecond)
		w.startReceiver(r, nodes[(i+1)%len(nodes)])
		workers = append(workers, s, r)
	}
	return workers
}

func (w *workload) mark() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.progress))
	for k, v := range w.progress {
		out[k] = v
	}
	return out
}

// progressed returns nil once each of workers has k more successes than at mark.
func (w *workload) progressed(since map[string]int, k int, workers ...string) error {
	now := w.mark()
	var behind []string
	for _, name := range workers {
		if d := now[name] - since[name]; d < k {
			behind = append(behind, fmt.Sprintf("%s +%d", name, d))
		}
	}
	if len(behind) > 0 {
		return fmt.Errorf("clients without %d successes yet: %s (last errors: %s)", k, strings.Join(behind, ", "), w.lastErrs(3))
	}
	return nil
}

func (w *workload) lastErrs(k int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s []string
	for _, e := range w.errs[max(0, len(w.errs)-k):] {
		s = append(s, e.String())
	}
	return strings.Join(s, "; ")
}

// errorsSince returns the errors clients saw from t0 on.
func (w *workload) errorsSince(t0 time.Time) []clientErr {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []clientErr
	for _, e := range w.errs {
		if !e.at.Before(t0) {
			out = append(out, e)
		}
	}
	return out
}

// drained returns nil once every acknowledged message has been completed and the queue,
// peeked through p, holds nothing.
func (w *workload) drained(p *azservicebus.Receiver) error {
	w.mu.Lock()
	var missing []string
	for id := range w.acked {
		if !completedOnce(w.deliveries[id]) {
			missing = append(missing, id)
		}
	}
	w.mu.Unlock()
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("%d acknowledged messages not completed yet, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := p.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))})
	if err != nil {
		return fmt.Errorf("peek: %v", err)
	}
	if len(left) > 0 {
		var ids []string
		for _, m := range left {
			ids = append(ids, m.MessageID)
		}
		return fmt.Errorf("the queue still holds %v", ids)
	}
	return nil
}

// completedOnce reports whether a delivery of the message was completed, or may have
// been (ambiguous: the client cannot tell, and the message must then be gone from the
// queue, which drained checks).
func completedOnce(ds []delivery) bool {
	for _, d := range ds {
		if !d.settled.IsZero() && (d.completeErr == nil || d.ambiguous) {
			return true
		}
	}
	return false
}

// check reports, as test errors, every acknowledged message that was never completed
// (S-DUR-1), every message completed more than once that was sent only once, and every
// redelivery not explained by a failed settlement (S-DUR-3, S-LOCK-9) or a retried send.
// It logs a summary of what the clients saw. Call it once the workload has stopped.
func (w *workload) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var lost, doubled, unexplained, unknown, ambiguous []string
	redelivered := 0
	for id := range w.acked {
		if !completedOnce(w.deliveries[id]) {
			lost = append(lost, id)
		}
	}
	for id, ds := range w.deliveries {
		if !w.acked[id] && w.sendFailed[id] == 0 {
			unknown = append(unknown, id)
		}
		if len(ds) > 1 {
			redelivered++
		}
		for _, d := range ds {
			if d.ambiguous {
				ambiguous = append(ambiguous, id+" "+fmtDeliveries(ds))
			}
		}
		copies := 1 + w.sendFailed[id] // every failed attempt may have stored a copy
		completions := 0
		for i, d := range ds {
			if d.settled.IsZero() || d.completeErr != nil {
				continue
			}
			completions++
			if i+1 < len(ds) && completions >= copies {
				unexplained = append(unexplained, fmt.Sprintf("%s delivered again after a successful complete (sent once): %s",
					id, fmtDeliveries(ds)))
			}
		}
		if completions > 1 && w.sendFailed[id] == 0 {
			doubled = append(doubled, fmt.Sprintf("%s completed %d times: %s", id, completions, fmtDeliveries(ds)))
		}
	}
	sort.Strings(lost)
	sort.Strings(doubled)
	sort.Strings(unexplained)
	codes := map[string]int{}
	for _, e := range w.errs {
		codes[e.op+":"+errCode(e.err)]++
	}
	t.Logf("workload on %s: %d sends acknowledged, %d messages delivered, %d of them more than once; client errors by kind: %v",
		w.queue, len(w.acked), len(w.deliveries), redelivered, codes)
	if len(ambiguous) > 0 {
		t.Logf("%d messages whose completion the client could not confirm (lock-lost that may answer a repeated attempt) and that did not come back: %v",
			len(ambiguous), ambiguous)
	}
	if len(lost) > 0 {
		t.Errorf("S-DUR-1: %d acknowledged messages were never completed, e.g. %v", len(lost), lost[:min(10, len(lost))])
	}
	if len(doubled) > 0 {
		t.Errorf("%d messages sent once were completed more than once, e.g. %v", len(doubled), doubled[:min(5, len(doubled))])
	}
	if len(unexplained) > 0 {
		t.Errorf("%d redeliveries after a successful complete, e.g. %v", len(unexplained), unexplained[:min(5, len(unexplained))])
	}
	if len(unknown) > 0 {
		t.Errorf("received %d messages no sender sent, e.g. %v", len(unknown), unknown[:min(5, len(unknown))])
	}
}

func fmtDeliveries(ds []delivery) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, " ")
}

// peeker is a receiver on node n used only to peek at queue.
func peeker(t *testing.T, n *harness.Node, queue string) *azservicebus.Receiver {
	t.Helper()
	r, err := n.Client(t).NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}
