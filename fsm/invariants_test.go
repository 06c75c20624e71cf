//go:build invariants || race

package fsm

import (
	"strings"
	"testing"
)

// TestInvariantsDetectCorruption: the checker fails loudly on a corrupted counter.
func TestInvariantsDetectCorruption(t *testing.T) {
	f := New(queueCfg())
	f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("a")}}}})
	f.ents[0].main.nActive++
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "counters") {
			t.Fatalf("recovered %v, want a counters invariant panic", r)
		}
	}()
	f.Apply(&Entry{Now: t0, Cmds: []Command{&Tick{}}})
}
