package amqp

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestLimitedKeyCannotTellMissingFromExisting: a key that lacks the right an operation
// needs gets the same refusal (unauthorized) for an entity that exists and one that does
// not, on the attach of a receiver or sender and on $management (peek), so it cannot
// find out which entities exist.
func TestLimitedKeyCannotTellMissingFromExisting(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.mu.Lock()
	b.keys["sender"] = SASKey{Name: "sender", Key: "send-key", Rights: RightSend}
	b.mu.Unlock()
	sendOnly := sdkClient(t, addr, "sender", "send-key")
	listenOnly := sdkClient(t, addr, "listen", "listen-key")

	code := func(err error) azservicebus.Code {
		var e *azservicebus.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return azservicebus.Code("other: " + errString(err))
	}
	receive := func(r *azservicebus.Receiver, err error) error {
		if err != nil {
			return err
		}
		defer r.Close(context.Background())
		ctx, cancel := context.WithTimeout(ctxT(t), 5e9)
		defer cancel()
		_, err = r.ReceiveMessages(ctx, 1, nil)
		return err
	}
	peek := func(r *azservicebus.Receiver, err error) error {
		if err != nil {
			return err
		}
		defer r.Close(context.Background())
		_, err = r.PeekMessages(ctxT(t), 1, nil)
		return err
	}
	sendTo := func(entity string) error {
		s, err := listenOnly.NewSender(entity, nil)
		if err != nil {
			return err
		}
		defer s.Close(context.Background())
		return s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil)
	}
	for _, tc := range []struct {
		what              string
		existing, missing error
	}{
		{"receive from a queue with a Send key",
			receive(sendOnly.NewReceiverForQueue("q1", nil)), receive(sendOnly.NewReceiverForQueue("nope", nil))},
		{"receive from a subscription with a Send key",
			receive(sendOnly.NewReceiverForSubscription("t1", "s1", nil)), receive(sendOnly.NewReceiverForSubscription("t1", "nope", nil))},
		{"peek a queue with a Send key",
			peek(sendOnly.NewReceiverForQueue("q1", nil)), peek(sendOnly.NewReceiverForQueue("nope", nil))},
		{"send to a queue with a Listen key", sendTo("q1"), sendTo("nope")},
	} {
		ce, cm := code(tc.existing), code(tc.missing)
		if ce != azservicebus.CodeUnauthorizedAccess || cm != ce {
			t.Errorf("%s: existing entity %q (%v), missing entity %q (%v); want both %q",
				tc.what, ce, tc.existing, cm, tc.missing, azservicebus.CodeUnauthorizedAccess)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
