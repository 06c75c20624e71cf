package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stats are the checker's figures for a set of operations (a run, or the operations
// started while one fault was active).
type Stats struct {
	Acked      int // acknowledged sends and schedules
	Maybe      int // sends that failed: may or may not have been enqueued
	Delivered  int // deliveries (a redelivery counts again)
	Lost       int // acknowledged, never completed (nor dead-lettered) by anyone
	Unexpected int // delivered, never sent
	DupOK      int // redeliveries each explained by a lock the client saw end
	DupBad     int // redeliveries after a successful complete
	Enqueued2  int // messages enqueued more than once by a single send
	Reordered  int // session deliveries ahead of messages the SDK's releaser gave back
}

func (s *Stats) add(o Stats) {
	s.Acked += o.Acked
	s.Maybe += o.Maybe
	s.Delivered += o.Delivered
	s.Lost += o.Lost
	s.Unexpected += o.Unexpected
	s.DupOK += o.DupOK
	s.DupBad += o.DupBad
	s.Enqueued2 += o.Enqueued2
	s.Reordered += o.Reordered
}

// Result is what the checker found in a history.
type Result struct {
	Stats
	ByFault    map[string]*Stats // by the fault active when the send (or redelivery) started
	Violations []string          // each names the history lines that show it
}

func (r *Result) violate(format string, args ...any) {
	if len(r.Violations) < 200 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func (r *Result) fault(f string) *Stats {
	if f == "" {
		f = "none"
	}
	s := r.ByFault[f]
	if s == nil {
		s = &Stats{}
		r.ByFault[f] = s
	}
	return s
}

const stamp = "15:04:05.000"

// jump is a clock-jump fault: while a partition leader's clock is ahead, and until real
// time has caught up with the stamps it wrote (a leader stamps entries never earlier
// than the previous one), scheduled messages fall due up to that much early by the
// clients' clocks. That is what a clock jump does, not a broker fault.
type jump struct {
	from, to time.Time // the jump, and its heal plus the jump
	ahead    time.Duration
}

type jumps []jump

// clockJumps collects the "clock-jump" faults of ops, each until the heal after it.
func clockJumps(ops []Op) jumps {
	var out jumps
	var open []int // indexes into out still waiting for their heal
	for i := range ops {
		o := &ops[i]
		switch o.Kind {
		case "clock-jump":
			if d, err := time.ParseDuration(o.Value); err == nil {
				out = append(out, jump{from: o.T, ahead: d})
				open = append(open, len(out)-1)
			}
		case "heal":
			for _, k := range open {
				out[k].to = o.T.Add(out[k].ahead)
			}
			open = nil
		}
	}
	for _, k := range open { // never healed: in force to the end
		out[k].to = time.Now().Add(out[k].ahead)
	}
	return out
}

// ahead is the largest jump in force at t, 0 when none.
func (js jumps) ahead(t time.Time) time.Duration {
	var d time.Duration
	for _, j := range js {
		if !t.Before(j.from) && !t.After(j.to) && j.ahead > d {
			d = j.ahead
		}
	}
	return d
}

// Check checks a whole history, drain included.
func Check(ops []Op) *Result {
	r := &Result{ByFault: map[string]*Stats{}}
	sends := map[string]*Op{} // by ID: the send or schedule
	settle := map[int]*Op{}   // by delivery index
	deliveries := map[string][]*Op{}
	completed := map[string]bool{} // a complete was attempted (ok or not)
	for i := range ops {
		o := &ops[i]
		switch o.Kind {
		case "send", "schedule":
			if prev, dup := sends[o.ID]; dup {
				r.violate("MessageId %s sent twice by the workload (lines %d, %d): a workload bug", o.ID, prev.I, o.I)
			}
			sends[o.ID] = o
			if o.OK() {
				r.Acked++
				r.fault(o.Fault).Acked++
			} else {
				r.Maybe++
				r.fault(o.Fault).Maybe++
			}
		case "deliver":
			deliveries[o.ID] = append(deliveries[o.ID], o)
			r.Delivered++
		case "complete", "abandon", "expire", "unsettled":
			if ops[o.Ref].Kind == "deliver" {
				settle[o.Ref] = o
			}
			if o.Kind == "complete" {
				completed[ops[o.Ref].ID] = true
			}
		}
	}

	jumps := clockJumps(ops)

	// Lost and unexpected.
	for id, s := range sends {
		if s.OK() && !completed[id] {
			r.Lost++
			r.fault(s.Fault).Lost++
			what := "never delivered"
			if d := deliveries[id]; len(d) > 0 {
				what = fmt.Sprintf("delivered %d times (last line %d) but never completed", len(d), d[len(d)-1].I)
			}
			r.violate("lost: %s acknowledged (line %d, on %s, during %q), %s", id, s.I, s.Node, s.Fault, what)
		}
	}
	ids := make([]string, 0, len(deliveries))
	for id := range deliveries {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ds := deliveries[id]
		s, ok := sends[id]
		if !ok {
			r.Unexpected++
			r.fault(ds[0].Fault).Unexpected++
			r.violate("unexpected: %s delivered (line %d) but never sent", id, ds[0].I)
			continue
		}
		if s.Kind == "schedule" && ds[0].End.Before(s.At.Add(-500*time.Millisecond-jumps.ahead(ds[0].End))) {
			r.violate("early: %s scheduled for %s delivered at %s (lines %d, %d)", id, s.At.Format(time.StampMilli), ds[0].End.Format(time.StampMilli), s.I, ds[0].I)
		}
		// One send, one message: copies under several sequence numbers were enqueued
		// more than once (no client retried: each ID is sent once).
		seqs := map[int64][]*Op{}
		var order []int64
		for _, d := range ds {
			if _, ok := seqs[d.Seq]; !ok {
				order = append(order, d.Seq)
			}
			seqs[d.Seq] = append(seqs[d.Seq], d)
		}
		if len(order) > 1 {
			r.Enqueued2++
			r.fault(s.Fault).Enqueued2++
			r.violate("enqueued twice: %s sent once (line %d, on %s, %s to %s, during %q) and delivered under sequence numbers %v (first on lines %d and %d)",
				id, s.I, s.Node, s.T.Format(stamp), s.End.Format(stamp), s.Fault, order, seqs[order[0]][0].I, seqs[order[1]][0].I)
		}
		for _, seq := range order {
			// In the order the broker handed them out, which their lock expiries give
			// (LockedUntil = hand-out time + lock duration). The order the clients
			// recorded them can differ, when a delivery spends longer on the wire (to
			// a partitioned client) than its lock lasts.
			cp := seqs[seq]
			sort.SliceStable(cp, func(i, j int) bool { return handedOut(cp[i]).Before(handedOut(cp[j])) })
			r.checkCopy(id, s, cp, settle)
		}
		// A message leaves once: two acknowledged completes are one too many.
		for _, seq := range order {
			var oks []int
			for _, d := range seqs[seq] {
				if st := settle[d.I]; st != nil && st.Kind == "complete" && st.OK() {
					oks = append(oks, st.I)
				}
			}
			if len(oks) > 1 {
				r.violate("completed twice: %s (sequence number %d), completes acknowledged on lines %v", id, seq, oks)
			}
		}
	}
	checkSessions(ops, sends, r)
	return r
}

// handedOut orders deliveries by when the broker handed them out: by their lock's
// expiry, or when the client got them for a delivery without one.
func handedOut(d *Op) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, d.Value); err == nil {
		return t
	}
	return d.End.Add(lockDuration)
}

