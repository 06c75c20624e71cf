package placement

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// loadView is a View of the nodes ids (zone zones[id]) with Load and Leads counted over
// groups.
func loadView(ids []string, zones map[string]string, groups []Group) View {
	var v View
	for _, id := range ids {
		c := &Node{ID: id, Zone: zones[id]}
		for _, g := range groups {
			if i := slices.Index(g.Replicas, id); i >= 0 {
				c.Load++
				if i == 0 {
					c.Leads++
				}
			}
		}
		v = append(v, c)
	}
	return v
}

// rebalanceAll applies Rebalance's moves until it has none, replacing each dropped
// replica in place, and returns how many it made; it fails t on a move that breaks a rule.
func rebalanceAll(t *testing.T, groups []Group, zones map[string]string, v View, want int) int {
	t.Helper()
	moves := 0
	for ; ; moves++ {
		if moves > 10_000 {
			t.Fatal("Rebalance does not end")
		}
		g, drop, add, ok := Rebalance(groups, zones, v, want)
		if !ok {
			return moves
		}
		before := distinctZones(groups[g].Replicas, zones)
		k := slices.Index(groups[g].Replicas, drop)
		if k < 0 || slices.Contains(groups[g].Replicas, add) {
			t.Fatalf("move %s -> %s in group %v", drop, add, groups[g])
		}
		groups[g].Replicas[k] = add
		if after := distinctZones(groups[g].Replicas, zones); after < before {
			t.Fatalf("move %s -> %s lowers the zones of group %d from %d to %d", drop, add, groups[g].ID, before, after)
		}
		// The View counts the move as the groups do.
		for _, c := range v {
			if want := loadView([]string{c.ID}, zones, groups)[0].Load; c.Load != want {
				t.Fatalf("node %s: Load %d after the move, holds %d", c.ID, c.Load, want)
			}
		}
	}
}

func distinctZones(reps []string, zones map[string]string) int {
	zs := map[string]bool{}
	for _, r := range reps {
		zs[zones[r]] = true
	}
	return len(zs)
}

// Three nodes holding every replica of 12 groups, two joining: the moves end with every
// node within 20 % of an even share (36 replicas over 5 nodes: 7.2, so 6 to 8 each).
func TestRebalanceScaleOut(t *testing.T) {
	zones := map[string]string{}
	var groups []Group
	for i := 0; i < 12; i++ {
		r := []string{"n1", "n2", "n3"}
		groups = append(groups, Group{ID: uint32(i + 1), Replicas: append(r[i%3:], r[:i%3]...)})
	}
	v := loadView([]string{"n1", "n2", "n3", "n4", "n5"}, zones, groups)
	moves := rebalanceAll(t, groups, zones, v, 3)
	if !Balanced(v) {
		t.Fatalf("not balanced after %d moves: %v", moves, loads(v))
	}
	for _, c := range v {
		if c.Load < 6 || c.Load > 8 {
			t.Fatalf("node %s holds %d replicas, want 6 to 8: %v", c.ID, c.Load, loads(v))
		}
	}
	if moves > 15 {
		t.Fatalf("%d moves for 14 replicas that must move", moves)
	}
}

func loads(v View) map[string]int {
	m := map[string]int{}
	for _, c := range v {
		m[c.ID] = c.Load
	}
	return m
}

