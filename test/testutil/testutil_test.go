package testutil

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWaitForReturnsOnceCondHolds(t *testing.T) {
	n := 0
	WaitFor(t, 5*time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// The leak check finds a goroutine that is still running and lets one that finished go.
func TestLeakedFindsRunningGoroutine(t *testing.T) {
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		blockInTestutilLeak(started, stop)
	}()
	<-started
	err := leaked(100*time.Millisecond, []string{"blockInTestutilLeak"})
	if err == nil || !strings.Contains(err.Error(), "blockInTestutilLeak") {
		t.Fatalf("leaked() = %v, want the blocked goroutine listed", err)
	}
	close(stop)
	<-done // the goroutine has returned; its stack may still be listed for a moment
	if err := leaked(5*time.Second, []string{"blockInTestutilLeak"}); err != nil {
		t.Fatalf("after the goroutine exited: %v", err)
	}
}

//go:noinline // the name must show in the stack
func blockInTestutilLeak(started, stop chan struct{}) {
	close(started)
	<-stop
}

func TestBlockedFindsAGoroutineInSelect(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		selectInTestutilBlocked(stop)
	}()
	defer func() { close(stop); <-done }()
	fn := "github.com/quorumbus/quorumbus/test/testutil.selectInTestutilBlocked"
	WaitFor(t, 5*time.Second, func() error {
		if n := len(Blocked(fn)); n != 1 {
			return fmt.Errorf("%d goroutines blocked in %s, want 1", n, fn)
		}
		return nil
	})
}

//go:noinline // the name must show in the stack
func selectInTestutilBlocked(stop chan struct{}) {
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	select {
	case <-stop:
	case <-tick.C:
	}
}

// fatalTB records the first Fatalf and stops the caller, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestWaitForReportsLastErrorAndStopsOnPermanent(t *testing.T) {
	run := func(timeout time.Duration, cond func() error) (msg string, took time.Duration) {
		tb := &fatalTB{TB: t}
		start := time.Now()
		func() {
			defer func() {
				if r := recover(); r != nil && r != any(tb) {
					panic(r)
				}
			}()
			WaitFor(tb, timeout, cond)
		}()
		return tb.msg, time.Since(start)
	}
	n := 0
	msg, _ := run(50*time.Millisecond, func() error { n++; return fmt.Errorf("try %d", n) })
	if !strings.Contains(msg, fmt.Sprintf("last: try %d", n)) {
		t.Errorf("timeout message %q does not report the last error (try %d)", msg, n)
	}
	msg, took := run(time.Minute, func() error { return Permanent(errors.New("cannot happen")) })
	if !strings.Contains(msg, "gave up") || !strings.Contains(msg, "cannot happen") || took > 10*time.Second {
		t.Errorf("a Permanent error: %q after %v, want an immediate failure naming it", msg, took)
	}
}
