package amqp

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// idBackend records, for every Backend call, the method and the ConnectionID of its ctx.
type idBackend struct {
	*memBackend
	mu    sync.Mutex
	calls []idCall
}

type idCall struct{ method, id string }

func (b *idBackend) rec(ctx context.Context, method string) {
	b.mu.Lock()
	b.calls = append(b.calls, idCall{method, ConnectionID(ctx)})
	b.mu.Unlock()
}

// take returns the calls recorded so far and forgets them.
func (b *idBackend) take() []idCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.calls
	b.calls = nil
	return out
}

func (b *idBackend) SASKey(ctx context.Context, name string) (SASKey, error) {
	b.rec(ctx, "SASKey")
	return b.memBackend.SASKey(ctx, name)
}
func (b *idBackend) EntitySASKey(ctx context.Context, path, name string) (SASKey, error) {
	b.rec(ctx, "EntitySASKey")
	return b.memBackend.EntitySASKey(ctx, path, name)
}
func (b *idBackend) Entity(ctx context.Context, path string) (EntityInfo, error) {
	b.rec(ctx, "Entity")
	return b.memBackend.Entity(ctx, path)
}
func (b *idBackend) Send(ctx context.Context, entity string, msgs []*Message) error {
	b.rec(ctx, "Send")
	return b.memBackend.Send(ctx, entity, msgs)
}
func (b *idBackend) Schedule(ctx context.Context, entity string, msgs []*Message) ([]int64, error) {
	b.rec(ctx, "Schedule")
	return b.memBackend.Schedule(ctx, entity, msgs)
}
func (b *idBackend) CancelScheduled(ctx context.Context, entity string, seqs []int64) error {
	b.rec(ctx, "CancelScheduled")
	return b.memBackend.CancelScheduled(ctx, entity, seqs)
}
func (b *idBackend) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	b.rec(ctx, "Receive")
	return b.memBackend.Receive(ctx, req)
}
func (b *idBackend) Settle(ctx context.Context, ss []Settlement) []error {
	b.rec(ctx, "Settle")
	return b.memBackend.Settle(ctx, ss)
}
func (b *idBackend) RenewLock(ctx context.Context, a Address, sid string, tokens []UUID) ([]time.Time, error) {
	b.rec(ctx, "RenewLock")
	return b.memBackend.RenewLock(ctx, a, sid, tokens)
}
func (b *idBackend) Peek(ctx context.Context, a Address, sid string, from int64, n int) ([]*Delivery, error) {
	b.rec(ctx, "Peek")
	return b.memBackend.Peek(ctx, a, sid, from, n)
}
func (b *idBackend) ReceiveDeferred(ctx context.Context, a Address, sid string, mode ReceiveMode, seqs []int64) ([]*Delivery, error) {
	b.rec(ctx, "ReceiveDeferred")
	return b.memBackend.ReceiveDeferred(ctx, a, sid, mode, seqs)
}
func (b *idBackend) AcceptSession(ctx context.Context, a Address, id string, wait time.Duration) (string, time.Time, error) {
	b.rec(ctx, "AcceptSession")
	return b.memBackend.AcceptSession(ctx, a, id, wait)
}
func (b *idBackend) ReleaseSession(ctx context.Context, a Address, id string) error {
	b.rec(ctx, "ReleaseSession")
	return b.memBackend.ReleaseSession(ctx, a, id)
}
func (b *idBackend) RenewSessionLock(ctx context.Context, a Address, id string) (time.Time, error) {
	b.rec(ctx, "RenewSessionLock")
	return b.memBackend.RenewSessionLock(ctx, a, id)
}
func (b *idBackend) SessionState(ctx context.Context, a Address, id string) ([]byte, error) {
	b.rec(ctx, "SessionState")
	return b.memBackend.SessionState(ctx, a, id)
}
func (b *idBackend) SetSessionState(ctx context.Context, a Address, id string, state []byte) error {
	b.rec(ctx, "SetSessionState")
	return b.memBackend.SetSessionState(ctx, a, id, state)
}
func (b *idBackend) ListSessions(ctx context.Context, a Address, skip, top int) ([]string, error) {
	b.rec(ctx, "ListSessions")
	return b.memBackend.ListSessions(ctx, a, skip, top)
}

