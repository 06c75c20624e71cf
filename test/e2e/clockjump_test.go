package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// TestClockOffsetFile: a node started with --clock-offset-file stamps messages on its
// moved clock, and a forward jump written to the file while it runs ends a peek lock
// early (the message is delivered again with a higher delivery count), as a real clock
// jump on a partition leader would. This is the seam the fault suite's clock-jump
// fault uses.
func TestClockOffsetFile(t *testing.T) {
	offset := filepath.Join(t.TempDir(), "offset")
	if err := os.WriteFile(offset, []byte("1h"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := harness.Start(t, "--clock-offset-file", offset)
	q := name("clock")
	if _, err := n.AdminClient(t).CreateQueue(testCtx(t), q, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		LockDuration: to.Ptr("PT5M"),
	}}); err != nil {
		t.Fatal(err)
	}
	c := n.Client(t)
	s, err := c.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(testCtx(t), &azservicebus.Message{Body: []byte("tick")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(testCtx(t), 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	m := msgs[0]
	if ahead := time.Until(*m.EnqueuedTime); ahead < 59*time.Minute || ahead > 61*time.Minute {
		t.Fatalf("EnqueuedTime %v is %v from the machine's clock, want about 1h ahead", m.EnqueuedTime, ahead)
	}
	if until := m.LockedUntil.Sub(*m.EnqueuedTime); until < 4*time.Minute {
		t.Fatalf("LockedUntil %v only %v after enqueue, want the 5-minute lock", m.LockedUntil, until)
	}

	// Jump 10 minutes further: the 5-minute lock is past, so the message comes again.
	if err := os.WriteFile(offset, []byte("1h10m"), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		got, err := r.ReceiveMessages(testCtx(t), 1, &azservicebus.ReceiveMessagesOptions{})
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return fmt.Errorf("not delivered again yet")
		}
		if got[0].MessageID != m.MessageID || got[0].DeliveryCount != 2 {
			return fmt.Errorf("got %s with delivery count %d, want %s again with count 2", got[0].MessageID, got[0].DeliveryCount, m.MessageID)
		}
		return r.CompleteMessage(testCtx(t), got[0], nil)
	})
	if err := r.CompleteMessage(testCtx(t), m, nil); err == nil {
		t.Fatal("completing with the lock the jump ended succeeded")
	}
}
