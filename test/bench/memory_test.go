//go:build !race

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// Memory per stored message, as a user sees it: a real node process, N 1 KiB messages sent
// through the SDK and left queued, then the process's resident memory once the node is
// idle. What is counted (docs/benchmarks.md, "Memory per message"):
//
//	per message = (RssAnon after - RssAnon before) / N - 1024
//
// RssAnon (/proc/PID/status) is the anonymous resident memory: the Go heap, stacks and
// runtime, everything a container's memory limit always counts. The file-backed part
// (RssFile: bolt's mmap of raft.db, the binary) is reported beside it; the kernel can
// reclaim it, and a cgroup charges it only while it is cached. "before" is the idle node
// with the queue created, so fixed costs that do not grow with the backlog are excluded
// only as far as they exist before the first send.
//
// QUORUMBUS_MEM_MSGS sets N (default 100 000, what CI runs; docs quote 1 000 000).
// QUORUMBUS_MEM_PROFILE=DIR writes the node's heap profile there.
// QUORUMBUS_MEM_ARGS replaces memArgs, the node flags measured, e.g. "--gc-headroom 2"
// or "" for the defaults.
// QUORUMBUS_MEM_RESTART=1 then restarts the node and measures the restart, the time to the
// first delivery and the drain rate (TestNodeRestartDrain's figures).
// QUORUMBUS_MEM_DRAIN_ALL=K then drains the rest of the backlog in steps of K messages,
// reporting each step's rate and the node's body counters (with --body-memory-budget-mb
// the oldest messages come from memory and the rest from disk);
// QUORUMBUS_MEM_DROP_CACHES=1 (as root) first drops the kernel's page cache, so that the
// spilled bodies are read from the device, not from cached pages.

// memBudget is the bound CI enforces, at N = 100 000, on the anonymous bytes per message
// beyond the body. Measured: 524 B at 100 000 (of which the GC's 8 MiB headroom floor is
// 84 B, a fixed cost) and 427 B at 1 000 000. The margin covers where in its GC cycle
// the node happens to be when it goes idle (up to the 8 MiB floor). It fails on each
// regression measured while it was built: 512 raft log entries cached (+600 B), a GC
// headroom tuner that does not work (+1 000 B), a payload copy of its own per message
// (+128 B of size-class rounding, at 1 M).
const memBudget = 650

// memArgs is the configuration CI measures: a 5 % GC headroom, so that the figure is what
// the node keeps live plus a small, fixed share, and a regression in what it keeps shows.
// With the default GOGC=100 the idle RSS lies anywhere between the live heap and twice it
// (1 412-1 438 B per message at 300 000), too wide a band to assert on.
const memArgs = "--gc-headroom 5"

const memBody = 1024

func TestNodeMemoryPerMessage(t *testing.T) {
	n := envInt(t, "QUORUMBUS_MEM_MSGS", 100_000)
	node, c, ac := memNode(t)
	pid := node.Pid()
	before := awaitIdle(t, pid)
	t.Logf("idle node, queue created: %s", before)

	start, cpu0 := time.Now(), cpuTicks(t, pid)
	sendN(t, c, "q", n)
	sent := time.Since(start)
	awaitCount(t, ac, "q", n)
	after := awaitIdle(t, pid)
	cpu := float64(cpuTicks(t, pid)-cpu0) * 1e4 / float64(n) // 100 ticks/s: µs per message
	t.Logf("%d x %d B queued (sent in %v, %.0f msg/s, node CPU %.0f µs/msg): %s", n, memBody,
		sent.Round(time.Millisecond), float64(n)/sent.Seconds(), cpu, after)
	anon := float64(after.anon-before.anon)/float64(n) - memBody
	file := float64(after.file-before.file) / float64(n)
	t.Logf("per message beyond the body: anonymous %.0f B, file-backed %.0f B (RSS total %.0f B)",
		anon, file, float64(after.rss-before.rss)/float64(n)-memBody)
	if dir := os.Getenv("QUORUMBUS_MEM_PROFILE"); dir != "" {
		saveProfile(t, node, dir+"/heap.pprof", "/debug/pprof/heap")
		saveProfile(t, node, dir+"/heap.txt", "/debug/pprof/heap?debug=1") // ends with the runtime's MemStats
	}
	switch {
	case nodeArgs() != memArgs:
		t.Logf("flags other than %q: the %d B bound is not checked", memArgs, memBudget)
	case anon > memBudget:
		t.Errorf("%.0f B of anonymous memory per queued message beyond its body; the budget is %d", anon, memBudget)
	}
	if os.Getenv("QUORUMBUS_MEM_RESTART") != "" {
		restartDrain(t, node, n)
	}
}

