package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// Stats.Entities counts the SDK's links to each entity by role, and the connections they
// come over (a dead-letter receiver counts on its entity); closing them takes the
// entity out.
func TestStatsCountLinksPerEntity(t *testing.T) {
	srv, _, addr := testServer(t, nil)
	c := rootClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.NewSender("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReceiveMessages(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	d, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PeekMessages(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		got := srv.Stats().Entities["q1"]
		if got != (EntityLinks{SenderLinks: 1, ReceiverLinks: 2, Connections: 1}) {
			return fmt.Errorf("q1: %+v, want 1 sender, 2 receivers, 1 connection", got)
		}
		return nil
	})
	for _, closer := range []interface{ Close(context.Context) error }{s, r, d} {
		if err := closer.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if e, ok := srv.Stats().Entities["q1"]; ok {
			return fmt.Errorf("q1 still counted after its links closed: %+v", e)
		}
		return nil
	})
}
