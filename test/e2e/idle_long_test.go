//go:build long

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// S-IDLE-1 in real time, through a real node and the SDKs: a queue left alone for its
// AutoDeleteOnIdle (the 5-minute minimum) disappears, while one that the Go SDK only
// peeks every two minutes stays. About seven minutes.
func TestLongAutoDeleteOnIdle(t *testing.T) {
	e := newEnv(t)
	props := &admin.QueueProperties{AutoDeleteOnIdle: to.Ptr("PT5M")}
	idle := e.queue(t, "idle-gone", props)
	kept := e.queue(t, "idle-peeked", props)
	r := e.receiver(t, kept, nil)
	start := time.Now()
	lastPeek := start
	testutil.WaitFor(t, 8*time.Minute, func() error {
		if time.Since(lastPeek) >= 2*time.Minute {
			if _, err := r.PeekMessages(testCtx(t), 1, nil); err != nil {
				return testutil.Permanent(fmt.Errorf("peek: %w", err))
			}
			lastPeek = time.Now()
		}
		q, err := e.admin.GetQueue(testCtx(t), idle, nil)
		if err != nil {
			return err
		}
		if q != nil {
			return fmt.Errorf("%s still exists after %v", idle, time.Since(start).Round(time.Second))
		}
		return nil
	})
	if d := time.Since(start); d < 5*time.Minute {
		t.Errorf("%s was deleted after %v, before its AutoDeleteOnIdle", idle, d)
	}
	if q, err := e.admin.GetQueue(testCtx(t), kept, nil); err != nil || q == nil {
		t.Errorf("the peeked queue is gone: %v", err)
	}
}
