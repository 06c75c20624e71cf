package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
// timeout, naming every node that failed. Each close is bounded (Bounded, CloseLimit).
// It does not know what a node is, so any package's tests can use it with their own
// start function.
//
// A port FreeAddr found free can be taken by another process (test packages run in
// parallel) before its node binds it: then the other starts are cancelled, the nodes
// that started are closed, and all start again on new addresses (up to bindTries).
func StartNodes[N any](t testing.TB, n int, timeout time.Duration,
	start func(ctx context.Context, i int, addrs []string) (N, error), stop func(N)) []N {
	t.Helper()
	for try := 1; ; try++ {
		nodes, ok, errs, taken := startNodesOnce(t, n, timeout, start)
		if taken && try < bindTries {
			for i, nd := range nodes {
				if ok[i] {
					Bounded(t, fmt.Sprintf("node %d of %d", i+1, n), CloseLimit, func() { stop(nd) })
				}
			}
			t.Logf("a cluster port was taken before its node bound it (%v); starting the %d nodes again on new ports", errors.Join(errs...), n)
			continue
		}
		t.Cleanup(func() {
			for i, nd := range nodes {
				if ok[i] {
					Bounded(t, fmt.Sprintf("node %d of %d", i+1, n), CloseLimit, func() { stop(nd) })
				}
			}
		})
		var failed []string
		for i, err := range errs {
			if err != nil {
				failed = append(failed, fmt.Sprintf("node %d of %d: %v", i+1, n, err))
			}
		}
		if len(failed) > 0 {
			t.Fatal(strings.Join(failed, "; "))
		}
		return nodes
	}
}

// bindTries bounds StartNodes' attempts when a port is taken under it.
const bindTries = 3

// startNodesOnce starts n nodes on fresh addresses; taken reports that a start failed
// because its port was in use, in which case the others' starts were cancelled.
func startNodesOnce[N any](t testing.TB, n int, timeout time.Duration,
	start func(ctx context.Context, i int, addrs []string) (N, error)) (nodes []N, ok []bool, errs []error, taken bool) {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = FreeAddr(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nodes, ok, errs = make([]N, n), make([]bool, n), make([]error, n)
	var inUse atomic.Bool
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			nodes[i], errs[i] = start(ctx, i, addrs)
			ok[i] = errs[i] == nil
			if errors.Is(errs[i], syscall.EADDRINUSE) {
				inUse.Store(true)
				cancel() // the others would wait for this node until timeout
			}
		}(i)
	}
	wg.Wait()
	return nodes, ok, errs, inUse.Load()
}
