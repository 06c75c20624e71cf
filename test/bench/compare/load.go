package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// system is one queue on one broker, as the tests drive it.
type system interface {
	// Reset leaves an empty, fully replicated queue for the next test.
	Reset(ctx context.Context) error
	NewSender(ctx context.Context) (sender, error)
	NewReceiver(ctx context.Context, prefetch int) (receiver, error)
	// Depth is the number of messages in the queue, or -1 when the system cannot tell.
	Depth(ctx context.Context) (int, error)
	// Describe says where the queue lives and which node the clients talk to.
	Describe(ctx context.Context) string
	Close()
}

// sender sends one message; the returned wait blocks until the broker confirmed it.
type sender interface {
	Send(ctx context.Context, body []byte) (wait func() error, err error)
	Close()
}

// receiver returns the next message and the function that acknowledges it.
type receiver interface {
	Next(ctx context.Context) (body []byte, ack func() error, err error)
	Close()
}

// loadConfig is what every system is measured with.
type loadConfig struct {
	System    string
	N         int   // messages per throughput test
	Size      int   // body bytes
	Windows   []int // send windows
	Prefetch  int   // receive credit/prefetch
	LatRate   int   // offered msg/s of the latency test
	LatDur    time.Duration
	LatWindow int
	Rep       int
	Tests     []string // send, recv, lat
}

// DefaultLoadConfig is the load of the published table.
func DefaultLoadConfig() loadConfig {
	return loadConfig{N: 100000, Size: 1024, Windows: []int{1, 256}, Prefetch: 256,
		LatRate: 1000, LatDur: 30 * time.Second, LatWindow: 256, Rep: 1, Tests: []string{"send", "recv", "lat"}}
}

// Validate reports the first setting that cannot be measured.
func (c loadConfig) Validate() error {
	switch {
	case c.N < 1:
		return errors.New("-n must be at least 1")
	case c.Size < 16:
		return errors.New("-size must be at least 16 (the body carries a timestamp and a sequence number)")
	case len(c.Windows) == 0:
		return errors.New("-windows: need at least one window")
	case c.Prefetch < 1:
		return errors.New("-prefetch must be at least 1")
	case c.LatRate < 1 || c.LatDur <= 0:
		return errors.New("-lat-rate and -lat-dur must be positive")
	case c.LatWindow < 1:
		return errors.New("-lat-window must be at least 1")
	}
	for _, w := range c.Windows {
		if w < 1 {
			return fmt.Errorf("-windows: %d is not a window", w)
		}
	}
	for _, t := range c.Tests {
		if t != "send" && t != "recv" && t != "lat" {
			return fmt.Errorf("-tests: unknown test %q (send, recv, lat)", t)
		}
	}
	return nil
}

func (c loadConfig) has(test string) bool { return slices.Contains(c.Tests, test) }

// latN is the number of messages of the latency test.
func (c loadConfig) latN() int { return int(c.LatDur.Seconds() * float64(c.LatRate)) }

