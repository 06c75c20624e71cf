package explorer_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cmd/internal/bridge"
	"github.com/quorumbus/quorumbus/cmd/internal/explorer"
)

// env is one real node wired as run.go wires it: AMQP listener, admin API, and the
// explorer in front of the admin API.
type env struct {
	t       *testing.T
	url     string // the admin port (httptest server)
	node    *cluster.Node
	client  *azservicebus.Client
	keyName string
	key     string
}

func start(t *testing.T) *env {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ClusterAddr = "127.0.0.1:0"
	cfg.Raft = cluster.RaftConfig{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ac := amqp.DefaultConfig()
	ac.Addresses = []string{ln.Addr().String()}
	ac.Namespace = node.Namespace()
	srv, err := amqp.New(ac, bridge.New(node))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })

	hc := admin.DefaultConfig()
	hc.Store = node.Store()
	h, err := admin.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	xc := explorer.DefaultConfig()
	xc.AMQPAddr = ln.Addr().String()
	xc.Authorize = h.Authorize
	xc.Next = h
	xc.ReceiveRoundTimeout = 500 * time.Millisecond
	xc.Sessions = explorer.NodeSessions(node.Router())
	x, err := explorer.New(xc)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(x)
	t.Cleanup(hs.Close)

	name, key := node.DefaultKey()
	c, err := azservicebus.NewClientFromConnectionString(amqp.ConnectionString(ln.Addr().String(), amqp.SASKey{Name: name, Key: key}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return &env{t: t, url: hs.URL, node: node, client: c, keyName: name, key: key}
}

// sessions is run.go's explorerSessions (package main cannot be imported).
// token signs a SAS token for the whole namespace, as the page does.
func token(keyName, key string, ttl time.Duration) string {
	sr := url.QueryEscape("http://127.0.0.1/")
	se := strconv.FormatInt(time.Now().Add(ttl).Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sr + "\n" + se))
	sig := base64.StdEncoding.EncodeToString(m.Sum(nil))
	return fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", sr, url.QueryEscape(sig), se, keyName)
}

// do sends a request with the default key's token (auth "" sends none).
func (e *env) do(method, path, auth string, body any) *http.Response {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (e *env) auth() string { return token(e.keyName, e.key, time.Hour) }

// call posts body to an API path and decodes the JSON answer into out, failing unless
// the status is want.
func (e *env) call(path string, body any, want int, out any) {
	e.t.Helper()
	resp := e.do(http.MethodPost, path, e.auth(), body)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		e.t.Fatalf("POST %s: %d %s, want %d", path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("POST %s: %v in %s", path, err, b)
		}
	}
}

func (e *env) queue(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.node.Store().Apply(ctx, &meta.CreateQueue{Name: name, Properties: meta.DefaultQueueProperties()}); err != nil {
		e.t.Fatal(err)
	}
}

type peeked struct {
	Messages []explorer.Message `json:"messages"`
}

