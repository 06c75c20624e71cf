//go:build !race

package fsm

import "testing"

// TestMemoryPerMessage keeps the per-message overhead (everything the fsm allocates
// beyond the message's payload and property strings) at or below 300 bytes. Memory, not
// time: it is stable across machines. Not under -race, whose allocator pads: `make test`
// runs it in a separate step without the race detector (NORACE_TESTS in the Makefile).
func TestMemoryPerMessage(t *testing.T) {
	for _, c := range []struct {
		name string
		mk   func(int) *Message
	}{{"bare", bareMsg}, {"typical", typicalMsg}} {
		added, strs := heapPerMessage(50_000, c.mk)
		t.Logf("%s: the fsm adds %.0f B/msg, %.0f B of it the property strings: overhead %.0f B", c.name, added, strs, added-strs)
		if added-strs > 300 {
			t.Errorf("%s: %.0f B overhead per message, the budget is 300", c.name, added-strs)
		}
	}
}
