package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
)

// TestSDKTooManyApplicationProperties: a message with 50,000 small application
// properties, which the SDK's own receiver could not decode, is refused at send
// with a clear error carrying a TrackingId, and the queue is not poisoned: a
// normal message sent after it is received (issue 14). The queue allows 4 MiB
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
