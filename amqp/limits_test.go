package amqp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestSDKTooManyApplicationProperties: a message with 50,000 small application
// properties, which the SDK's own receiver could not decode, is refused at send
// with a clear error carrying a TrackingId, and the queue is not poisoned: a
// normal message sent after it is received. The queue allows 4 MiB
// messages so that the properties limit, not the message size, refuses it.
func TestSDKTooManyApplicationProperties(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "big", MaxMessageSize: 4 << 20})
	c := rootClient(t, addr)
	s, err := c.NewSender("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, n := range []int{50000, 33000} {
		props := make(map[string]any, n)
		for i := range n {
			props[fmt.Sprint(i)] = true
		}
		// The SDK reports amqp:link:message-size-exceeded as its ErrMessageTooLarge.
		err = s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("poison"), ApplicationProperties: props}, nil)
		if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
			t.Fatalf("%d properties: send answered %v, want ErrMessageTooLarge", n, err)
		}
		// The condition's description (what go-amqp and the other SDKs show) says why.
		sess, err := dialPlain(t, addr).NewSession(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctxT(t), "big", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = snd.Send(ctxT(t), &goamqp.Message{Data: [][]byte{[]byte("poison")}, ApplicationProperties: props}, nil)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondMessageSizeExceeded ||
			!strings.Contains(ae.Description, "application properties") || !strings.Contains(ae.Description, "TrackingId:") {
			t.Fatalf("%d properties: go-amqp send answered %v", n, err)
		}
	}
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("normal"),
		ApplicationProperties: map[string]any{"k": "v"}}, nil); err != nil {
		t.Fatalf("send after the refused one: %v", err)
	}
	r, err := c.NewReceiverForQueue("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	got := receiveN(t, r, 1)
	if string(got[0].Body) != "normal" || got[0].DeliveryCount != 1 {
		t.Fatalf("received %q (delivery count %d)", got[0].Body, got[0].DeliveryCount)
	}
	if err := r.CompleteMessage(ctxT(t), got[0], nil); err != nil {
		t.Fatal(err)
	}
}

// TestApplicationPropertyCountAndDepth: the count and nesting limits refuse a
// message with amqp:invalid-field (configured low here; the default size
// limit of 64 KB is reached first by flat properties).
func TestApplicationPropertyCountAndDepth(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxAppProperties = 3
	cfg.MaxAppPropertyDepth = 1
	enc := func(props Map) []byte {
		raw := encodingAppend(t, nil, &Described{Descriptor: uint64(secAppProperties), Value: props})
		return encodingAppend(t, raw, &Described{Descriptor: uint64(secData), Value: []byte("b")})
	}
	for _, tc := range []struct {
		name  string
		props Map
		err   error
	}{
		{"within", Map{{Key: "a", Value: int64(1)}, {Key: "b", Value: List{int64(1)}}}, nil},
		{"too many", Map{{Key: "a", Value: true}, {Key: "b", Value: true}, {Key: "c", Value: true}, {Key: "d", Value: true}}, errInvalidField},
		{"too deep", Map{{Key: "a", Value: List{List{int64(1)}}}}, errInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseClientMessage(cfg, enc(tc.props))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil {
				if cond, _ := classify(err); cond != condInvalidField {
					t.Fatalf("condition %s", cond)
				}
			}
		})
	}
}

// TestManyConnectionsManyLinksBounded: 200 connections that each try to attach
// 100 links hold at most MaxLinksPerConnection links each; the rest are
// refused with amqp:resource-limit-exceeded, the heap stays within a coarse
// bound, and the node keeps serving (before the limit one connection with a million
// links took 1 GB).
func TestManyConnectionsManyLinksBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 200 connections")
	}
	const conns, tries, limit = 200, 100, 40
	srv, _, addr := testServer(t, func(c *Config) { c.MaxLinksPerConnection = limit })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range conns {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
		rc.next()
		var b []byte
		for h := range uint32(tries) {
			b = frames.AppendFrame(b, frames.TypeAMQP, 0, &frames.Attach{Name: fmt.Sprint("l", h), Handle: h, Role: frames.RoleReceiver,
				Source: &frames.Source{Address: "$cbs"}, Target: &frames.Target{Address: fmt.Sprint("reply-", h)}}, nil)
		}
		rc.write(b)
		// Each link is answered with an attach; a refused one then with a detach.
		attaches, refused := 0, 0
		for attaches < tries || refused < tries-limit {
			switch f := rc.next().(type) {
			case *frames.Attach:
				attaches++
			case *frames.Detach:
				if f.Error == nil || f.Error.Condition != condResourceLimit || !strings.Contains(f.Error.Description, "TrackingId:") {
					t.Fatalf("connection %d: detach %v", i, f.Error)
				}
				refused++
			}
		}
	}
	srv.mu.Lock()
	n := len(srv.conns)
	srv.mu.Unlock()
	if n != conns {
		t.Fatalf("%d connections served, want %d", n, conns)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap grew %d KiB for %d connections with %d links each (%.1f KiB per connection, client side included)",
		grown>>10, conns, limit, float64(grown)/1024/conns)
	if grown > 256<<20 {
		t.Fatalf("heap grew by %d MiB", grown>>20)
	}
	checkHealthy(t, addr)
}

