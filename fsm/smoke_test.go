package fsm

import (
	"slices"
	"testing"
)

func TestSmokeEnqueueReceiveComplete(t *testing.T) {
	x := newTF(t, queueCfg())
	seqs := x.send(msgOf("a"), msgOf("b"), msgOf("c"))
	if !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Fatalf("seqs %v", seqs)
	}
	got := x.recv(q, 2)
	if !slices.Equal(bodies(got), []string{"a", "b"}) || got[0].DeliveryCount != 1 {
		t.Fatalf("got %v dc %d", bodies(got), got[0].DeliveryCount)
	}
	if err := x.settle(q, Complete, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := x.settle(q, Complete, got[0]); err != nil { // S-LOCK-12: a repeat gets the first outcome
		t.Fatalf("repeated complete: %v", err)
	}
	if err := x.settle(q, Abandon, got[0]); err == nil {
		t.Fatal("abandon after complete succeeded")
	}
	st := x.stats(q)
	if st.Active != 2 || st.Locked != 1 {
		t.Fatalf("stats %+v", st)
	}
}