// The page is at "/", its assets under /$ui/, with a policy that loads nothing from
// elsewhere; every other path still reaches the admin API.
func TestPageAssetsAndAdminAPIShareThePort(t *testing.T) {
	e := start(t)
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script src="/$ui/app.js"`},
		{"/$ui/app.js", "javascript", "/$ui/api/peek"},
		{"/$ui/sas.js", "javascript", "function sha256"},
		{"/$ui/app.css", "text/css", "--accent"},
	} {
		resp := e.do(http.MethodGet, c.path, "", nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), c.ctype) ||
			!strings.Contains(string(b), c.contains) {
			t.Errorf("GET %s: %d %q, want 200 %s containing %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.ctype, c.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
	}
	if resp := e.do(http.MethodGet, "/$ui/nosuch.js", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET a missing asset: %d, want 404", resp.StatusCode)
	}
	resp := e.do(http.MethodGet, "/$namespaceinfo?api-version=2021-05", e.auth(), nil)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<NamespaceInfo") {
		t.Errorf("the admin API behind the explorer: %d %s", resp.StatusCode, b)
	}
	if resp := e.do(http.MethodGet, "/healthz", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz behind the explorer: %d", resp.StatusCode)
	}
}

// The API takes exactly the tokens the admin API takes, and says what is wrong with a
// request in JSON.
func TestAPIRefusals(t *testing.T) {
	e := start(t)
	e.queue("q")
	peek := map[string]any{"entity": "q"}
	for _, c := range []struct {
		name, method, path, auth string
		body                     any
		code                     int
		says                     string
	}{
		{"no token", http.MethodPost, "/$ui/api/peek", "", peek, 401, "missing Authorization"},
		{"unknown key", http.MethodPost, "/$ui/api/peek", token("nosuch", "k", time.Hour), peek, 401, "not known"},
		{"wrong key", http.MethodPost, "/$ui/api/peek", token(e.keyName, "wrong", time.Hour), peek, 401, "invalid signature"},
		{"expired", http.MethodPost, "/$ui/api/peek", token(e.keyName, e.key, -time.Minute), peek, 401, "expired"},
		{"GET", http.MethodGet, "/$ui/api/peek", e.auth(), nil, 405, "needs POST"},
		{"unknown path", http.MethodPost, "/$ui/api/nosuch", e.auth(), peek, 404, "unknown explorer API path"},
		{"no entity", http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{}, 400, `"entity" is required`},
		{"unknown field", http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{"entity": "q", "sub": "x"}, 400, `unknown field "sub"`},
		{"count too big", http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{"entity": "q", "count": 501}, 400, "outside 1..500"},
		{"missing queue", http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{"entity": "nosuch"}, 404, "nosuch"},
		{"bad schedule", http.MethodPost, "/$ui/api/send", e.auth(), map[string]any{"entity": "q", "scheduledEnqueueTime": "tomorrow"}, 400, "RFC 3339"},
		{"send to a subscription", http.MethodPost, "/$ui/api/send", e.auth(), map[string]any{"entity": "t", "subscription": "s"}, 400, "send to the topic"},
		{"cancel nothing", http.MethodPost, "/$ui/api/scheduled/cancel", e.auth(), map[string]any{"entity": "q"}, 400, `"sequenceNumbers" is empty`},
		{"negative limit", http.MethodPost, "/$ui/api/deadletter/resubmit", e.auth(), map[string]any{"entity": "q", "limit": -1}, 400, "negative"},
		{"resubmit from a missing queue", http.MethodPost, "/$ui/api/deadletter/resubmit", e.auth(), map[string]any{"entity": "nosuch"}, 404, "nosuch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := e.do(c.method, c.path, c.auth, c.body)
			b, _ := io.ReadAll(resp.Body)
			var body struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != c.code || body.Code != c.code ||
				!strings.Contains(strings.ToLower(body.Message), strings.ToLower(c.says)) {
				t.Errorf("%d %s, want %d saying %q", resp.StatusCode, b, c.code, c.says)
			}
		})
	}
}

// A test message sent through the API is what the SDK receives; peek shows active,
// scheduled and deferred messages with their properties and body.
func TestSendAndPeek(t *testing.T) {
	e := start(t)
	e.queue("orders")
	var sent map[string]any
	e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "orders"}, Body: `{"n":1}`,
		ContentType: "application/json", Subject: "s1", MessageID: "m1", CorrelationID: "c1",
		ApplicationProperties: map[string]string{"region": "eu"}}, 200, &sent)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "orders"}, Body: "later",
		ScheduledEnqueueTime: at.Format(time.RFC3339)}, 200, &sent)
	if sent["sequenceNumber"] == nil {
		t.Errorf("scheduling answered %v, want its sequence number", sent)
	}
	e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "orders"}, Body: "\x00\x01\x02"}, 200, nil)

	// Defer the binary one (the third) through the SDK; receive takes the first active.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rcv, err := e.client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	got, err := rcv.ReceiveMessages(ctx, 2, nil)
	if err != nil || len(got) == 0 {
		t.Fatalf("SDK receive: %d, %v", len(got), err)
	}
	for len(got) < 2 {
		more, err := rcv.ReceiveMessages(ctx, 2-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
	}
	if m := got[0]; string(m.Body) != `{"n":1}` || m.MessageID != "m1" || *m.Subject != "s1" || m.ApplicationProperties["region"] != "eu" {
		t.Fatalf("the SDK received %q %q %v", m.Body, m.MessageID, m.ApplicationProperties)
	}
	if err := rcv.AbandonMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := rcv.DeferMessage(ctx, got[1], nil); err != nil {
		t.Fatal(err)
	}

	var p peeked
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}}, 200, &p)
	if len(p.Messages) != 3 {
		t.Fatalf("peeked %d messages, want 3: %+v", len(p.Messages), p.Messages)
	}
	m := p.Messages[0]
	if m.State != "Active" || string(m.Body) != `{"n":1}` || m.BodyType != "data" || m.MessageID != "m1" ||
		m.Subject != "s1" || m.ContentType != "application/json" || m.CorrelationID != "c1" ||
		m.ApplicationProperties["region"] != "eu" || m.ExpiresAt != nil {
		t.Errorf("first message: %+v", m)
	}
	if m := p.Messages[1]; m.State != "Scheduled" || m.ScheduledEnqueueTime == nil || !m.ScheduledEnqueueTime.Equal(at) {
		t.Errorf("second message: state %s, scheduled %v, want Scheduled at %v", m.State, m.ScheduledEnqueueTime, at)
	}
	if m := p.Messages[2]; m.State != "Deferred" || string(m.Body) != "\x00\x01\x02" {
		t.Errorf("third message: state %s, body %q, want Deferred with the binary body", m.State, m.Body)
	}
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}, FromSequenceNumber: p.Messages[1].SequenceNumber, Count: 1}, 200, &p)
	if len(p.Messages) != 1 || p.Messages[0].State != "Scheduled" {
		t.Fatalf("peek from the second sequence number, count 1: %+v", p.Messages)
	}

	// Cancelling the scheduled message removes it; the others stay.
	var cancelled map[string]int
	e.call("/$ui/api/scheduled/cancel", explorer.CancelRequest{Target: explorer.Target{Entity: "orders"},
		SequenceNumbers: []int64{p.Messages[0].SequenceNumber}}, 200, &cancelled)
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}}, 200, &p)
	if cancelled["cancelled"] != 1 || len(p.Messages) != 2 || p.Messages[0].State != "Active" || p.Messages[1].State != "Deferred" {
		t.Errorf("after cancelling the scheduled message (%v): %+v", cancelled, p.Messages)
	}
}

// redrive posts a resubmit or purge and returns its progress lines.
func (e *env) redrive(path string, req explorer.RedriveRequest) []explorer.Progress {
	e.t.Helper()
	resp := e.do(http.MethodPost, path, e.auth(), req)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	var lines []explorer.Progress
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p explorer.Progress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			e.t.Fatalf("progress line %q: %v", sc.Text(), err)
		}
		lines = append(lines, p)
	}
	if len(lines) == 0 || !lines[len(lines)-1].Finished {
		e.t.Fatalf("POST %s: progress %+v does not finish", path, lines)
	}
	return lines
}

func (e *env) deadLetter(queue string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := e.client.NewSender(queue, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close(ctx)
	rcv, err := e.client.NewReceiverForQueue(queue, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rcv.Close(ctx)
	for i := range n {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i),
			ApplicationProperties: map[string]any{"i": int64(i)}}, nil); err != nil {
			e.t.Fatal(err)
		}
	}
	reason := "bad-order"
	for done := 0; done < n; {
		msgs, err := rcv.ReceiveMessages(ctx, n-done, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range msgs {
			if err := rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason}); err != nil {
				e.t.Fatal(err)
			}
			done++
		}
	}
}

// Resubmit moves dead-lettered messages to another queue as copies without their
// dead-letter reason, with progress; purge empties the dead-letter queue.
func TestResubmitAndPurgeDeadLetters(t *testing.T) {
	e := start(t)
	e.queue("orders")
	e.queue("retry")
	e.deadLetter("orders", 3)

	var p peeked
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}, DeadLetter: true}, 200, &p)
	if len(p.Messages) != 3 || p.Messages[0].DeadLetterReason != "bad-order" {
		t.Fatalf("dead letters: %+v", p.Messages)
	}

	lines := e.redrive("/$ui/api/deadletter/resubmit", explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}, To: "retry", Limit: 2})
	if last := lines[len(lines)-1]; last.Done != 2 || last.Total != 2 || last.Error != "" {
		t.Fatalf("resubmit with limit 2: %+v", lines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rcv, err := e.client.NewReceiverForQueue("retry", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	var got []*azservicebus.ReceivedMessage
	for len(got) < 2 {
		msgs, err := rcv.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	for _, m := range got {
		if !strings.HasPrefix(string(m.Body), "m") || m.DeadLetterReason != nil || m.ApplicationProperties["i"] == nil {
			t.Errorf("resubmitted copy: body %q, reason %v, properties %v", m.Body, m.DeadLetterReason, m.ApplicationProperties)
		}
	}
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}, DeadLetter: true}, 200, &p)
	if len(p.Messages) != 1 {
		t.Fatalf("after resubmitting 2 of 3, the dead-letter queue holds %d", len(p.Messages))
	}

	e.deadLetter("orders", 2)
	lines = e.redrive("/$ui/api/deadletter/purge", explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}})
	if last := lines[len(lines)-1]; last.Done != 3 || last.Total != 3 || last.Error != "" {
		t.Fatalf("purge: %+v, want 3 done of the 3 the dead-letter queue held", lines)
	}
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}, DeadLetter: true}, 200, &p)
	if len(p.Messages) != 0 {
		t.Fatalf("after purge the dead-letter queue holds %d", len(p.Messages))
	}
	// The source queue's own messages were not touched by either.
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "orders"}}, 200, &p)
	if len(p.Messages) != 0 {
		t.Fatalf("the queue holds %d active messages, want 0", len(p.Messages))
	}

	// Resubmitting to a queue that does not exist is refused before any dead letter is
	// locked: they stay where they were, ready for the next try.
	e.deadLetter("orders", 1)
	resp := e.do(http.MethodPost, "/$ui/api/deadletter/resubmit", e.auth(), explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}, To: "nosuch"})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `there is no queue or topic \"nosuch\" to resubmit to`) {
		t.Fatalf("resubmit to a missing queue: %d %s", resp.StatusCode, b)
	}
	lines = e.redrive("/$ui/api/deadletter/resubmit", explorer.RedriveRequest{Target: explorer.Target{Entity: "orders"}, To: "retry"})
	if last := lines[len(lines)-1]; last.Done != 1 || last.Error != "" {
		t.Fatalf("resubmit after the refused one: %+v", lines)
	}
}

