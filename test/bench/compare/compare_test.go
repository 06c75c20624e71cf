package main

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const sampleRaw = `# date: 2026-11-24T15:00:00Z
# params: N=1000 REPS=3
RESULT system=rabbit-091 test=send rep=1 param=1 n=1000 secs=2.000 rate=500.0
RESULT system=rabbit-091 test=send rep=2 param=1 n=1000 secs=2.000 rate=480.0
RESULT system=rabbit-091 test=send rep=3 param=1 n=1000 secs=2.000 rate=520.0
RESULT system=rabbit-091 test=send rep=1 param=256 n=1000 secs=0.100 rate=9000.0
RESULT system=rabbit-091 test=send rep=2 param=256 n=1000 secs=0.100 rate=8000.0
RESULT system=rabbit-091 test=send rep=3 param=256 n=1000 secs=0.100 rate=12000.0
RESULT system=rabbit-091 test=recv rep=1 param=256 n=1000 secs=0.100 rate=13000.0
RESULT system=rabbit-091 test=lat rep=1 param=1000 n=300 secs=0.300 rate=1000.0 p50_ms=8.100 p99_ms=53.000 p999_ms=60.000 max_ms=70.000 max_lag_ms=1.000
RESULT system=rabbit-091 test=lat rep=2 param=1000 n=300 secs=0.300 rate=1000.0 p50_ms=7.000 p99_ms=40.000 p999_ms=60.000 max_ms=90.000 max_lag_ms=1.000
CDF system=rabbit-091 rep=1 0.5:8.1 0.99:53 1:70
CDF system=rabbit-091 rep=2 0.5:7 0.99:40 1:90
12:00:01.000 a client log line that is not a result
RESULT system=nats test=send rep=1 param=1 n=1000 secs=1.000 rate=1155.0
RESULT system=nats test=send rep=1 param=256 n=1000 secs=0.100 rate=12658.0
RESULT system=nats test=recv rep=1 param=256 n=1000 secs=0.100 rate=22716.0
RESULT system=nats test=lat rep=1 param=1000 n=300 secs=0.300 rate=1000.0 p50_ms=3.050 p99_ms=40.000 p999_ms=41.000 max_ms=45.000 max_lag_ms=0.500
CDF system=nats rep=1 0.5:3.05 0.99:40 1:45
`

func mustParse(t *testing.T, s string) Raw {
	t.Helper()
	raw, err := parseRaw(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestParseRaw(t *testing.T) {
	raw := mustParse(t, sampleRaw)
	if len(raw.Notes) != 2 || raw.Notes[0] != "date: 2026-11-24T15:00:00Z" {
		t.Errorf("notes = %q", raw.Notes)
	}
	if len(raw.Results) != 13 || len(raw.CDFs) != 3 {
		t.Fatalf("%d results and %d CDFs, want 13 and 3", len(raw.Results), len(raw.CDFs))
	}
	lat := raw.Results[7]
	want := Result{System: "rabbit-091", Test: "lat", Rep: 1, Param: 1000, N: 300, Secs: 0.3, Rate: 1000,
		Lat50: 8.1, Lat99: 53, Lat999: 60, Max: 70, MaxLag: 1}
	if lat != want {
		t.Errorf("latency result = %+v, want %+v", lat, want)
	}
	if c := raw.CDFs[2]; c.System != "nats" || len(c.Points) != 3 || c.Points[1] != (CDFPoint{Q: 0.99, Ms: 40}) {
		t.Errorf("nats CDF = %+v", c)
	}
}

func TestParseRawErrors(t *testing.T) {
	for name, line := range map[string]string{
		"not key=value":    "RESULT system=x test=send rep=1 param=1 rate=1 oops",
		"bad number":       "RESULT system=x test=send rep=one param=1 rate=1",
		"missing rate":     "RESULT system=x test=send rep=1 param=1",
		"unknown test":     "RESULT system=x test=soak rep=1 param=1 rate=1",
		"lat without p99":  "RESULT system=x test=lat rep=1 param=1000 rate=1 p50_ms=1 max_ms=2",
		"CDF falls":        "CDF system=x rep=1 0.5:3 0.9:2",
		"CDF fraction > 1": "CDF system=x rep=1 0.5:3 1.5:4",
		"CDF no points":    "CDF system=x rep=1",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseRaw(strings.NewReader("# ok\n" + line + "\n"))
			if err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("parseRaw(%q) = %v, want an error naming line 2", line, err)
			}
		})
	}
}

