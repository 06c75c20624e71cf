// Package testutil holds the helpers that tests of several packages share: waiting on
// a condition and checking for leaked goroutines after a package's tests.
//
// Only tests import it (test/deps_test.go forbids it to production code). It imports
// the standard library only, so any package's tests may use it without a cycle.
package testutil

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil and fails the test if that has not happened
// within timeout, reporting the last error cond returned: the message says what the
// test was still waiting for. An error wrapped by Permanent fails the test at once.
// Polling starts at 10ms and backs off to 100ms, so cheap conditions are noticed
// quickly and expensive ones (a round trip to a broker) do not load the machine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	interval := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		var p *permanentError
		if errors.As(err, &p) {
			t.Fatalf("gave up after %v: %v", time.Since(start).Round(time.Millisecond), p.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v; last: %v", timeout, err)
		}
		time.Sleep(interval) // polling interval
		interval = min(2*interval, 100*time.Millisecond)
	}
}

// Permanent marks an error of a WaitFor condition as final: waiting longer cannot help,
// so WaitFor fails at once.
func Permanent(err error) error { return &permanentError{err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Blocked returns the stacks of the goroutines that are blocked (in a select or a
// channel operation) directly in fn, a fully qualified function name such as
// "github.com/quorumbus/quorumbus/partition.(*Partition).waitLoop". A test uses it to wait
// until a goroutine it started has reached the wait it means to exercise, instead of
// sleeping; it filters the stacks (by the test that created them, say) when other
// goroutines may block in fn too.
func Blocked(fn string) []string {
	var out []string
	for _, g := range allStacks()[1:] {
		header, rest, _ := strings.Cut(g, "\n")
		state := header[strings.Index(header, "[")+1:]
		if (strings.HasPrefix(state, "select") || strings.HasPrefix(state, "chan ")) &&
			strings.HasPrefix(rest, fn+"(") {
			out = append(out, g)
		}
	}
	return out
}

// allStacks returns the stacks of all goroutines, the caller's first.
func allStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// MainWithLeakCheck runs a package's tests and exits. When they pass, it waits up to
// wait for every goroutine whose stack mentions one of match (a package path, or a
// receiver such as "quorumbus/amqp.(*conn)") to finish, and fails the run listing them
// if any is left (docs/principles.md, testing habit 10; P5: Close cancels and waits). Call it as
// the whole body of TestMain.
func MainWithLeakCheck(m *testing.M, wait time.Duration, match ...string) {
	code := m.Run()
	if code == 0 {
		if err := leaked(wait, match); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func leaked(wait time.Duration, match []string) error {
	if len(match) == 0 {
		return errors.New("testutil: MainWithLeakCheck needs at least one match")
	}
	deadline := time.Now().Add(wait)
	for {
		stacks := allStacks()[1:] // without this goroutine's own
		var left []string
		for _, g := range stacks {
			for _, s := range match {
				if strings.Contains(g, s) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leaked goroutines after %v:\n%s", wait, strings.Join(left, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond) // polling for goroutines to finish
	}
}

// CloseLimit bounds how long a test waits for a node, server or process to shut down
// (Bounded). A clean shutdown takes well under a second even on a loaded machine; a
// stuck one (a Raft shutdown waiting on a goroutine that never returns) once ate 22
// minutes of CI before the binary's own -timeout fired.
const CloseLimit = 60 * time.Second

// Bounded runs stop (a Close, a Shutdown) and waits at most limit for it. When stop
// has not returned by then it writes every goroutine's stack to stderr and panics, which
// ends the test binary at once with the hang in its output, instead of leaving it to the
// -timeout of the whole run. name says what was being stopped.
func Bounded(t testing.TB, name string, limit time.Duration, stop func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		fmt.Fprintf(os.Stderr, "%s: stopping %s did not finish within %v; goroutines:\n\n%s\n",
			t.Name(), name, limit, strings.Join(allStacks(), "\n\n"))
		panic(fmt.Sprintf("%s: stopping %s hung for %v (goroutine dump above)", t.Name(), name, limit))
	}
}