// restartDrain stops the node gracefully, starts it again on the same data and measures
// what a user waits for: the node serving, the first message delivered, and the drain rate
// with 4 receivers over the first min(n, 100 000) messages: half completed one at a time,
// half all of a receive's messages at once. The control is a queue of 20 000 messages on
// the same node, drained one at a time just before.
func restartDrain(t *testing.T, node *harness.Node, n int) {
	ctx0, cancel0 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel0()
	if _, err := node.AdminClient(t).CreateQueue(ctx0, "small", nil); err != nil {
		t.Fatal(err)
	}
	const small = 20_000
	sendN(t, node.Client(t), "small", small)
	if err := node.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	start := time.Now()
	peak := peakAnon(node)
	node.Restart()
	ready := time.Since(start)
	c := node.Client(t)
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("first receive: %d messages, %v", len(msgs), err)
	}
	first := time.Since(start)
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart with %d queued: serving after %v, first delivery after %v, %s, anonymous at most %.1f MiB since the start", n,
		ready.Round(time.Millisecond), first.Round(time.Millisecond), readMem(t, node.Pid()), float64(peak())/(1<<20))
	d := drainN(t, c, "small", small, 4, false)
	t.Logf("control, after the restart: %d messages from a queue of %d with 4 receivers in %v: %.0f msg/s",
		small, small, d.Round(time.Millisecond), float64(small)/d.Seconds())
	var prof sync.WaitGroup
	if dir := os.Getenv("QUORUMBUS_MEM_PROFILE"); dir != "" {
		prof.Add(1)
		go func() {
			defer prof.Done()
			saveProfile(t, node, dir+"/drain-cpu.pprof", "/debug/pprof/profile?seconds=10")
		}()
	}
	drain := min(n-1, 100_000) / 2
	d = drainN(t, c, "q", drain, 4, false)
	prof.Wait()
	t.Logf("drain after restart: %d messages with 4 receivers, each completing one at a time, in %v: %.0f msg/s",
		drain, d.Round(time.Millisecond), float64(drain)/d.Seconds())
	d = drainN(t, c, "q", drain, 4, true)
	t.Logf("drain after restart, next %d: 4 receivers, each completing a receive's messages at once, in %v: %.0f msg/s",
		drain, d.Round(time.Millisecond), float64(drain)/d.Seconds())
	step := envInt(t, "QUORUMBUS_MEM_DRAIN_ALL", 0)
	if step > 0 && os.Getenv("QUORUMBUS_MEM_DROP_CACHES") != "" {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			t.Fatalf("dropping the page cache: %v", err)
		}
		t.Logf("page cache dropped: %s", readMem(t, node.Pid()))
	}
	for left := n - 1 - 2*drain; step > 0 && left > 0; left -= min(step, left) {
		k := min(step, left)
		d = drainN(t, c, "q", k, 4, true)
		t.Logf("drain, %d left before this step: %d messages, 4 receivers completing a receive's messages at once, in %v: %.0f msg/s; RSS %s; %s",
			left, k, d.Round(time.Millisecond), float64(k)/d.Seconds(), readMem(t, node.Pid()), bodyCounters(t, node))
	}
}

// bodyCounters is the node's quorumbus_bodies_* series, as one line.
func bodyCounters(t *testing.T, node *harness.Node) string {
	t.Helper()
	resp, err := http.Get("http://" + node.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "quorumbus_bodies_") {
			out = append(out, strings.TrimPrefix(l, "quorumbus_bodies_"))
		}
	}
	if len(out) == 0 {
		return "no body counters"
	}
	return strings.Join(out, " ")
}

// nodeArgs are the flags measured: memArgs unless QUORUMBUS_MEM_ARGS is set.
func nodeArgs() string {
	if v, ok := os.LookupEnv("QUORUMBUS_MEM_ARGS"); ok {
		return v
	}
	return memArgs
}

// memNode starts a node with the profiler on and a queue "q" large enough for any N.
func memNode(t *testing.T) (*harness.Node, *azservicebus.Client, *admin.Client) {
	t.Helper()
	args := nodeArgs()
	t.Logf("node flags: --pprof %s", args)
	node := harness.Start(t, append([]string{"--pprof"}, strings.Fields(args)...)...)
	ac := node.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "q", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		MaxSizeInMegabytes: to.Ptr(int32(81920))}}); err != nil {
		t.Fatal(err)
	}
	return node, node.Client(t), ac
}

