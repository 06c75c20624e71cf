package testutil

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a 127.0.0.1 address whose TCP and UDP ports are both free now (a
// cluster port serves TCP and gossip over UDP on the same number).
func FreeAddr(t testing.TB) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free TCP and UDP port pair on 127.0.0.1")
	return ""
}

// StartNodes is the in-process multi-node harness: it picks a free cluster address for
// each of n nodes, starts them all at once with start (a node of a forming cluster only
// serves once its peers are up), each told every node's address, and closes them when
// the test ends. It fails the test, closing what started, if any start fails within
// timeout. Each close is bounded (Bounded, CloseLimit). It does not know what a node is, so any package's tests can use it with their
// own start function.
func StartNodes[N any](t testing.TB, n int, timeout time.Duration,
	start func(ctx context.Context, i int, addrs []string) (N, error), stop func(N)) []N {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = FreeAddr(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nodes := make([]N, n)
	errs := make([]error, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			nodes[i], errs[i] = start(ctx, i, addrs)
			ok[i] = errs[i] == nil
		}(i)
	}
	wg.Wait()
	t.Cleanup(func() {
		for i, nd := range nodes {
			if ok[i] {
				Bounded(t, fmt.Sprintf("node %d of %d", i+1, n), CloseLimit, func() { stop(nd) })
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d of %d: %v", i+1, n, err)
		}
	}
	return nodes
}
