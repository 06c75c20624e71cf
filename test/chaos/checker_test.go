package chaos

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hist builds a history from ops whose times are seconds after a fixed instant.
type hb struct{ ops []Op }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func (h *hb) add(o Op, t, end float64) int {
	o.I, o.T, o.End = len(h.ops), at(t), at(end)
	h.ops = append(h.ops, o)
	return o.I
}

func (h *hb) send(id string, t float64, err string) {
	h.add(Op{Kind: "send", ID: id, Err: err}, t, t+0.01)
}

func (h *hb) deliver(w, id string, t float64) int {
	return h.add(Op{Kind: "deliver", Worker: w, ID: id, DC: uint32(t), Value: lock(t)}, t, t+0.01)
}

// lock is the LockedUntil of a message handed out at t.
func lock(t float64) string { return at(t).Add(lockDuration).Format(time.RFC3339Nano) }

func (h *hb) settle(kind string, ref int, t, end float64, err string) {
	h.add(Op{Kind: kind, ID: h.ops[ref].ID, Ref: ref, Err: err}, t, end)
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(h *hb)
		want  string // a violation containing this, or "" for none
	}{
		{"clean", func(h *hb) {
			h.send("a", 1, "")
			h.send("b", 1, "send: connection lost") // maybe: never delivered is fine
			d := h.deliver("r1", "a", 2)
			h.settle("abandon", d, 2, 2.1, "")
			d = h.deliver("r2", "a", 3)
			h.settle("complete", d, 3, 3.1, "")
		}, ""},
		{"lost", func(h *hb) { h.send("a", 1, "") }, "lost: a"},
		{"early", func(h *hb) {
			h.add(Op{Kind: "schedule", ID: "a", At: at(10)}, 1, 1.01)
			d := h.deliver("r1", "a", 5)
			h.settle("complete", d, 5.1, 5.2, "")
		}, "early: a"},
		// A leader's clock 8 s ahead from t=3, healed at t=4: until t=12 (heal plus the
		// jump) its stamps run up to 8 s ahead, so a schedule may fall due that early.
		{"early within a clock jump", func(h *hb) {
			h.add(Op{Kind: "clock-jump", Worker: "nemesis", Value: "8s"}, 3, 3)
			h.add(Op{Kind: "heal", Worker: "nemesis"}, 4, 4)
			h.add(Op{Kind: "schedule", ID: "a", At: at(10)}, 1, 1.01)
			d := h.deliver("r1", "a", 5)
			h.settle("complete", d, 5.1, 5.2, "")
		}, ""},
		{"earlier than the clock jump explains", func(h *hb) {
			h.add(Op{Kind: "clock-jump", Worker: "nemesis", Value: "2s"}, 3, 3)
			h.add(Op{Kind: "heal", Worker: "nemesis"}, 4, 4)
			h.add(Op{Kind: "schedule", ID: "a", At: at(10)}, 1, 1.01)
			d := h.deliver("r1", "a", 5)
			h.settle("complete", d, 5.1, 5.2, "")
		}, "early: a"},
		{"lost after an expired lock", func(h *hb) {
			h.send("a", 1, "")
			d := h.deliver("r1", "a", 2)
			h.settle("expire", d, 2, 2, "")
		}, "lost: a"},
		{"unexpected", func(h *hb) {
			d := h.deliver("r1", "x", 2)
			h.settle("complete", d, 2, 2.1, "")
		}, "unexpected: x"},
		{"redelivered after an acknowledged complete", func(h *hb) {
			h.send("a", 1, "")
			d := h.deliver("r1", "a", 2)
			h.settle("complete", d, 2, 2.1, "")
			d = h.deliver("r2", "a", 9)
			h.settle("complete", d, 9, 9.1, "")
		}, "duplicate: a"},
		{"complete acknowledged while another receiver held it", func(h *hb) {
			h.send("a", 1, "")
			d1 := h.deliver("r1", "a", 2)
			d2 := h.deliver("r2", "a", 8)
			h.settle("complete", d2, 8.1, 8.2, "")
			h.settle("complete", d1, 7, 12, "")
		}, "double lock: a"},
		{"redelivery after a failed complete is explained", func(h *hb) {
			h.send("a", 1, "")
			d := h.deliver("r1", "a", 2)
			h.settle("complete", d, 2, 12, "lock lost")
			d = h.deliver("r2", "a", 8)
			h.settle("complete", d, 8, 8.1, "")
		}, ""},
		{"one send enqueued twice", func(h *hb) {
			h.send("a", 1, "")
			d := h.deliver("r1", "a", 2)
			h.ops[d].Seq = 7
			h.settle("complete", d, 2, 2.1, "")
			d = h.deliver("r1", "a", 2)
			h.ops[d].Seq = 9
			h.settle("complete", d, 2, 2.1, "")
		}, "enqueued twice: a"},
		{"delivery count not increasing", func(h *hb) {
			h.send("a", 1, "")
			d := h.add(Op{Kind: "deliver", Worker: "r1", ID: "a", DC: 5, Value: lock(2)}, 2, 2.01)
			h.settle("abandon", d, 2.1, 2.2, "")
			d = h.add(Op{Kind: "deliver", Worker: "r2", ID: "a", DC: 3, Value: lock(4)}, 4, 4.01)
			h.settle("complete", d, 4.1, 4.2, "")
		}, "delivery count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &hb{}
			h.add(Op{Kind: "start"}, 0, 0)
			tc.build(h)
			res := Check(h.ops)
			got := strings.Join(res.Violations, "\n")
			if tc.want == "" && got != "" {
				t.Fatalf("violations in a correct history:\n%s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("want a violation %q, got:\n%s", tc.want, got)
			}
		})
	}
}