// runLoad runs the configured tests against s and writes RESULT and CDF lines to out,
// progress to logw.
func runLoad(ctx context.Context, c loadConfig, s system, out, logw io.Writer) error {
	logf := func(f string, a ...any) {
		fmt.Fprintf(logw, time.Now().Format("15:04:05.000")+" "+c.System+": "+f+"\n", a...)
	}
	if c.has("send") || c.has("recv") {
		windows := c.Windows
		if !c.has("send") {
			windows = windows[len(windows)-1:] // only to fill the queue for recv
		}
		for _, w := range windows {
			if err := s.Reset(ctx); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			logf("send W=%d to %s", w, s.Describe(ctx))
			d, err := sendTest(ctx, c, s, w)
			if err != nil {
				return fmt.Errorf("send W=%d: %w", w, err)
			}
			logf("send W=%d: %d msgs in %v", w, c.N, d.Round(time.Millisecond))
			if c.has("send") {
				writeResult(out, Result{System: c.System, Test: "send", Rep: c.Rep, Param: w, N: c.N,
					Secs: d.Seconds(), Rate: float64(c.N) / d.Seconds()})
			}
			if err := expectDepth(ctx, s, c.N); err != nil {
				return fmt.Errorf("after send W=%d: %w", w, err)
			}
		}
	}
	if c.has("recv") {
		// The queue holds exactly N messages from the last send.
		r, err := s.NewReceiver(ctx, c.Prefetch)
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		d, st, err := recvTest(ctx, c, r)
		if err == nil {
			logf("recv P=%d: %d msgs in %v (longest gap %v, %d gaps over 100 ms)", c.Prefetch, c.N,
				d.Round(time.Millisecond), st.maxGap.Round(time.Millisecond), st.gaps)
			// The receiver stays open until the queue is empty: acknowledgements sent
			// settled (fire and forget) carry no promise once their connection closes.
			err = expectDepth(ctx, s, 0)
		}
		r.Close()
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		writeResult(out, Result{System: c.System, Test: "recv", Rep: c.Rep, Param: c.Prefetch, N: c.N,
			Secs: d.Seconds(), Rate: float64(c.N) / d.Seconds()})
	}
	if c.has("lat") {
		if err := s.Reset(ctx); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		lats, st, err := latencyTest(ctx, c, s)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		slices.Sort(lats)
		r := Result{System: c.System, Test: "lat", Rep: c.Rep, Param: c.LatRate, N: len(lats),
			Secs: st.sendDur.Seconds(), Rate: float64(len(lats)) / st.sendDur.Seconds(),
			Lat50: ms(quantile(lats, 0.50)), Lat99: ms(quantile(lats, 0.99)),
			Lat999: ms(quantile(lats, 0.999)), Max: ms(lats[len(lats)-1]), MaxLag: ms(st.maxLag),
			Acc50: ms(st.acc50), Dlv50: ms(st.dlv50), Acc99: ms(st.acc99), Dlv99: ms(st.dlv99)}
		logf("latency at %d msg/s: p50 %.2f ms (median send to confirmation %.2f ms, confirmation to receipt %.2f ms), p99 %.2f ms (p99 send to confirmation %.2f ms, confirmation to receipt %.2f ms), max %.2f ms; producer behind schedule by at most %.1f ms",
			c.LatRate, r.Lat50, r.Acc50, r.Dlv50, r.Lat99, r.Acc99, r.Dlv99, r.Max, r.MaxLag)
		writeResult(out, r)
		writeCDF(out, CDF{System: c.System, Rep: c.Rep, Points: cdfPoints(lats)})
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the q-quantile (nearest rank) of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// cdfFractions are the points of the latency distribution kept for the chart: every
// percent, then the tail.
var cdfFractions = func() []float64 {
	var f []float64
	for i := 1; i <= 99; i++ {
		f = append(f, float64(i)/100)
	}
	return append(f, 0.995, 0.999, 0.9995, 0.9999, 1)
}()

func cdfPoints(sorted []time.Duration) []CDFPoint {
	pts := make([]CDFPoint, 0, len(cdfFractions))
	for _, q := range cdfFractions {
		pts = append(pts, CDFPoint{Q: q, Ms: ms(quantile(sorted, q))})
	}
	return pts
}

// expectDepth waits up to 30 s for the queue to hold want messages; systems that cannot
// count (Depth -1) pass.
func expectDepth(ctx context.Context, s system, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := s.Depth(ctx)
		if err != nil {
			return fmt.Errorf("queue depth: %w", err)
		}
		if d < 0 || d == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queue holds %d messages, want %d", d, want)
		}
		// Polling: replicas report their counts asynchronously and none of the
		// systems offers a wait for a depth.
		time.Sleep(100 * time.Millisecond)
	}
}

// makeBody is a size-byte body: bytes 0-7 the scheduled send time (Unix ns), 8-15 the
// sequence number, then filler.
func makeBody(size int, seq uint64, at time.Time) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b[0:8], uint64(at.UnixNano()))
	binary.BigEndian.PutUint64(b[8:16], seq)
	for i := 16; i < size; i++ {
		b[i] = byte('a' + i%26)
	}
	return b
}

// windowed keeps at most w sends unconfirmed. One goroutine awaits the confirmations
// in send order: each system confirms one queue's sends in order, so this is exact.
type windowed struct {
	s sender
	// stamps, when set (before the first send), receives each confirmation's time in
	// send order; read it after finish.
	stamps *[]time.Time
	slot   chan struct{} // a token per unconfirmed send
	fifo   chan func() error
	done   chan struct{} // closed by the waiter goroutine when fifo is drained
	mu     sync.Mutex
	err    error // first confirmation error; guarded by mu
}

func newWindowed(s sender, w int) *windowed {
	ws := &windowed{s: s, slot: make(chan struct{}, w), fifo: make(chan func() error, w), done: make(chan struct{})}
	go ws.waiter()
	return ws
}

func (ws *windowed) waiter() {
	defer close(ws.done)
	for wait := range ws.fifo {
		if err := wait(); err != nil {
			ws.mu.Lock()
			if ws.err == nil {
				ws.err = err
			}
			ws.mu.Unlock()
		}
		if ws.stamps != nil {
			*ws.stamps = append(*ws.stamps, time.Now())
		}
		<-ws.slot
	}
}

func (ws *windowed) failed() error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.err
}

