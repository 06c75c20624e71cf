package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// traceCmd summarizes Go execution traces (a node started with --pprof serves one at
// /debug/pprof/trace?seconds=N) for the question the latency tail asks: how long did
// goroutines wait for a CPU, how long did system calls take (by the function that made
// them), and how long did the garbage collector's phases last.
func traceCmd(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: compare trace FILE [FILE ...]")
	}
	for _, path := range args {
		if err := summarizeTrace(path, out); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func summarizeTrace(path string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return err
	}
	var (
		first, last   trace.Time
		runnableSince = map[trace.GoID]trace.Time{}
		waits         []time.Duration
		syscallSince  = map[trace.GoID]trace.Time{}
		syscallBy     = map[trace.GoID]string{}
		syscalls      = map[string][]time.Duration{}
		rangeSince    = map[string]trace.Time{}
		ranges        = map[string][]time.Duration{}
	)
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if first == 0 {
			first = ev.Time()
		}
		last = ev.Time()
		switch ev.Kind() {
		case trace.EventRangeBegin:
			rangeSince[ev.Range().Name] = ev.Time()
		case trace.EventRangeEnd:
			if t0, ok := rangeSince[ev.Range().Name]; ok {
				ranges[ev.Range().Name] = append(ranges[ev.Range().Name], ev.Time().Sub(t0))
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			switch {
			case to == trace.GoRunnable:
				runnableSince[g] = ev.Time()
			case from == trace.GoRunnable && to == trace.GoRunning:
				if t0, ok := runnableSince[g]; ok {
					waits = append(waits, ev.Time().Sub(t0))
					delete(runnableSince, g)
				}
			}
			if to == trace.GoSyscall {
				syscallSince[g] = ev.Time()
				syscallBy[g] = caller(st.Stack)
			}
			if from == trace.GoSyscall {
				if t0, ok := syscallSince[g]; ok {
					syscalls[syscallBy[g]] = append(syscalls[syscallBy[g]], ev.Time().Sub(t0))
					delete(syscallSince, g)
				}
			}
		}
	}
	wall := last.Sub(first)
	fmt.Fprintf(out, "%s: %v traced\n", path, wall.Round(time.Millisecond))
	fmt.Fprintf(out, "  waits for a CPU  %s\n", durations(waits))
	names := make([]string, 0, len(syscalls))
	for n := range syscalls {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(total(syscalls[b]) - total(syscalls[a])) })
	for _, n := range names[:min(len(names), 6)] {
		fmt.Fprintf(out, "  syscalls of %s  %s\n", n, durations(syscalls[n]))
	}
	rnames := make([]string, 0, len(ranges))
	for n := range ranges {
		rnames = append(rnames, n)
	}
	slices.Sort(rnames)
	for _, n := range rnames {
		fmt.Fprintf(out, "  %s  %s\n", n, durations(ranges[n]))
	}
	return nil
}

// caller is the innermost frame of a system call's stack outside the runtime, the
// syscall packages and os: the code that asked for it.
func caller(s trace.Stack) string {
	for fr := range s.Frames() {
		f := fr.Func
		if f == "" || strings.HasPrefix(f, "runtime.") || strings.HasPrefix(f, "syscall.") ||
			strings.HasPrefix(f, "internal/") || strings.HasPrefix(f, "os.") || strings.HasPrefix(f, "golang.org/x/sys/") {
			continue
		}
		return f
	}
	return "(unknown)"
}

func total(d []time.Duration) (t time.Duration) {
	for _, x := range d {
		t += x
	}
	return t
}

// durations describes a sample: count, total, median, 99th percentile, maximum and how
// many exceeded 1, 2 and 5 ms.
func durations(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	over := func(x time.Duration) int {
		i, _ := slices.BinarySearch(d, x+1)
		return len(d) - i
	}
	return fmt.Sprintf("n=%d total %v p50 %v p99 %v max %v; over 1 ms %d, 2 ms %d, 5 ms %d",
		len(d), total(d).Round(time.Millisecond), d[len(d)/2].Round(time.Microsecond),
		d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond),
		over(time.Millisecond), over(2*time.Millisecond), over(5*time.Millisecond))
}
