package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// MessageReceiver is what the SDK's Receiver and SessionReceiver have in common for
// receiving.
type MessageReceiver interface {
	ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// ReceiveN receives exactly n messages of r within the given time, asking again while
// ReceiveMessages hands over fewer; it fails the test otherwise. Each call waits for all
// that is missing, which leaves the SDK no credit to release what arrives after it
// returns (a released message comes back behind those already sent).
func ReceiveN(t testing.TB, r MessageReceiver, n int, within time.Duration) []*azservicebus.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		ms, err := r.ReceiveMessages(ctx, n-len(got), &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: within})
		if err != nil {
			t.Fatalf("receive: %v (have %d of %d)", err, len(got), n)
		}
		got = append(got, ms...)
	}
	return got
}

// DeadLetterDeferLock receives three messages of r (PeekLock) and dead-letters the
// first, defers the second and returns the third, still locked: a queue or
// subscription with one message in each state, for purge and delete tests.
func DeadLetterDeferLock(t testing.TB, r *azservicebus.Receiver, within time.Duration) (locked *azservicebus.ReceivedMessage) {
	t.Helper()
	ms := ReceiveN(t, r, 3, within)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := r.DeadLetterMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.DeferMessage(ctx, ms[1], nil); err != nil {
		t.Fatal(err)
	}
	return ms[2]
}