// checkCopy checks the deliveries of one enqueued copy of a message, in the order they
// were handed out. A delivery after a successful complete of the one before is a
// violation: "duplicate" when the complete was acknowledged before the new delivery
// reached its client, "double lock" when the complete was acknowledged later (the
// broker accepted a complete for a lock it had already given to someone else).
func (r *Result) checkCopy(id string, s *Op, ds []*Op, settle map[int]*Op) {
	for j, d := range ds {
		if d.DLQ && d.DC < maxDelivery {
			r.violate("dead-lettered: %s found in the dead-letter queue (line %d) with delivery count %d < %d", id, d.I, d.DC, maxDelivery)
		}
		if j == 0 {
			continue
		}
		prev := ds[j-1]
		st := settle[prev.I]
		switch {
		case st == nil || st.Kind != "complete" || !st.OK():
			r.DupOK++
			r.fault(d.Fault).DupOK++
		case st.End.Before(d.End):
			r.DupBad++
			r.fault(d.Fault).DupBad++
			r.violate("duplicate: %s delivered again (line %d, on %s) after its complete was acknowledged (line %d, on %s, for the delivery on line %d)",
				id, d.I, d.Node, st.I, st.Node, prev.I)
		default:
			r.DupBad++
			r.fault(d.Fault).DupBad++
			r.violate("double lock: %s completed with success (line %d, on %s, %s to %s) for its delivery on line %d, while it had been delivered again to %s (line %d, at %s)",
				id, st.I, st.Node, st.T.Format(stamp), st.End.Format(stamp), prev.I, d.Worker, d.I, d.End.Format(stamp))
		}
		if s.Session == "" && d.DC <= prev.DC {
			r.violate("delivery count: %s delivered with count %d (line %d) after count %d (line %d)", id, d.DC, d.I, prev.DC, prev.I)
		}
	}
}

