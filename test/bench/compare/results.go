package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The raw results file is line-oriented text, so that runs can be concatenated and read
// by eye:
//
//	# free text: the conditions of the run (versions, host, parameters)
//	RESULT system=nats test=send rep=1 param=256 n=100000 secs=4.1 rate=24390
//	RESULT system=nats test=lat rep=1 param=1000 n=30000 ... p50_ms=1.5 p99_ms=9.2 ...
//	CDF system=nats rep=1 0.01:0.91 0.02:0.95 ... 1:29.4
//
// param is the send window (send), the prefetch (recv) or the offered rate (lat).

// Result is one measurement of one test in one repetition.
type Result struct {
	System string
	Test   string // send, recv, lat
	Rep    int
	Param  int
	N      int
	Secs   float64
	Rate   float64 // msg/s (lat: the achieved send rate)
	// Latency test only, in milliseconds.
	Lat50, Lat99, Lat999, Max float64
	MaxLag                    float64 // how far the producer fell behind its schedule
	// Where the median goes (0 when not recorded): scheduled send to the send's
	// confirmation (Acc50), and confirmation to receipt (Dlv50, negative when the
	// receiver usually has the message before the sender hears it is stored).
	Acc50, Dlv50 float64
	// The same at the 99th percentile of each (0 when not recorded): each part's own
	// tail, not the split of the p99 message.
	Acc99, Dlv99 float64
}

// CDFPoint says that a fraction Q of the messages took at most Ms milliseconds.
type CDFPoint struct {
	Q, Ms float64
}

// CDF is the latency distribution of one latency test.
type CDF struct {
	System string
	Rep    int
	Points []CDFPoint
}

// Raw is a parsed results file.
type Raw struct {
	Notes   []string // the "#" lines, without the "# "
	Results []Result
	CDFs    []CDF
}

func writeResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "RESULT system=%s test=%s rep=%d param=%d n=%d secs=%.3f rate=%.1f", r.System, r.Test, r.Rep,
		r.Param, r.N, r.Secs, r.Rate)
	if r.Test == "lat" {
		fmt.Fprintf(w, " p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f max_lag_ms=%.3f acc50_ms=%.3f dlv50_ms=%.3f acc99_ms=%.3f dlv99_ms=%.3f",
			r.Lat50, r.Lat99, r.Lat999, r.Max, r.MaxLag, r.Acc50, r.Dlv50, r.Acc99, r.Dlv99)
	}
	fmt.Fprintln(w)
}

func writeCDF(w io.Writer, c CDF) {
	fmt.Fprintf(w, "CDF system=%s rep=%d", c.System, c.Rep)
	for _, p := range c.Points {
		fmt.Fprintf(w, " %s:%.3f", strconv.FormatFloat(p.Q, 'g', -1, 64), p.Ms)
	}
	fmt.Fprintln(w)
}

// parseRaw reads a results file. Lines it does not know (client logs mixed in) are
// skipped; a RESULT or CDF line that is malformed is an error naming its line number.
func parseRaw(r io.Reader) (Raw, error) {
	var raw Raw
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		var err error
		switch {
		case strings.HasPrefix(line, "#"):
			raw.Notes = append(raw.Notes, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		case strings.HasPrefix(line, "RESULT "):
			var res Result
			res, err = parseResult(line)
			raw.Results = append(raw.Results, res)
		case strings.HasPrefix(line, "CDF "):
			var c CDF
			c, err = parseCDF(line)
			raw.CDFs = append(raw.CDFs, c)
		}
		if err != nil {
			return Raw{}, fmt.Errorf("line %d: %w", ln, err)
		}
	}
	return raw, sc.Err()
}

func parseResult(line string) (Result, error) {
	var r Result
	seen := map[string]bool{}
	for _, f := range strings.Fields(line)[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return r, fmt.Errorf("RESULT field %q is not key=value", f)
		}
		seen[k] = true
		var err error
		switch k {
		case "system":
			r.System = v
		case "test":
			r.Test = v
		case "rep":
			r.Rep, err = strconv.Atoi(v)
		case "param":
			r.Param, err = strconv.Atoi(v)
		case "n":
			r.N, err = strconv.Atoi(v)
		case "secs":
			r.Secs, err = strconv.ParseFloat(v, 64)
		case "rate":
			r.Rate, err = strconv.ParseFloat(v, 64)
		case "p50_ms":
			r.Lat50, err = strconv.ParseFloat(v, 64)
		case "p99_ms":
			r.Lat99, err = strconv.ParseFloat(v, 64)
		case "p999_ms":
			r.Lat999, err = strconv.ParseFloat(v, 64)
		case "max_ms":
			r.Max, err = strconv.ParseFloat(v, 64)
		case "max_lag_ms":
			r.MaxLag, err = strconv.ParseFloat(v, 64)
		case "acc50_ms":
			r.Acc50, err = strconv.ParseFloat(v, 64)
		case "dlv50_ms":
			r.Dlv50, err = strconv.ParseFloat(v, 64)
		case "acc99_ms":
			r.Acc99, err = strconv.ParseFloat(v, 64)
		case "dlv99_ms":
			r.Dlv99, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return r, fmt.Errorf("RESULT %s=%q: %w", k, v, err)
		}
	}
	need := []string{"system", "test", "rep", "param", "rate"}
	if r.Test == "lat" {
		need = append(need, "p50_ms", "p99_ms", "max_ms")
	}
	for _, k := range need {
		if !seen[k] {
			return r, fmt.Errorf("RESULT line lacks %s=", k)
		}
	}
	switch r.Test {
	case "send", "recv", "lat":
	default:
		return r, fmt.Errorf("RESULT test=%q: want send, recv or lat", r.Test)
	}
	return r, nil
}