// TestSessionAndHandleLimits: open advertises channel-max and begin
// handle-max from the config; a begin past MaxSessions closes the connection
// and an attach past MaxLinks ends its session, each with
// amqp:resource-limit-exceeded and a TrackingId, while other connections are
// served.
func TestSessionAndHandleLimits(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxSessions, c.ChannelMax, c.MaxLinks = 2, 1, 3 })
	rc := dialRaw(t, addr)
	rc.write(frames.ProtoAMQP[:])
	if h, _ := rc.r.ReadProtoHeader(); h != frames.ProtoAMQP {
		t.Fatalf("header %q", h)
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Open{ContainerID: "limits", MaxFrameSize: 65536, ChannelMax: 100}, nil)
	if o, ok := rc.next().(*frames.Open); !ok || o.ChannelMax != 1 {
		t.Fatalf("open %v, want channel-max 1", o)
	}
	for ch := range uint16(2) {
		rc.frame(frames.TypeAMQP, ch, &frames.Begin{IncomingWindow: 10, OutgoingWindow: 10}, nil)
		if b, ok := rc.next().(*frames.Begin); !ok || b.HandleMax != 2 {
			t.Fatalf("begin %v, want handle-max 2", b)
		}
	}
	// Handle 3 is past handle-max: the session ends.
	rc.frame(frames.TypeAMQP, 1, &frames.Attach{Name: "x", Handle: 3, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: "$cbs"}, Target: &frames.Target{Address: "r"}}, nil)
	if e, ok := rc.next().(*frames.End); !ok || e.Error == nil || e.Error.Condition != condResourceLimit ||
		!strings.Contains(e.Error.Description, "TrackingId:") {
		t.Fatalf("want end with resource-limit-exceeded, got %v", e)
	}
	// A third session is past the limit: the connection closes.
	rc.frame(frames.TypeAMQP, 1, &frames.Begin{IncomingWindow: 10, OutgoingWindow: 10}, nil)
	rc.next() // the begin of the session on channel 1 again (one of two)
	rc.frame(frames.TypeAMQP, 2, &frames.Begin{IncomingWindow: 10, OutgoingWindow: 10}, nil)
	rc.expectClose(condResourceLimit)
	checkHealthy(t, addr)
}

// TestIdleConnectionsBeyondTheLimit: connections that only send a protocol
// header cannot pile up: past MaxConnections a connection is still answered
// (its open gets a close with amqp:resource-limit-exceeded), and past a
// further margin of such refusals the socket is closed at once. Once the idle
// ones go, the node serves again.
func TestIdleConnectionsBeyondTheLimit(t *testing.T) {
	const max, dials = 20, 200
	_, _, addr := testServer(t, func(c *Config) { c.MaxConnections = max })
	var rcs []*rawClient
	closed := 0
	for range dials {
		rc := dialRaw(t, addr)
		rc.write(frames.ProtoAMQP[:])
		if _, err := rc.r.ReadProtoHeader(); err != nil {
			closed++
			rc.nc.Close()
			continue
		}
		rcs = append(rcs, rc)
	}
	if want := dials - max - maxRefusing; closed != want {
		t.Fatalf("%d connections closed at once, want %d", closed, want)
	}
	// The last one answered is over the limit: its open gets the reason.
	last := rcs[len(rcs)-1]
	last.frame(frames.TypeAMQP, 0, &frames.Open{ContainerID: "over", MaxFrameSize: 65536}, nil)
	last.expectClose(condResourceLimit)
	for _, rc := range rcs {
		rc.nc.Close()
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		c, err := goamqp.Dial(ctxT(t), "amqp://"+addr, &goamqp.ConnOptions{
			SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "secret-key")})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.NewSession(ctxT(t), nil)
		return err
	})
}
