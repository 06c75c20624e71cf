package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/test/harness"
)

// env is one node shared by the subtests of a top-level test (one node per file keeps
// the package fast: a node is a subprocess that takes seconds to start).
type env struct {
	n     *harness.Node
	admin *admin.Client
	c     *azservicebus.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	// E2E_CLUSTER=1 runs the suite against a 3-node cluster (each partition replicated on
	// 2 nodes), through the one node that hosts no replica of any entity the tests
	// create: every operation is forwarded to another node's partition leader.
	if os.Getenv("E2E_CLUSTER") != "" {
		return newClusterEnv(t)
	}
	// E2E_NODE_LOG=1 runs the node at debug level and prints its log when the test ends
	// (debugging aid; the log buffer is read while the node runs, so not under -race).
	if os.Getenv("E2E_NODE_LOG") != "" {
		n := harness.Start(t, "--log-level", "debug")
		t.Cleanup(func() { t.Log(n.Log()) })
		return &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}
	}
	n := harness.Start(t)
	return &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}
}

var entitySeq atomic.Int64

// name returns an entity name unique within the process, readable in broker logs.
func name(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, entitySeq.Add(1))
}

// testCtx is the context for one subtest: generous, so that a hung broker call fails the
// test instead of the whole package timing out.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queue creates a queue with the given properties (nil: defaults) and returns its name.
func (e *env) queue(t *testing.T, prefix string, props *admin.QueueProperties) string {
	t.Helper()
	q := name(prefix)
	if _, err := e.admin.CreateQueue(testCtx(t), q, &admin.CreateQueueOptions{Properties: props}); err != nil {
		t.Fatalf("create queue %s: %v", q, err)
	}
	return q
}