func (ws *windowed) send(ctx context.Context, body []byte) error {
	if err := ws.failed(); err != nil {
		return err
	}
	select {
	case ws.slot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	wait, err := ws.s.Send(ctx, body)
	if err != nil {
		<-ws.slot
		return err
	}
	ws.fifo <- wait
	return nil
}

// finish waits for every outstanding confirmation; the windowed is spent afterwards.
func (ws *windowed) finish() error {
	close(ws.fifo)
	<-ws.done
	return ws.failed()
}

// sendTest sends N messages with at most w unconfirmed and returns the time until the
// last confirmation.
func sendTest(ctx context.Context, c loadConfig, s system, w int) (time.Duration, error) {
	snd, err := s.NewSender(ctx)
	if err != nil {
		return 0, err
	}
	defer snd.Close()
	ws := newWindowed(snd, w)
	start := time.Now()
	for i := 0; i < c.N; i++ {
		if err := ws.send(ctx, makeBody(c.Size, uint64(i), time.Now())); err != nil {
			ws.finish()
			return 0, err
		}
	}
	if err := ws.finish(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

type recvStats struct {
	maxGap time.Duration // longest time between two deliveries
	gaps   int           // gaps over 100 ms
}

// recvTest receives and acknowledges N messages from r, one acknowledgement each, and
// returns the time until the N-th acknowledgement was handed to the client library.
func recvTest(ctx context.Context, c loadConfig, r receiver) (time.Duration, recvStats, error) {
	var st recvStats
	start := time.Now()
	last := start
	for i := 0; i < c.N; i++ {
		body, ack, err := r.Next(ctx)
		if err != nil {
			return 0, st, fmt.Errorf("after %d messages: %w", i, err)
		}
		now := time.Now()
		if g := now.Sub(last); i > 0 {
			st.maxGap = max(st.maxGap, g)
			if g > 100*time.Millisecond {
				st.gaps++
			}
		}
		last = now
		if len(body) != c.Size {
			return 0, st, fmt.Errorf("message %d has %d bytes, want %d", i, len(body), c.Size)
		}
		if err := ack(); err != nil {
			return 0, st, fmt.Errorf("acknowledging message %d: %w", i, err)
		}
	}
	return time.Since(start), st, nil
}

type latStats struct {
	sendDur time.Duration // from the first scheduled send to the last send
	maxLag  time.Duration // how far the producer fell behind its schedule
	// Medians and 99th percentiles of each message's time from its scheduled send to its
	// confirmation, and from its confirmation to its receipt: where the latency goes.
	acc50, dlv50, acc99, dlv99 time.Duration
}

// latencyTest offers LatRate msg/s for LatDur with up to LatWindow unconfirmed, while
// one receiver acknowledges each message, and returns every message's latency from its
// scheduled send time to its receipt.
func latencyTest(ctx context.Context, c loadConfig, s system) ([]time.Duration, latStats, error) {
	var st latStats
	n := c.latN()
	r, err := s.NewReceiver(ctx, c.Prefetch)
	if err != nil {
		return nil, st, err
	}
	defer r.Close()
	snd, err := s.NewSender(ctx)
	if err != nil {
		return nil, st, err
	}
	defer snd.Close()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([]time.Duration, 0, n) // written by the receiver goroutine until recvDone
	recvAt := make([]time.Time, n)      // by sequence number; the same
	recvDone := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			body, ack, err := r.Next(rctx)
			if err != nil {
				recvDone <- fmt.Errorf("receive after %d: %w", i, err)
				return
			}
			at := time.Unix(0, int64(binary.BigEndian.Uint64(body[0:8])))
			now := time.Now()
			lats = append(lats, now.Sub(at))
			if seq := binary.BigEndian.Uint64(body[8:16]); seq < uint64(n) {
				recvAt[seq] = now
			}
			if err := ack(); err != nil {
				recvDone <- fmt.Errorf("ack after %d: %w", i, err)
				return
			}
		}
		recvDone <- nil
	}()

	ws := newWindowed(snd, c.LatWindow)
	confirmed := make([]time.Time, 0, n)
	ws.stamps = &confirmed
	interval := time.Second / time.Duration(c.LatRate)
	start := time.Now()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d) // pacing the open-loop producer to its schedule
		} else {
			st.maxLag = max(st.maxLag, -d)
		}
		if err := ws.send(ctx, makeBody(c.Size, uint64(i), at)); err != nil {
			ws.finish()
			cancel()
			<-recvDone
			return nil, st, err
		}
	}
	st.sendDur = time.Since(start)
	if err := ws.finish(); err != nil {
		cancel()
		<-recvDone
		return nil, st, err
	}
	if err := <-recvDone; err != nil {
		return nil, st, err
	}
	acc, dlv := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i, t := range confirmed {
		acc = append(acc, t.Sub(start.Add(time.Duration(i)*interval)))
		if !recvAt[i].IsZero() {
			dlv = append(dlv, recvAt[i].Sub(t))
		}
	}
	slices.Sort(acc)
	slices.Sort(dlv)
	st.acc50, st.dlv50 = quantile(acc, 0.5), quantile(dlv, 0.5)
	st.acc99, st.dlv99 = quantile(acc, 0.99), quantile(dlv, 0.99)
	return lats, st, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