// The session list shows each session with messages or state, and its state, read
// without taking the session from a consumer.
func TestSessions(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	qp := meta.DefaultQueueProperties()
	qp.RequiresSession = true
	if err := e.node.Store().Apply(ctx, &meta.CreateQueue{Name: "carts", Properties: qp}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b", "a"} {
		e.call("/$ui/api/send", explorer.SendRequest{Target: explorer.Target{Entity: "carts"}, Body: "x", SessionID: id}, 200, nil)
	}
	sr, err := e.client.AcceptSessionForQueue(ctx, "carts", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(ctx)
	if err := sr.SetSessionState(ctx, []byte("step 2"), nil); err != nil {
		t.Fatal(err)
	}
	// AMQP peeks an entity that requires sessions one session at a time: without a
	// session id the broker's refusal is a 400 that says so; with one, the session's
	// messages show.
	resp := e.do(http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{"entity": "carts"})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "requires sessions") {
		t.Fatalf("peek of a session-enabled queue without a session: %d %s", resp.StatusCode, b)
	}
	var p peeked
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "carts"}, SessionID: "b"}, 200, &p)
	if len(p.Messages) != 1 || p.Messages[0].SessionID != "b" {
		t.Fatalf("peek of session b: %+v", p.Messages)
	}
	// Its dead-letter queue has no sessions and is peeked whole.
	e.call("/$ui/api/peek", explorer.PeekRequest{Target: explorer.Target{Entity: "carts"}, DeadLetter: true}, 200, &p)
	if len(p.Messages) != 0 {
		t.Fatalf("peek of the dead letters of a session-enabled queue: %+v", p.Messages)
	}
	// The consumer still holds session a while the list reads its state.
	var got struct {
		Sessions []explorer.Session `json:"sessions"`
		Total    int                `json:"total"`
	}
	e.call("/$ui/api/sessions", explorer.SessionsRequest{Target: explorer.Target{Entity: "carts"}}, 200, &got)
	if got.Total != 2 || len(got.Sessions) != 2 || got.Sessions[0].SessionID != "a" || string(got.Sessions[0].State) != "step 2" ||
		got.Sessions[1].SessionID != "b" || got.Sessions[1].State != nil {
		t.Fatalf("sessions: %+v", got)
	}
	e.call("/$ui/api/sessions", explorer.SessionsRequest{Target: explorer.Target{Entity: "carts"}, Skip: 1, Top: 1}, 200, &got)
	if len(got.Sessions) != 1 || got.Sessions[0].SessionID != "b" {
		t.Fatalf("sessions skip 1 top 1: %+v", got)
	}
	if err := sr.SetSessionState(ctx, []byte("step 3"), nil); err != nil {
		t.Fatalf("the consumer lost its session to the listing: %v", err)
	}
	// Peeking the session the consumer holds is refused, and the consumer keeps it.
	resp = e.do(http.MethodPost, "/$ui/api/peek", e.auth(), map[string]any{"entity": "carts", "sessionId": "a"})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusConflict {
		t.Errorf("peek of a session a consumer holds: %d %s, want 409", resp.StatusCode, b)
	}
	if err := sr.SetSessionState(ctx, []byte("step 4"), nil); err != nil {
		t.Fatalf("the consumer lost its session to the refused peek: %v", err)
	}
	resp = e.do(http.MethodPost, "/$ui/api/sessions", e.auth(), map[string]any{"entity": "nosuch"})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusNotFound {
		t.Errorf("sessions of a missing queue: %d %s", resp.StatusCode, b)
	}
	resp = e.do(http.MethodPost, "/$ui/api/sessions", e.auth(), map[string]any{"entity": "carts", "top": 1001})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("top 1001: %d %s", resp.StatusCode, b)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := explorer.DefaultConfig()
	ok.AMQPAddr, ok.Authorize, ok.Next = "127.0.0.1:5672", func(*http.Request) error { return nil }, http.NotFoundHandler()
	if err := ok.Validate(); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
	for name, f := range map[string]func(c *explorer.Config){
		"AMQPAddr":            func(c *explorer.Config) { c.AMQPAddr = "" },
		"Authorize":           func(c *explorer.Config) { c.Authorize = nil },
		"Next":                func(c *explorer.Config) { c.Next = nil },
		"MaxBodyBytes":        func(c *explorer.Config) { c.MaxBodyBytes = 10 },
		"ReceiveRoundTimeout": func(c *explorer.Config) { c.ReceiveRoundTimeout = 0 },
	} {
		c := *ok
		f(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
}