func parseCDF(line string) (CDF, error) {
	var c CDF
	fields := strings.Fields(line)[1:]
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			var err error
			switch k {
			case "system":
				c.System = v
			case "rep":
				c.Rep, err = strconv.Atoi(v)
			}
			if err != nil {
				return c, fmt.Errorf("CDF %s=%q: %w", k, v, err)
			}
			continue
		}
		qs, mss, ok := strings.Cut(f, ":")
		if !ok {
			return c, fmt.Errorf("CDF point %q is not fraction:ms", f)
		}
		q, err1 := strconv.ParseFloat(qs, 64)
		v, err2 := strconv.ParseFloat(mss, 64)
		if err1 != nil || err2 != nil || q <= 0 || q > 1 || v < 0 {
			return c, fmt.Errorf("CDF point %q: want a fraction in (0,1] and milliseconds >= 0", f)
		}
		if n := len(c.Points); n > 0 && (q <= c.Points[n-1].Q || v < c.Points[n-1].Ms) {
			return c, fmt.Errorf("CDF point %q does not rise after %v:%v", f, c.Points[n-1].Q, c.Points[n-1].Ms)
		}
		c.Points = append(c.Points, CDFPoint{Q: q, Ms: v})
	}
	if c.System == "" || len(c.Points) == 0 {
		return c, fmt.Errorf("CDF line needs system= and at least one point")
	}
	return c, nil
}

// Stat is the median and range of one figure over the repetitions.
type Stat struct {
	Median, Min, Max float64
	N                int // repetitions measured; 0: no value
}

// newStat summarizes vals; the median of an even count is the mean of the middle two.
func newStat(vals []float64) Stat {
	if len(vals) == 0 {
		return Stat{}
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Summary is the figures of one system over its repetitions.
type Summary struct {
	System string
	Send   map[int]Stat // by window
	Recv   map[int]Stat // by prefetch
	LatP50 Stat
	LatP99 Stat
	LatMax Stat
	LatRate,
	LatAchieved Stat
	// LatAcc50 and LatDlv50 split the median latency (Result.Acc50, Dlv50); N 0 when
	// the raw file predates them.
	LatAcc50, LatDlv50 Stat
	// CDF is, for each fraction, the median over the repetitions of its latency.
	CDF []CDFPoint
}

// summarize groups results by system, in the order systems first appear.
func summarize(raw Raw) []Summary {
	var order []string
	by := map[string][]Result{}
	for _, r := range raw.Results {
		if _, ok := by[r.System]; !ok {
			order = append(order, r.System)
		}
		by[r.System] = append(by[r.System], r)
	}
	var out []Summary
	for _, sys := range order {
		s := Summary{System: sys, Send: map[int]Stat{}, Recv: map[int]Stat{}}
		send, recv := map[int][]float64{}, map[int][]float64{}
		var p50, p99, mx, rate, ach, acc, dlv []float64
		for _, r := range by[sys] {
			switch r.Test {
			case "send":
				send[r.Param] = append(send[r.Param], r.Rate)
			case "recv":
				recv[r.Param] = append(recv[r.Param], r.Rate)
			case "lat":
				p50, p99, mx = append(p50, r.Lat50), append(p99, r.Lat99), append(mx, r.Max)
				rate, ach = append(rate, float64(r.Param)), append(ach, r.Rate)
				if r.Acc50 != 0 || r.Dlv50 != 0 {
					acc, dlv = append(acc, r.Acc50), append(dlv, r.Dlv50)
				}
			}
		}
		for w, v := range send {
			s.Send[w] = newStat(v)
		}
		for p, v := range recv {
			s.Recv[p] = newStat(v)
		}
		s.LatP50, s.LatP99, s.LatMax = newStat(p50), newStat(p99), newStat(mx)
		s.LatRate, s.LatAchieved = newStat(rate), newStat(ach)
		s.LatAcc50, s.LatDlv50 = newStat(acc), newStat(dlv)
		s.CDF = medianCDF(raw.CDFs, sys)
		out = append(out, s)
	}
	return out
}

// medianCDF merges a system's CDFs point by point: for each fraction present in every
// repetition, the median latency.
func medianCDF(all []CDF, sys string) []CDFPoint {
	var cdfs []CDF
	for _, c := range all {
		if c.System == sys {
			cdfs = append(cdfs, c)
		}
	}
	if len(cdfs) == 0 {
		return nil
	}
	var out []CDFPoint
	for _, p := range cdfs[0].Points {
		vals := []float64{p.Ms}
		for _, c := range cdfs[1:] {
			i := slices.IndexFunc(c.Points, func(o CDFPoint) bool { return o.Q == p.Q })
			if i < 0 {
				vals = nil
				break
			}
			vals = append(vals, c.Points[i].Ms)
		}
		if vals != nil {
			out = append(out, CDFPoint{Q: p.Q, Ms: newStat(vals).Median})
		}
	}
	// Medians taken point by point can dip; a CDF must not.
	for i := 1; i < len(out); i++ {
		out[i].Ms = max(out[i].Ms, out[i-1].Ms)
	}
	return out
}