func TestResultRoundTrip(t *testing.T) {
	in := []Result{
		{System: "quorumbus", Test: "send", Rep: 2, Param: 256, N: 5000, Secs: 0.25, Rate: 20000},
		{System: "quorumbus", Test: "lat", Rep: 2, Param: 1000, N: 30000, Secs: 30, Rate: 1000, Lat50: 1.25, Lat99: 9.5,
			Lat999: 20, Max: 31.5, MaxLag: 2, Acc50: 0.75, Dlv50: -0.25},
	}
	var buf bytes.Buffer
	for _, r := range in {
		writeResult(&buf, r)
	}
	writeCDF(&buf, CDF{System: "quorumbus", Rep: 2, Points: []CDFPoint{{0.5, 1.25}, {0.999, 20}, {1, 31.5}}})
	raw := mustParse(t, buf.String())
	for i := range in {
		if raw.Results[i] != in[i] {
			t.Errorf("result %d: wrote %+v, read %+v", i, in[i], raw.Results[i])
		}
	}
	if len(raw.CDFs) != 1 || len(raw.CDFs[0].Points) != 3 || raw.CDFs[0].Points[1].Q != 0.999 {
		t.Errorf("CDF read back as %+v", raw.CDFs)
	}
}

func TestNewStat(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Stat
	}{
		{nil, Stat{}},
		{[]float64{5}, Stat{Median: 5, Min: 5, Max: 5, N: 1}},
		{[]float64{9000, 8000, 12000}, Stat{Median: 9000, Min: 8000, Max: 12000, N: 3}},
		{[]float64{4, 1, 3, 2}, Stat{Median: 2.5, Min: 1, Max: 4, N: 4}},
	} {
		if got := newStat(tc.in); got != tc.want {
			t.Errorf("newStat(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	sums := summarize(mustParse(t, sampleRaw))
	if len(sums) != 2 || sums[0].System != "rabbit-091" || sums[1].System != "nats" {
		t.Fatalf("systems = %v, want rabbit-091 then nats", systemsIn(sums))
	}
	r := sums[0]
	if got := r.Send[256]; got != (Stat{Median: 9000, Min: 8000, Max: 12000, N: 3}) {
		t.Errorf("rabbit send W=256 = %+v", got)
	}
	if got := r.LatP99; got != (Stat{Median: 46.5, Min: 40, Max: 53, N: 2}) {
		t.Errorf("rabbit p99 = %+v", got)
	}
	want := []CDFPoint{{0.5, 7.55}, {0.99, 46.5}, {1, 80}}
	if len(r.CDF) != len(want) {
		t.Fatalf("rabbit CDF = %+v, want %+v", r.CDF, want)
	}
	for i := range want {
		if r.CDF[i] != want[i] {
			t.Errorf("rabbit CDF[%d] = %+v, want %+v", i, r.CDF[i], want[i])
		}
	}
}

func TestRenderTable(t *testing.T) {
	got := renderTable(mustParse(t, sampleRaw), "raw-x.txt", "img/bench-compare.png")
	for _, want := range []string{
		"from `raw-x.txt`: 1 000 messages per throughput test, 3 repetition(s)",
		"**Not a full run**",
		"| system | send W=1 msg/s | send W=256 msg/s | receive+ack P=256 msg/s | latency at 1000 msg/s p50 ms | p99 ms | max ms |",
		"| RabbitMQ 3.10 quorum queue, 3 nodes (AMQP 0-9-1) | **500** (480–520) | **9 000** (8 000–12 000) | 13 000 | **7.55** (7.00–8.10) | **46.5** (40.0–53.0) | **80.0** (70.0–90.0) |",
		"| NATS 2.9 JetStream R3 (no fsync per message) | 1 155 | 12 658 | 22 716 | 3.05 | 40.0 | 45.0 |",
		"- params: N=1000 REPS=3",
		"![Throughput per system and latency CDF](img/bench-compare.png)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestRenderTableFullRunHasNoCaution(t *testing.T) {
	var b strings.Builder
	for rep := 1; rep <= 3; rep++ {
		writeResult(&b, Result{System: "nats", Test: "send", Rep: rep, Param: 256, N: 100000, Secs: 4, Rate: 25000})
	}
	if got := renderTable(mustParse(t, b.String()), "raw.txt", ""); strings.Contains(got, "Not a full run") {
		t.Errorf("a 3 x 100 000 run is marked as not full:\n%s", got)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1 000", 12657.6: "12 658", 1234567: "1 234 567", -4321: "-4 321"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestReplaceBlock(t *testing.T) {
	doc := "# Benchmarks\n\nintro\n\n" + markBegin + "\nold table\n" + markEnd + "\n\nafter\n"
	got, err := replaceBlock(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Benchmarks\n\nintro\n\n" + markBegin + "\nnew table\n" + markEnd + "\n\nafter\n"
	if got != want {
		t.Errorf("replaced:\n%s\nwant:\n%s", got, want)
	}
	again, err := replaceBlock(got, "new table\n")
	if err != nil || again != got {
		t.Errorf("a second replacement changed the page: %v\n%s", err, again)
	}

	appended, err := replaceBlock("# Benchmarks\n", "t\n")
	if err != nil || appended != "# Benchmarks\n\n"+markBegin+"\nt\n"+markEnd+"\n" {
		t.Errorf("append to a page without markers = %q, %v", appended, err)
	}
	for _, bad := range []string{markEnd + "\n" + markBegin, markBegin + " only", markBegin + markEnd + markBegin + markEnd} {
		if _, err := replaceBlock(bad, "t"); !errors.Is(err, errMarkers) {
			t.Errorf("replaceBlock(%q) = %v, want errMarkers", bad, err)
		}
	}
}

func TestChartIsPNGOfItsSize(t *testing.T) {
	for name, raw := range map[string]string{
		"full":           sampleRaw,
		"no latency":     "RESULT system=nats test=send rep=1 param=1 n=10 secs=1 rate=10\n",
		"latency only":   "RESULT system=nats test=lat rep=1 param=1000 n=10 secs=1 rate=10 p50_ms=0 p99_ms=0 max_ms=0\nCDF system=nats rep=1 0.5:0 1:0\n",
		"unknown system": "RESULT system=other test=recv rep=1 param=256 n=10 secs=1 rate=10\n",
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeChart(&buf, mustParse(t, raw)); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != chartW || b.Dy() != chartH {
				t.Errorf("chart is %dx%d, want %dx%d", b.Dx(), b.Dy(), chartW, chartH)
			}
		})
	}
	if err := writeChart(&bytes.Buffer{}, Raw{}); !errors.Is(err, errNoData) {
		t.Errorf("chart of nothing: %v, want errNoData", err)
	}
}

func TestCheckLoopback(t *testing.T) {
	for u, ok := range map[string]bool{
		"amqp://guest:guest@127.0.0.1:5701/": true,
		"nats://localhost:4222":              true,
		"amqp://[::1]:5672":                  true,
		"amqp://10.0.0.1:5672":               false,
		"nats://example.com:4222":            false,
	} {
		if err := checkLoopback(u); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v", u, err)
		}
	}
}

// memQueue is an in-memory system: a FIFO with confirmations and acks, to drive the
// tests' logic without a broker.
type memQueue struct {
	mu     sync.Mutex
	msgs   [][]byte
	unack  int
	signal chan struct{} // a token when messages arrive
}

func newMemQueue() *memQueue { return &memQueue{signal: make(chan struct{}, 1)} }

func (q *memQueue) Reset(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs, q.unack = nil, 0
	return nil
}

func (q *memQueue) Depth(ctx context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs) + q.unack, nil
}

func (q *memQueue) Describe(ctx context.Context) string { return "memory" }
func (q *memQueue) Close()                              {}
func (q *memQueue) NewSender(ctx context.Context) (sender, error) {
	return memSender{q}, nil
}
func (q *memQueue) NewReceiver(ctx context.Context, prefetch int) (receiver, error) {
	return memReceiver{q}, nil
}

type memSender struct{ q *memQueue }

func (s memSender) Send(ctx context.Context, body []byte) (func() error, error) {
	s.q.mu.Lock()
	s.q.msgs = append(s.q.msgs, body)
	s.q.mu.Unlock()
	select {
	case s.q.signal <- struct{}{}:
	default:
	}
	return func() error { return nil }, nil
}
func (s memSender) Close() {}

type memReceiver struct{ q *memQueue }

func (r memReceiver) Next(ctx context.Context) ([]byte, func() error, error) {
	for {
		r.q.mu.Lock()
		if len(r.q.msgs) > 0 {
			b := r.q.msgs[0]
			r.q.msgs = r.q.msgs[1:]
			r.q.unack++
			r.q.mu.Unlock()
			return b, func() error {
				r.q.mu.Lock()
				r.q.unack--
				r.q.mu.Unlock()
				return nil
			}, nil
		}
		r.q.mu.Unlock()
		select {
		case <-r.q.signal:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}
func (r memReceiver) Close() {}

func TestRunLoadAgainstMemoryQueue(t *testing.T) {
	c := DefaultLoadConfig()
	c.System, c.N, c.Size, c.Windows, c.Prefetch = "memory", 500, 64, []int{1, 8}, 16
	c.LatRate, c.LatDur = 2000, 100*time.Millisecond
	var out, logw bytes.Buffer
	if err := runLoad(context.Background(), c, newMemQueue(), &out, &logw); err != nil {
		t.Fatalf("runLoad: %v\n%s", err, logw.String())
	}
	raw := mustParse(t, out.String())
	var tests []string
	for _, r := range raw.Results {
		tests = append(tests, r.Test+"/"+strconv.Itoa(r.Param))
		if r.Rate <= 0 {
			t.Errorf("%s has rate %v", r.Test, r.Rate)
		}
	}
	if got := strings.Join(tests, " "); got != "send/1 send/8 recv/16 lat/2000" {
		t.Errorf("tests run: %s", got)
	}
	lat := raw.Results[len(raw.Results)-1]
	if lat.N != 200 || lat.Lat50 < 0 || lat.Lat50 > lat.Lat99 || lat.Lat99 > lat.Max {
		t.Errorf("latency result %+v: want 200 messages and p50 <= p99 <= max", lat)
	}
	if lat.Acc50 <= 0 || lat.Acc50 > lat.Max || lat.Dlv50 < -lat.Max || lat.Dlv50 > lat.Max {
		t.Errorf("latency result %+v: want the median split into send-to-confirmation (> 0) and confirmation-to-receipt", lat)
	}
	table := renderTable(raw, "raw.txt", "")
	if !strings.Contains(table, "| system | send to confirmation, p50 ms | confirmation to receipt, p50 ms |") ||
		!strings.Contains(table, "| memory |") {
		t.Errorf("table lacks the latency split:\n%s", table)
	}
	if len(raw.CDFs) != 1 || len(raw.CDFs[0].Points) != len(cdfFractions) {
		t.Errorf("CDF lines: %+v", raw.CDFs)
	}
}

// failingQueue refuses every send: its confirmations fail.
type failingQueue struct{ *memQueue }

var errRefused = errors.New("refused")

func (f failingQueue) NewSender(ctx context.Context) (sender, error) { return failingSender{}, nil }

type failingSender struct{}

func (failingSender) Send(ctx context.Context, body []byte) (func() error, error) {
	return func() error { return errRefused }, nil
}
func (failingSender) Close() {}

func TestRunLoadReportsRefusedSends(t *testing.T) {
	c := DefaultLoadConfig()
	c.System, c.N, c.Windows = "memory", 50, []int{4}
	c.Tests = []string{"send"}
	var out bytes.Buffer
	err := runLoad(context.Background(), c, failingQueue{newMemQueue()}, &out, &bytes.Buffer{})
	if !errors.Is(err, errRefused) {
		t.Fatalf("runLoad = %v, want the refusal", err)
	}
	if strings.Contains(out.String(), "RESULT") {
		t.Errorf("a failed test wrote a result: %s", out.String())
	}
}

func TestLoadConfigValidate(t *testing.T) {
	if err := DefaultLoadConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	for name, mut := range map[string]func(*loadConfig){
		"size":    func(c *loadConfig) { c.Size = 8 },
		"window":  func(c *loadConfig) { c.Windows = []int{0} },
		"test":    func(c *loadConfig) { c.Tests = []string{"soak"} },
		"n":       func(c *loadConfig) { c.N = 0 },
		"latency": func(c *loadConfig) { c.LatDur = 0 },
	} {
		c := DefaultLoadConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
}