func TestCheckSessions(t *testing.T) {
	sess := func(h *hb, kind, w string, epoch, n int, t, end float64, ref int, err, value string) int {
		id := "s0-" + strconv.Itoa(n)
		if kind == "state-set" || kind == "state-get" {
			id = ""
		}
		return h.add(Op{Kind: kind, Worker: w, Session: "s0", N: n, ID: id, Epoch: epoch, Ref: ref, Err: err, Value: value}, t, end)
	}
	t.Run("in order across a lock loss", func(t *testing.T) {
		h := &hb{}
		h.add(Op{Kind: "start"}, 0, 0)
		for n := 1; n <= 3; n++ {
			sess(h, "send", "s", 0, n, float64(n)/10, float64(n)/10+0.01, 0, "", "")
		}
		d1 := sess(h, "deliver", "r1", 1, 1, 1, 1.01, 0, "", "")
		d2 := sess(h, "deliver", "r1", 1, 2, 1, 1.01, 0, "", "")
		sess(h, "complete", "r1", 1, 0, 1.1, 1.2, d1, "", "")
		sess(h, "state-set", "r1", 1, 0, 1.2, 1.3, 0, "", "1")
		sess(h, "complete", "r1", 1, 0, 1.3, 9, d2, "lock lost", "")
		sess(h, "state-get", "r2", 1, 0, 7, 7.01, 0, "", "1")
		d2 = sess(h, "deliver", "r2", 1, 2, 7, 7.01, 0, "", "")
		d3 := sess(h, "deliver", "r2", 1, 3, 7, 7.01, 0, "", "")
		sess(h, "complete", "r2", 1, 0, 7.1, 7.2, d2, "", "")
		sess(h, "complete", "r2", 1, 0, 7.2, 7.3, d3, "", "")
		if v := Check(h.ops).Violations; len(v) != 0 {
			t.Fatalf("violations: %v", v)
		}
	})
	t.Run("skipped message and state going back", func(t *testing.T) {
		h := &hb{}
		h.add(Op{Kind: "start"}, 0, 0)
		for n := 1; n <= 2; n++ {
			sess(h, "send", "s", 0, n, float64(n)/10, float64(n)/10+0.01, 0, "", "")
		}
		d2 := sess(h, "deliver", "r1", 1, 2, 1, 1.01, 0, "", "")
		sess(h, "complete", "r1", 1, 0, 1.1, 1.2, d2, "", "")
		sess(h, "state-set", "r1", 1, 0, 1.2, 1.3, 0, "", "2")
		sess(h, "state-get", "r2", 1, 0, 2, 2.01, 0, "", "1")
		d1 := sess(h, "deliver", "r2", 1, 1, 2, 2.01, 0, "", "")
		sess(h, "complete", "r2", 1, 0, 2.1, 2.2, d1, "", "")
		v := strings.Join(Check(h.ops).Violations, "\n")
		for _, want := range []string{"session FIFO: s0 message 2", "session state went back: s0 read 1"} {
			if !strings.Contains(v, want) {
				t.Errorf("want %q in:\n%s", want, v)
			}
		}
	})
	// The previous receive returned 1 of 5: the SDK's releaser gave back message 2,
	// sent on the credit that call left, while the broker sent 3 behind it; the next
	// receive returns 3, then 2. Explained up to the credit left, and no further.
	releaser := func(left int) *Result {
		h := &hb{}
		h.add(Op{Kind: "start"}, 0, 0)
		for n := 1; n <= 4; n++ {
			sess(h, "send", "s", 0, n, float64(n)/10, float64(n)/10+0.01, 0, "", "")
		}
		d1 := sess(h, "deliver", "r1", 1, 1, 1, 1.01, 0, "", "")
		sess(h, "complete", "r1", 1, 0, 1.1, 1.2, d1, "", "")
		var ds []int
		for i, n := range []int{4, 2, 3} {
			ds = append(ds, h.add(Op{Kind: "deliver", Worker: "r1", Session: "s0", N: n, ID: "s0-" + strconv.Itoa(n), Epoch: 1, Left: left}, 2, 2.01+float64(i)/100))
		}
		for i, d := range ds {
			sess(h, "complete", "r1", 1, 0, 3+float64(i)/10, 3.05+float64(i)/10, d, "", "")
		}
		return Check(h.ops)
	}
	t.Run("behind messages the SDK's releaser gave back", func(t *testing.T) {
		res := releaser(4)
		if len(res.Violations) != 0 || res.Reordered != 1 {
			t.Fatalf("violations %v, reordered %d; want none and 1", res.Violations, res.Reordered)
		}
	})
	t.Run("more skipped than the credit left", func(t *testing.T) {
		res := releaser(1)
		if v := strings.Join(res.Violations, "\n"); !strings.Contains(v, "session FIFO: s0 message 4") || !strings.Contains(v, "2 skipped, 1 credit left") {
			t.Fatalf("want a FIFO violation for message 4 with 2 skipped, got:\n%s", v)
		}
	})
}

