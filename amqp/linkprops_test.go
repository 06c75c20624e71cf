package amqp

import (
	"errors"
	"testing"

	goamqp "github.com/Azure/go-amqp"
)

// A sender's attach advertises com.microsoft:max-message-batch-size (the entity's limit,
// as a ulong, which the Go SDK's NewMessageBatch prefers over max-message-size), and an
// attach that declares com.microsoft:entity-type for another kind of entity is refused;
// the .NET SDK's "entity-mgmt" on $management links declares nothing.
func TestVendorLinkProperties(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "small", MaxMessageSize: 4096})
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "small", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := snd.Properties()[maxBatchSizeKey]; got != uint64(4096) || snd.MaxMessageSize() != 4096 {
		t.Errorf("batch size %#v (max-message-size %d), want uint64(4096)", got, snd.MaxMessageSize())
	}
	if _, err := sess.NewSender(ctx, "q1", &goamqp.SenderOptions{Properties: map[string]any{entityTypeKey: int32(0)}}); err != nil {
		t.Errorf("queue declared as a queue: %v", err)
	}
	if _, err := sess.NewReceiver(ctx, "t1/Subscriptions/s1", &goamqp.ReceiverOptions{Properties: map[string]any{entityTypeKey: int32(2)}}); err != nil {
		t.Errorf("subscription declared as a subscription: %v", err)
	}
	if _, err := sess.NewSender(ctx, "q1/$management", &goamqp.SenderOptions{Properties: map[string]any{entityTypeKey: "entity-mgmt"}}); err != nil {
		t.Errorf(".NET management link: %v", err)
	}
	_, err = sess.NewSender(ctx, "q1", &goamqp.SenderOptions{Properties: map[string]any{entityTypeKey: int32(1)}})
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != condNotAllowed {
		t.Fatalf("queue declared as a topic: %v, want %s", err, condNotAllowed)
	}
}
