package admin_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/quorumbus/quorumbus/cluster/admin"
)

// Runtime counts that cannot be read (a partition still electing its leader) make a GET
// answer 503, never counts of zero that a client would take for the truth; a create
// still succeeds, since its change is committed.
func TestRuntimeUnavailableIs503(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.store.mu.Lock()
	e.store.rtFail = errors.New("partition has no leader yet: " + admin.ErrUnavailable.Error())
	e.store.mu.Unlock()
	if _, err := e.ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatalf("create while counts are unavailable: %v", err)
	}
	_, err := e.ac.GetQueueRuntimeProperties(ctx, "q", nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GetQueueRuntimeProperties = %v, want a 503", err)
	}
	e.store.mu.Lock()
	e.store.rtFail = nil
	e.store.mu.Unlock()
	if rt, err := e.ac.GetQueueRuntimeProperties(ctx, "q", nil); err != nil || rt == nil {
		t.Fatalf("after recovery: %v %v", rt, err)
	}
}