var _ EntityAuthenticator = (*idBackend)(nil)

// TestConnectionIDOnEveryBackendCall: every Backend call a connection makes carries its
// ConnectionID — link attaches, receives, settlements, $cbs, and the $management
// requests of a session receiver (renew-session-lock, get/set-session-state,
// receive-by-sequence-number, update-disposition), which the SDK sends on a separate
// link of the same connection — and another connection's calls carry another id.
func TestConnectionIDOnEveryBackendCall(t *testing.T) {
	mb := newMemBackend()
	mb.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	mb.addEntity(EntityInfo{Kind: KindQueue, Path: "sq", RequiresSession: true})
	b := &idBackend{memBackend: mb}
	cfg := DefaultConfig()
	cfg.Addresses = []string{"127.0.0.1:0"}
	s, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	addr := s.Addrs()[0].String()
	ctx := ctxT(t)

	// Connection A exercises every call a receiver makes.
	a := rootClient(t, addr)
	send(t, a, "q1", &azservicebus.Message{Body: []byte("x")})
	send(t, a, "sq", &azservicebus.Message{Body: []byte("s1"), SessionID: ptrTo("S")},
		&azservicebus.Message{Body: []byte("s2"), SessionID: ptrTo("S")})
	r, err := a.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receiveN(t, r, 1)[0]
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PeekMessages(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	r.Close(ctx)
	sr, err := a.AcceptSessionForQueue(ctx, "sq", "S", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("st"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sr.GetSessionState(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := sr.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ms := receiveN(t, sr, 2)
	if err := sr.DeferMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	def, err := sr.ReceiveDeferredMessages(ctx, []int64{*ms[0].SequenceNumber}, nil)
	if err != nil || len(def) != 1 {
		t.Fatalf("receive deferred: %d %v", len(def), err)
	}
	for _, m := range []*azservicebus.ReceivedMessage{def[0], ms[1]} {
		if err := sr.CompleteMessage(ctx, m, nil); err != nil { // the deferred one via $management
			t.Fatal(err)
		}
	}
	if err := sr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx)

	callsA := b.take()
	idA := checkOneID(t, "A", callsA, "Send", "Receive", "Settle", "RenewLock", "Peek", "AcceptSession",
		"SetSessionState", "SessionState", "RenewSessionLock", "ReceiveDeferred", "ReleaseSession")

	// Connection B gets an id of its own.
	bc := rootClient(t, addr)
	send(t, bc, "sq", &azservicebus.Message{Body: []byte("b"), SessionID: ptrTo("T")})
	sb, err := bc.AcceptSessionForQueue(ctx, "sq", "T", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	sb.Close(ctx)
	bc.Close(ctx)
	idB := checkOneID(t, "B", b.take(), "Send", "AcceptSession", "RenewSessionLock")
	if idA == idB {
		t.Fatalf("connections A and B share the id %s", idA)
	}
}

// checkOneID checks that every call has the same non-empty ConnectionID (32 hex digits)
// and that each wanted method was called; it returns the id.
func checkOneID(t *testing.T, who string, calls []idCall, want ...string) string {
	t.Helper()
	seen := map[string]bool{}
	id := ""
	for _, c := range calls {
		seen[c.method] = true
		if len(c.id) != 32 {
			t.Errorf("%s: %s called with ConnectionID %q", who, c.method, c.id)
			continue
		}
		if id == "" {
			id = c.id
		} else if c.id != id {
			t.Errorf("%s: %s called with ConnectionID %s, earlier calls with %s", who, c.method, c.id, id)
		}
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("%s: no %s call recorded (calls: %v)", who, w, calls)
		}
	}
	return id
}