func (e *env) sender(t *testing.T, entity string) *azservicebus.Sender {
	t.Helper()
	s, err := e.c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// isolated returns an env with the same node and its own client (AMQP connection), for
// subtests that provoke fatal link errors: the SDK then closes the client's whole
// connection, which would disturb the other parallel subtests sharing e.c.
func (e *env) isolated(t *testing.T) *env {
	t.Helper()
	return &env{n: e.n, admin: e.admin, c: e.n.Client(t)}
}

func (e *env) receiver(t *testing.T, queue string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := e.c.NewReceiverForQueue(queue, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func (e *env) subReceiver(t *testing.T, topic, sub string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := e.c.NewReceiverForSubscription(topic, sub, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// dlq is a receiver on the queue's dead-letter sub-queue (S-ENT-1, S-DLQ-1).
func (e *env) dlq(t *testing.T, queue string) *azservicebus.Receiver {
	t.Helper()
	return e.receiver(t, queue, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
}

func send(t *testing.T, s *azservicebus.Sender, msgs ...*azservicebus.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := s.SendMessage(testCtx(t), m, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

func body(s string) *azservicebus.Message { return &azservicebus.Message{Body: []byte(s)} }

// msgReceiver is what Receiver and SessionReceiver have in common for receiving.
type msgReceiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receiveN receives until it has exactly n messages or within fails after the deadline.
func receiveN(t *testing.T, r msgReceiver, n int, within time.Duration) []*azservicebus.ReceivedMessage {
	t.Helper()
	got := receiveUpTo(t, r, n, within)
	if len(got) != n {
		t.Fatalf("received %d messages within %v, want %d: %v", len(got), within, n, bodies(got))
	}
	return got
}

// receiveUpTo receives until it has n messages or the time is up, and returns what it has.
func receiveUpTo(t *testing.T, r msgReceiver, n int, within time.Duration) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	deadline := time.Now().Add(within)
	for len(got) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		msgs, err := r.ReceiveMessages(ctx, n-len(got), waitForAll(left))
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}

// waitForAll makes ReceiveMessages return only once it has every message asked for
// (or its context ends), so that it leaves no credit on the link. The SDK releases
// whatever arrives between two ReceiveMessages calls while credit is left, and a
// released message comes back behind those the broker had already sent: with the
// SDK's default (20 ms after the first message) a busy machine sees messages out of
// sequence order (docs/guarantees.md, "Order").
func waitForAll(d time.Duration) *azservicebus.ReceiveMessagesOptions {
	return &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: d}
}

// receiveOne receives exactly one message within the time given.
func receiveOne(t *testing.T, r msgReceiver, within time.Duration) *azservicebus.ReceivedMessage {
	t.Helper()
	return receiveN(t, r, 1, within)[0]
}

// expectNothing checks that no message arrives for the duration given.
func expectNothing(t *testing.T, r msgReceiver, wait time.Duration) {
	t.Helper()
	if got := receiveUpTo(t, r, 1, wait); len(got) != 0 {
		t.Fatalf("got unexpected messages %v", bodies(got))
	}
}

func bodies(msgs []*azservicebus.ReceivedMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	return out
}

// peekAll browses the whole entity from the start (S-LOCK-11).
func peekAll(t *testing.T, r interface {
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}) []*azservicebus.ReceivedMessage {
	t.Helper()
	msgs, err := r.PeekMessages(testCtx(t), 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)})
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	return msgs
}

// sbCode returns the SDK error code of err, or "" if it is not an *azservicebus.Error.
func sbCode(err error) azservicebus.Code {
	var e *azservicebus.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func wantCode(t *testing.T, err error, code azservicebus.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want code %q", code)
	}
	if got := sbCode(err); got != code {
		t.Fatalf("error %v (%T) has code %q, want %q", err, err, got, code)
	}
}

// newClusterEnv starts a 3-node cluster whose node n3 is drained before the test creates
// anything, so that placement puts no replica there, and points the clients at n3.
func newClusterEnv(t *testing.T) *env {
	t.Helper()
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "2"))
	n := c.Nodes[2]
	if out, err := n.Qbctl(t, "node", "drain", n.ID); err != nil {
		t.Fatalf("drain %s: %v\n%s", n.ID, err, out)
	}
	return &env{n: n, admin: n.AdminClient(t), c: n.Client(t)}
}

// rawMgmt is a bare AMQP connection (go-amqp, SASL PLAIN with the root key) holding a
// request/response link pair on one entity's $management node. Unlike an SDK client,
// which names only the session its own receiver holds, it can name any session and any
// lock token: it plays a second client trying to act on a session another connection
// holds.
type rawMgmt struct {
	snd   *amqp.Sender
	rcv   *amqp.Receiver
	reply string
	n     int
}

// goAMQPSession opens a go-amqp connection to the node, logged in with SASL PLAIN and
// the connection string's key, and a session on it; both close with the test.
func (e *env) goAMQPSession(t *testing.T) *amqp.Session {
	t.Helper()
	kv := map[string]string{}
	for _, part := range strings.Split(e.n.ConnectionString, ";") {
		if k, v, ok := strings.Cut(part, "="); ok {
			kv[k] = v
		}
	}
	ctx := testCtx(t)
	conn, err := amqp.Dial(ctx, "amqp://"+e.n.AMQP, &amqp.ConnOptions{
		SASLType: amqp.SASLTypePlain(kv["SharedAccessKeyName"], kv["SharedAccessKey"]),
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func (e *env) rawMgmt(t *testing.T, entity string) *rawMgmt {
	t.Helper()
	ctx := testCtx(t)
	sess := e.goAMQPSession(t)
	node := entity + "/$management"
	m := &rawMgmt{reply: "raw-reply-" + name("r")}
	var err error
	if m.snd, err = sess.NewSender(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	if m.rcv, err = sess.NewReceiver(ctx, node, &amqp.ReceiverOptions{TargetAddress: m.reply, Credit: 10}); err != nil {
		t.Fatal(err)
	}
	return m
}

// call sends one $management request and returns the response's statusCode.
func (m *rawMgmt) call(t *testing.T, op string, body map[string]any) int32 {
	t.Helper()
	st, _, _ := m.callFull(t, op, body)
	return st
}

// callBody sends one $management request and returns the response's statusCode and body.
func (m *rawMgmt) callBody(t *testing.T, op string, body map[string]any) (int32, map[string]any) {
	t.Helper()
	st, out, _ := m.callFull(t, op, body)
	return st, out
}

// callDesc is call, returning the response's statusDescription too.
func (m *rawMgmt) callDesc(t *testing.T, op string, body map[string]any) (int32, string) {
	t.Helper()
	st, _, desc := m.callFull(t, op, body)
	return st, desc
}

// callFull sends one $management request and returns the response's statusCode, body
// and statusDescription.
func (m *rawMgmt) callFull(t *testing.T, op string, body map[string]any) (int32, map[string]any, string) {
	t.Helper()
	ctx := testCtx(t)
	m.n++
	id := fmt.Sprint("req-", m.n)
	req := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: &m.reply},
		ApplicationProperties: map[string]any{"operation": op},
		Value:                 body,
	}
	if err := m.snd.Send(ctx, req, nil); err != nil {
		t.Fatalf("%s: send: %v", op, err)
	}
	resp, err := m.rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("%s: receive: %v", op, err)
	}
	_ = m.rcv.AcceptMessage(ctx, resp)
	if resp.Properties == nil || resp.Properties.CorrelationID != id {
		t.Fatalf("%s: response to another request: %+v", op, resp.Properties)
	}
	st, _ := resp.ApplicationProperties["statusCode"].(int32)
	out, _ := resp.Value.(map[string]any)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	return st, out, desc
}