// Nothing moves while a node drains, nor in a group that is under-replicated or has a
// replica down, nor when a move would put two replicas of a group in one zone.
func TestRebalanceHoldsBack(t *testing.T) {
	three := func() []Group {
		var gs []Group
		for i := 0; i < 6; i++ {
			gs = append(gs, Group{ID: uint32(i + 1), Replicas: []string{"n1", "n2", "n3"}})
		}
		return gs
	}
	t.Run("draining", func(t *testing.T) {
		gs := three()
		v := loadView([]string{"n1", "n2", "n3", "n4", "n5"}, nil, gs)
		v[0].Draining = true
		if _, _, _, ok := Rebalance(gs, nil, v, 3); ok {
			t.Fatal("moved while n1 drains")
		}
	})
	t.Run("under-replicated", func(t *testing.T) {
		gs := three()
		for i := range gs {
			gs[i].Replicas = gs[i].Replicas[:2]
		}
		v := loadView([]string{"n1", "n2", "n3", "n4", "n5"}, nil, gs)
		if _, _, _, ok := Rebalance(gs, nil, v, 3); ok {
			t.Fatal("moved an under-replicated group")
		}
	})
	t.Run("replica down", func(t *testing.T) {
		gs := three()
		v := loadView([]string{"n1", "n2", "n4", "n5"}, nil, gs) // n3 is not alive
		if _, _, _, ok := Rebalance(gs, nil, v, 3); ok {
			t.Fatal("moved a group with a replica down")
		}
	})
	t.Run("zones", func(t *testing.T) {
		gs := three()
		zones := map[string]string{"n1": "a", "n2": "b", "n3": "c", "n4": "a", "n5": "b", "n6": "c"}
		v := loadView([]string{"n1", "n2", "n3", "n4", "n5", "n6"}, zones, gs)
		moves := rebalanceAll(t, gs, zones, v, 3)
		if moves == 0 || !Balanced(v) {
			t.Fatalf("%d moves, loads %v", moves, loads(v))
		}
		for _, g := range gs {
			if distinctZones(g.Replicas, zones) != 3 {
				t.Fatalf("group %v lost its zone spread", g)
			}
		}
	})
	t.Run("balanced", func(t *testing.T) {
		gs := three()
		v := loadView([]string{"n1", "n2", "n3"}, nil, gs)
		if _, _, _, ok := Rebalance(gs, nil, v, 3); ok {
			t.Fatal("moved in a balanced cluster")
		}
	})
	t.Run("lone zone", func(t *testing.T) {
		// n3 is zone c's only node: it keeps every group's replica in c, unbalanced.
		gs := three()
		zones := map[string]string{"n1": "a", "n2": "b", "n3": "c", "n4": "a", "n5": "b"}
		v := loadView([]string{"n1", "n2", "n3", "n4", "n5"}, zones, gs)
		rebalanceAll(t, gs, zones, v, 3)
		if c := v[2]; c.Load != 6 {
			t.Fatalf("n3 holds %d replicas, want all 6", c.Load)
		}
	})
}

// A move keeps the preferred leader of the group where another group can move instead.
func TestRebalancePrefersNotToMovePreferredLeader(t *testing.T) {
	gs := []Group{{1, []string{"n1", "n2"}}, {2, []string{"n2", "n1"}}, {3, []string{"n1", "n2"}}}
	v := loadView([]string{"n1", "n2", "n3"}, nil, gs)
	g, drop, add, ok := Rebalance(gs, nil, v, 2)
	if !ok || add != "n3" || gs[g].Replicas[0] == drop {
		t.Fatalf("move of group %d: %s -> %s (%v), want one not of its preferred leader", gs[g].ID, drop, add, ok)
	}
}

// Over many random clusters (groups placed on some nodes, then more nodes joining, in
// one zone or several), repeated moves end, never lower a group's zones, never touch an
// under-replicated group, and, where the nodes are all of one zone, end Balanced.
func TestRebalanceProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(36))
	for it := 0; it < 2000; it++ {
		nOld, nNew := 1+rng.Intn(5), rng.Intn(5)
		nz := 1 + rng.Intn(3)
		zones := map[string]string{}
		var ids []string
		for i := 0; i < nOld+nNew; i++ {
			id := fmt.Sprintf("n%d", i)
			ids = append(ids, id)
			zones[id] = fmt.Sprintf("z%d", rng.Intn(nz))
		}
		want := 1 + rng.Intn(3)
		old := View{}
		for _, id := range ids[:nOld] {
			old = append(old, &Node{ID: id, Zone: zones[id]})
		}
		var groups []Group
		for i, reps := range Place(old, 1+rng.Intn(20), want) {
			if rng.Intn(10) == 0 && len(reps) > 1 {
				reps = reps[:len(reps)-1] // under-replicated
			}
			groups = append(groups, Group{ID: uint32(i + 1), Replicas: reps})
		}
		short := map[uint32][]string{}
		for _, g := range groups {
			if len(g.Replicas) < min(want, nOld) {
				short[g.ID] = slices.Clone(g.Replicas)
			}
		}
		v := loadView(ids, zones, groups)
		rebalanceAll(t, groups, zones, v, min(want, nOld))
		for _, g := range groups {
			if s, ok := short[g.ID]; ok && !slices.Equal(s, g.Replicas) {
				t.Fatalf("iteration %d: under-replicated group %d moved: %v -> %v", it, g.ID, s, g.Replicas)
			}
		}
		if nz == 1 && len(short) == 0 && !Balanced(v) {
			t.Fatalf("iteration %d: one zone, %d+%d nodes, want %d: not balanced: %v", it, nOld, nNew, want, loads(v))
		}
	}
}
