package fsm

import (
	"bytes"
	"testing"
)

// TestCountersFollowEvents: every event the metrics export is counted once on the
// target it happened to, the oldest enqueue time is the first message's, and a restored
// replica starts its counters from zero while its digest (the replicated state) is equal.
func TestCountersFollowEvents(t *testing.T) {
	cfg := queueCfg()
	cfg.Queue.MaxDeliveryCount = 2
	x := newTF(t, cfg)
	x.send(msgOf("a"), msgOf("b"), msgOf("c"), msgOf("d"))
	x.advance(10)
	x.send(msgOf("e", withTTL(5)))
	got := x.recv(q, 3) // a b c
	if err := x.settle(q, Complete, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := x.settle(q, Abandon, got[1]); err != nil {
		t.Fatal(err)
	}
	if err := x.settle(q, DeadLetter, got[2]); err != nil {
		t.Fatal(err)
	}
	x.advance(10)
	x.tick() // e expires

	main, dl := x.stats(q), x.stats(dlq)
	want := Counters{Incoming: 5, Outgoing: 3, Completed: 1, Abandoned: 1, DeadLettered: 1, Expired: 1}
	if main.Counters != want {
		t.Errorf("main counters %+v, want %+v", main.Counters, want)
	}
	if dl.Counters != (Counters{}) {
		t.Errorf("dead-letter counters %+v, want none", dl.Counters)
	}
	if main.Oldest != t0 || dl.Oldest != t0 {
		t.Errorf("oldest main %d dlq %d, want %d", main.Oldest, dl.Oldest, t0)
	}

	var buf bytes.Buffer
	if err := x.f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r := New(cfg)
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if r.Digest() != x.f.Digest() {
		t.Fatal("counters changed the digest")
	}
	if c := r.Stats().Targets[0].Counters; c != (Counters{}) {
		t.Errorf("restored counters %+v, want zero", c)
	}
}
