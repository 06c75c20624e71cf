package testutil

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A port taken by another process between FreeAddr and the node's bind fails that
// node's start with EADDRINUSE: the other starts are cancelled at once (not left to
// wait for the missing peer until the timeout) and all start again on new ports.
func TestStartNodesStartsAgainWhenAPortIsTaken(t *testing.T) {
	var attempts, attempts0 atomic.Int32
	var waited atomic.Pointer[error]
	nodes := StartNodes(t, 2, time.Minute, func(ctx context.Context, i int, addrs []string) (net.Listener, error) {
		if i == 1 {
			if attempts.Add(1) == 1 {
				// The first time, node 1 waits for its peer, as a forming cluster does.
				<-ctx.Done()
				err := ctx.Err()
				waited.Store(&err)
				return nil, err
			}
			return net.Listen("tcp", addrs[1])
		}
		if attempts0.Add(1) == 1 {
			squat, err := net.Listen("tcp", addrs[0]) // another process took the port
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { squat.Close() })
		}
		return net.Listen("tcp", addrs[0])
	}, func(l net.Listener) { l.Close() })
	if len(nodes) != 2 || nodes[0] == nil || nodes[1] == nil {
		t.Fatalf("nodes %v", nodes)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("node 1 started %d times, want 2", n)
	}
	if e := waited.Load(); e == nil || !errors.Is(*e, context.Canceled) {
		t.Fatalf("node 1's first start ended with %v, want it cancelled", e)
	}
}
