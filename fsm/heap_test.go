package fsm

import "testing"

// The deadline and session heaps keep each owner's store order in its entry: a
// configuration that renumbers the stores (subscriptions listed in another order)
// must reach the entries, and the heaps stay in order, so that the same deadlines
// still come due in the same order on every replica.
func TestHeapsFollowStoreRenumbering(t *testing.T) {
	cfg := topicCfg("a", "b", "c")
	for i := range cfg.Subscriptions {
		cfg.Subscriptions[i].Queue.RequiresSession = i == 2
	}
	x := newTF(t, cfg)
	for i := range 20 {
		x.send(msgOf("m", withTTL(int64(1000+i%3)), withSession("s"+string(rune('0'+i%4)))))
	}
	for _, id := range []string{"s0", "s1", "s2"} {
		if r := x.one(&AcceptSession{Target: Target{Sub: "c"}, SessionID: id, Owner: "o"}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	check := func(when string) {
		t.Helper()
		if i := x.f.dl.h.disorder(); i >= 0 {
			t.Fatalf("%s: deadline heap out of order at %d", when, i)
		}
		if i := x.f.sh.h.disorder(); i >= 0 {
			t.Fatalf("%s: session heap out of order at %d", when, i)
		}
		for _, e := range x.f.dl.h {
			if e.ord != e.p.st.ord {
				t.Fatalf("%s: message %d has store order %d in the deadline heap, its store has %d", when, e.p.seq, e.ord, e.p.st.ord)
			}
		}
		for _, e := range x.f.sh.h {
			if e.ord != e.p.st.ord {
				t.Fatalf("%s: session %q has store order %d in the heap, its store has %d", when, e.p.id, e.ord, e.p.st.ord)
			}
		}
	}
	check("before")
	if x.f.dl.len() != 60 || x.f.sh.len() != 3 {
		t.Fatalf("%d messages and %d sessions with a deadline, want 60 and 3", x.f.dl.len(), x.f.sh.len())
	}

	re := topicCfg("c", "a", "b", "d")
	re.Subscriptions[0].Queue.RequiresSession = true
	if r := x.one(&UpdateEntity{Config: re}); r.Err != nil {
		t.Fatal(r.Err)
	}
	check("after the subscriptions were reordered")

	x.advance(DefaultQueueConfig().LockDurationMs + 2000) // past the TTLs and the session locks
	x.tick()
	if x.f.dl.len() != 0 || x.f.sh.len() != 0 {
		t.Fatalf("after every deadline: %d messages and %d sessions still wait", x.f.dl.len(), x.f.sh.len())
	}
	for _, sub := range []string{"a", "b", "c"} {
		if s := x.stats(Target{Sub: sub}); s.Active != 0 {
			t.Errorf("%s: %d messages left after their time to live", sub, s.Active)
		}
	}
}
