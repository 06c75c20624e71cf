package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// TestLargeMessages: an entity whose MaxMessageSizeInKilobytes is raised (up to 102,400,
// as on Premium) takes and delivers a 10 MB message through the SDK, intact; above the
// limit the SDK gets its message-too-large error; out of range is a 400.
func TestLargeMessages(t *testing.T) {
	e := newEnv(t)
	q := e.queue(t, "large", &admin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](102400)})
	got, err := e.admin.GetQueue(testCtx(t), q, nil)
	if err != nil || got.MaxMessageSizeInKilobytes == nil || *got.MaxMessageSizeInKilobytes != 102400 {
		t.Fatalf("queue as created: %+v, %v", got, err)
	}
	body := make([]byte, 10<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	send(t, e.sender(t, q), &azservicebus.Message{Body: body})
	r := e.receiver(t, q, nil)
	m := receiveOne(t, r, 60*time.Second)
	if !bytes.Equal(m.Body, body) {
		t.Fatalf("received %d bytes, not the 10 MB sent", len(m.Body))
	}
	if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
		t.Fatal(err)
	}

	small := e.queue(t, "large-small", &admin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](1024)})
	err = e.sender(t, small).SendMessage(testCtx(t), &azservicebus.Message{Body: make([]byte, 2<<20)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("a 2 MB message into a queue limited to 1 MB: %v, want ErrMessageTooLarge", err)
	}

	_, err = e.admin.CreateQueue(testCtx(t), name("large-over"), &admin.CreateQueueOptions{
		Properties: &admin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](102401)}})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "MaxMessageSizeInKilobytes") {
		t.Fatalf("MaxMessageSizeInKilobytes 102401: %v, want a 400 naming the property", err)
	}
}