// A delivery that reaches a partitioned client after its lock ran out, while the
// message went to another receiver and was completed, is at-least-once, not a
// violation: the broker handed it out first (lower delivery count).
func TestCheckLateDelivery(t *testing.T) {
	h := &hb{}
	h.add(Op{Kind: "start"}, 0, 0)
	h.send("a", 1, "")
	d2 := h.add(Op{Kind: "deliver", Worker: "r2", ID: "a", DC: 2, Value: lock(7)}, 7, 7.01)
	h.settle("complete", d2, 7.1, 7.2, "")
	d1 := h.add(Op{Kind: "deliver", Worker: "r1", ID: "a", DC: 1, Value: lock(1.5)}, 1, 9) // handed out at 1.5, arrived late
	h.settle("expire", d1, 9, 9, "")
	if v := Check(h.ops).Violations; len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
}

// CHAOS_HISTORY=path re-checks a history kept by a failed run (after a checker change).
func TestCheckHistoryFile(t *testing.T) {
	p := os.Getenv("CHAOS_HISTORY")
	if p == "" {
		t.Skip("set CHAOS_HISTORY to a history.jsonl to re-check it")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var o Op
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o)
	}
	res := Check(ops)
	t.Logf("%d acknowledged, lost %d, unexpected %d, redeliveries explained %d, unexplained %d, enqueued twice %d",
		res.Acked, res.Lost, res.Unexpected, res.DupOK, res.DupBad, res.Enqueued2)
	for _, v := range res.Violations {
		t.Error(v)
	}
}

// The metadata check wants every member at one digest and one applied index.
func TestMetaConverged(t *testing.T) {
	parse := func(s string) status {
		var st status
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	same := `{"Members":[{"ID":"a","MetadataDigest":"d","MetadataApplied":5},{"ID":"b","MetadataDigest":"d","MetadataApplied":5}]}`
	if err := metaConverged(parse(same), 2); err != nil {
		t.Errorf("equal members: %v", err)
	}
	for _, bad := range []string{
		`{"Members":[{"ID":"a","MetadataDigest":"d","MetadataApplied":5},{"ID":"b","MetadataDigest":"e","MetadataApplied":5}]}`,
		`{"Members":[{"ID":"a","MetadataDigest":"d","MetadataApplied":5},{"ID":"b","MetadataDigest":"d","MetadataApplied":4}]}`,
		`{"Members":[{"ID":"a","MetadataDigest":"d","MetadataApplied":5},{"ID":"b","MetadataApplied":5}]}`,
		`{"Members":[{"ID":"a","MetadataDigest":"d","MetadataApplied":5}]}`,
	} {
		if err := metaConverged(parse(bad), 2); err == nil {
			t.Errorf("%s: converged, want an error", bad)
		}
	}
}