// sendN sends n 1 KiB messages in batches of 100 from 4 concurrent senders.
func sendN(t *testing.T, c *azservicebus.Client, queue string, n int) {
	t.Helper()
	const workers = 4
	body := make([]byte, memBody)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		share := n / workers
		if w == 0 {
			share += n % workers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.NewSender(queue, nil)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close(context.Background())
			for sent := 0; sent < share; {
				batch, err := s.NewMessageBatch(ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < 100 && sent < share; i++ {
					if err := batch.AddMessage(&azservicebus.Message{Body: body}, nil); err != nil {
						errs <- err
						return
					}
					sent++
				}
				if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		t.Fatal(err)
	}
}

// drainN receives and completes n messages with the given number of receivers (peek-lock,
// up to 100 per receive) and returns how long it took. Each receiver completes its
// messages one by one, or with parallel all of a receive's messages at once.
func drainN(t *testing.T, c *azservicebus.Client, queue string, n, receivers int, parallel bool) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		left = n
	)
	take := func(k int) int {
		mu.Lock()
		defer mu.Unlock()
		k = min(k, left)
		left -= k
		return k
	}
	giveBack := func(k int) {
		mu.Lock()
		left += k
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, receivers)
	for w := 0; w < receivers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.NewReceiverForQueue(queue, nil)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close(context.Background())
			for {
				k := take(100)
				if k == 0 {
					return
				}
				msgs, err := r.ReceiveMessages(ctx, k, nil)
				if err != nil {
					errs <- err
					return
				}
				giveBack(k - len(msgs))
				if err := complete(ctx, r, msgs, parallel); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func complete(ctx context.Context, r *azservicebus.Receiver, msgs []*azservicebus.ReceivedMessage, parallel bool) error {
	if !parallel {
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// awaitCount waits until the queue reports n active messages.
func awaitCount(t *testing.T, ac *admin.Client, queue string, n int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := ac.GetQueueRuntimeProperties(ctx, queue, nil)
		if err != nil {
			return err
		}
		if p.ActiveMessageCount != int32(n) {
			return fmt.Errorf("%d active messages, want %d", p.ActiveMessageCount, n)
		}
		return nil
	})
}

// procMem is a process's resident memory, bytes.
type procMem struct{ rss, anon, file int64 }

func (m procMem) String() string {
	return fmt.Sprintf("RSS %.1f MiB (anonymous %.1f MiB, file-backed %.1f MiB)",
		float64(m.rss)/(1<<20), float64(m.anon)/(1<<20), float64(m.file)/(1<<20))
}

func readMem(t *testing.T, pid int) procMem {
	t.Helper()
	m, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// peakAnon samples the anonymous memory of node's process (whichever is running) every
// 50 ms until the returned function is called, which returns the highest sample.
func peakAnon(node *harness.Node) func() int64 {
	stop, done := make(chan struct{}), make(chan int64)
	go func() {
		var peak int64
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			if pid := node.Pid(); pid > 0 {
				if m, err := procStatus(pid); err == nil {
					peak = max(peak, m.anon)
				}
			}
			select {
			case <-stop:
				done <- peak
				return
			case <-tk.C:
			}
		}
	}()
	return func() int64 { close(stop); return <-done }
}

func procStatus(pid int) (procMem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	defer f.Close()
	var m procMem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "RssFile":
			m.file = kb << 10
		}
	}
	if m.rss == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// cpuTicks is the process's user + system CPU time in clock ticks (/proc/PID/stat).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// awaitIdle waits until the process has used less than 2 % of a core over a second (no
// snapshot, compaction or GC under way) and returns its memory then.
func awaitIdle(t *testing.T, pid int) procMem {
	t.Helper()
	last, at := cpuTicks(t, pid), time.Now()
	testutil.WaitFor(t, 5*time.Minute, func() error {
		if time.Since(at) < time.Second {
			return errors.New("measuring")
		}
		now := cpuTicks(t, pid)
		used := now - last
		last, at = now, time.Now()
		if used > 2 { // 100 ticks/s
			return fmt.Errorf("busy: %d ticks in the last second", used)
		}
		return nil
	})
	return readMem(t, pid)
}

func saveProfile(t *testing.T, node *harness.Node, path, url string) {
	resp, err := http.Get("http://" + node.Admin + url)
	if err != nil {
		t.Log(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Log(err)
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
