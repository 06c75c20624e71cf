package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// S-SEND-1, S-LOCK-2: the SDK's quickstart path against a real node: create a queue with
// the admin client, send, receive in peek-lock, complete; the queue is then empty.
func TestQuickstart(t *testing.T) {
	n := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.AdminClient(t).CreateQueue(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	c := n.Client(t)
	s, err := c.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || string(msgs[0].Body) != "hello" {
		t.Fatalf("got %d messages %v", len(msgs), msgs)
	}
	if msgs[0].DeliveryCount != 1 || msgs[0].SequenceNumber == nil || *msgs[0].SequenceNumber < 1 {
		t.Errorf("delivery count %d, sequence number %v", msgs[0].DeliveryCount, msgs[0].SequenceNumber)
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 0 {
		t.Fatalf("queue not empty after complete: %d left", len(peeked))
	}
}