// checkSessions checks per-session FIFO and that session state never goes back.
func checkSessions(ops []Op, sends map[string]*Op, r *Result) {
	acked := map[string][]int{} // session -> acknowledged numbers, ascending
	for _, s := range sends {
		if s.Session != "" && s.OK() {
			acked[s.Session] = append(acked[s.Session], s.N)
		}
	}
	for _, ns := range acked {
		sort.Ints(ns)
	}
	type epochKey struct {
		worker string
		epoch  int
	}
	// When a complete of each session message was first attempted: a message counts as
	// gone from the session's front from then on (the attempt may have succeeded).
	firstTry := map[string]map[int]time.Time{}
	var dels []*Op
	sets := map[string][]*Op{} // successful state sets
	for i := range ops {
		o := &ops[i]
		if o.Session == "" {
			continue
		}
		switch {
		case o.Kind == "complete":
			n := ops[o.Ref].N
			if firstTry[o.Session] == nil {
				firstTry[o.Session] = map[int]time.Time{}
			}
			if t, ok := firstTry[o.Session][n]; !ok || o.T.Before(t) {
				firstTry[o.Session][n] = o.T
			}
		case o.Kind == "deliver":
			dels = append(dels, o)
		case o.Kind == "state-set" && o.OK():
			sets[o.Session] = append(sets[o.Session], o)
		}
	}
	// Deliveries in the order they came back; a delivery of n is in order if every
	// acknowledged m < n of its session had a complete attempted before, or came
	// earlier in the same accepted session. One exception, which Azure shares: when
	// the previous ReceiveMessages of the same accepted session returned fewer
	// messages than it asked for, the credit it left on the link (o.Left) let the
	// broker send up to that many messages after it returned, and the Go SDK's
	// releaser gave them back (released: no delivery count). Meanwhile the broker,
	// still holding credit, sent the messages behind them, which the next call
	// returns first. So up to o.Left skipped messages are explained there (and
	// counted), never more; any other gap is a violation.
	sort.SliceStable(dels, func(i, j int) bool { return dels[i].End.Before(dels[j].End) })
	inEpoch := map[epochKey]map[int]bool{}
	low := map[string]int{} // index into acked below which every message was tried
	for _, o := range dels {
		k := epochKey{o.Worker, o.Epoch}
		if inEpoch[k] == nil {
			inEpoch[k] = map[int]bool{}
		}
		a, tried := acked[o.Session], firstTry[o.Session]
		before := func(m int) bool { t, ok := tried[m]; return ok && t.Before(o.End) }
		p := low[o.Session]
		for p < len(a) && before(a[p]) {
			p++
		}
		low[o.Session] = p
		var skipped []int
		for q := p; q < len(a) && a[q] < o.N; q++ {
			if m := a[q]; !before(m) && !inEpoch[k][m] {
				skipped = append(skipped, m)
			}
		}
		switch {
		case len(skipped) == 0:
		case len(skipped) <= o.Left:
			r.Reordered++
		default:
			r.violate("session FIFO: %s message %d delivered (line %d, %s) while acknowledged message %d had been neither completed nor delivered before it (%d skipped, %d credit left by the previous receive)",
				o.Session, o.N, o.I, o.Worker, skipped[0], len(skipped), o.Left)
		}
		inEpoch[k][o.N] = true
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind != "state-get" || !o.OK() {
			continue
		}
		got := 0
		if o.Value != "" {
			got, _ = strconv.Atoi(strings.TrimSpace(o.Value))
		}
		want, from := 0, -1
		for _, s := range sets[o.Session] {
			v, _ := strconv.Atoi(s.Value)
			if s.End.Before(o.T) && v > want {
				want, from = v, s.I
			}
		}
		if got < want {
			r.violate("session state went back: %s read %d (line %d) after %d was set (line %d)", o.Session, got, o.I, want, from)
		}
	}
}
