package placement

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// randomView is a View of 1 to 9 nodes over 1 to 4 zones, some draining (when
// draining), every node with no replica yet. equalZones puts the same number of nodes in
// every zone.
func randomView(rng *rand.Rand, draining bool) (v View, equalZones bool) {
	n, nz := 1+rng.Intn(9), 1+rng.Intn(4)
	equalZones = rng.Intn(2) == 0 && n%nz == 0
	for i := 0; i < n; i++ {
		z := rng.Intn(nz)
		if equalZones {
			z = i % nz
		}
		v = append(v, &Node{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", z), Draining: draining && rng.Intn(3) == 0})
	}
	return v, equalZones
}

// zonesOf is the set of zones of the nodes of v that Draining is draining or not.
func zonesOf(v View, draining bool) map[string]bool {
	zs := map[string]bool{}
	for _, c := range v {
		if c.Draining == draining {
			zs[c.Zone] = true
		}
	}
	return zs
}

// bestZones is, naively, the most distinct zones k replicas can span when every node
// that is not draining must be taken before a draining one.
func bestZones(v View, k int) int {
	up := zonesOf(v, false)
	nd := 0
	for _, c := range v {
		if !c.Draining {
			nd++
		}
	}
	if k <= nd {
		return min(k, len(up))
	}
	extra := 0
	for z := range zonesOf(v, true) {
		if !up[z] {
			extra++
		}
	}
	return len(up) + min(k-nd, extra)
}

// Over many random views, Place always gives each group min(replicas, nodes) distinct
// nodes of the view, takes a draining node only when the others are too few, spans as
// many zones as that allows, never makes a draining node preferred leader while the
// group has another, and, with no node draining and zones of equal size, spreads
// replicas and preferred leaders within one of each other.
func TestPlaceProperties(t *testing.T) {
	for seed := int64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		v, equalZones := randomView(rng, seed%2 == 1)
		partitions, replicas := rng.Intn(20), rng.Intn(6)
		byID := map[string]*Node{}
		nd := 0
		for _, c := range v {
			byID[c.ID] = c
			if !c.Draining {
				nd++
			}
		}
		fresh := make(View, len(v))
		for i, c := range v {
			cp := *c
			fresh[i] = &cp
		}
		groups := Place(v, partitions, replicas)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, %d partitions, %d replicas over %v: %s", seed, partitions, replicas, dump(fresh), fmt.Sprintf(format, args...))
		}
		if len(groups) != max(partitions, 1) {
			fail("%d groups", len(groups))
		}
		k := min(max(replicas, 1), len(v))
		for _, g := range groups {
			if len(g) != k {
				fail("group %v has %d replicas, want %d", g, len(g), k)
			}
			draining, zones := 0, map[string]bool{}
			for i, id := range g {
				c := byID[id]
				if c == nil || slices.Contains(g[:i], id) {
					fail("group %v: unknown or repeated node %q", g, id)
				}
				if c.Draining {
					draining++
				}
				zones[c.Zone] = true
			}
			if want := max(0, k-nd); draining != want {
				fail("group %v has %d draining nodes, want %d", g, draining, want)
			}
			if want := bestZones(fresh, k); len(zones) != want {
				fail("group %v spans %d zones, %d possible", g, len(zones), want)
			}
			if nd > 0 && byID[g[0]].Draining {
				fail("group %v: draining preferred leader", g)
			}
		}
		load, leads := map[string]int{}, map[string]int{}
		for _, g := range groups {
			leads[g[0]]++
			for _, id := range g {
				load[id]++
			}
		}
		for _, c := range v {
			if c.Load != load[c.ID] || c.Leads != leads[c.ID] {
				fail("node %s counts load %d leads %d, placed %d leading %d", c.ID, c.Load, c.Leads, load[c.ID], leads[c.ID])
			}
		}
		if nd == len(v) && equalZones {
			if lo, hi := spread(v, func(c *Node) int { return c.Load }); hi-lo > 1 {
				fail("load from %d to %d", lo, hi)
			}
			if lo, hi := spread(v, func(c *Node) int { return c.Leads }); hi-lo > 1 {
				fail("preferred leaders from %d to %d per node", lo, hi)
			}
		}
	}
}

// Add, over random views and random groups, adds exactly as many distinct nodes the
// group lacks as the view allows, takes a draining node only when no other is free,
// and adds the zones the group lacks first.
func TestAddProperties(t *testing.T) {
	for seed := int64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		v, _ := randomView(rng, true)
		zones := map[string]string{}
		var have []string
		for _, c := range v {
			zones[c.ID] = c.Zone
			if rng.Intn(3) == 0 {
				have = append(have, c.ID)
			}
		}
		replicas := 1 + rng.Intn(5)
		var free View
		freeUp := 0
		for _, c := range v {
			if !slices.Contains(have, c.ID) {
				free = append(free, c)
				if !c.Draining {
					freeUp++
				}
			}
		}
		haveZones := map[string]bool{}
		for _, id := range have {
			haveZones[zones[id]] = true
		}
		newZones := map[string]bool{}
		for _, c := range free {
			if !c.Draining && !haveZones[c.Zone] {
				newZones[c.Zone] = true
			}
		}
		added := Add(have, zones, v, replicas)
		want := max(0, min(replicas-len(have), len(free)))
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: have %v, %d replicas, view %v: added %v: %s", seed, have, replicas, dump(v), added, fmt.Sprintf(format, args...))
		}
		if len(added) != want {
			fail("want %d nodes", want)
		}
		draining, gained := 0, map[string]bool{}
		for i, id := range added {
			if slices.Contains(have, id) || slices.Contains(added[:i], id) || zones[id] == "" {
				fail("node %q repeated or unknown", id)
			}
			for _, c := range v {
				if c.ID == id && c.Draining {
					draining++
				}
			}
			if !haveZones[zones[id]] {
				gained[zones[id]] = true
			}
		}
		if draining != max(0, want-freeUp) {
			fail("%d draining nodes added, want %d", draining, max(0, want-freeUp))
		}
		if len(gained) < min(len(newZones), want) {
			fail("gained zones %v, %d possible", gained, min(len(newZones), want))
		}
	}
}

func spread(v View, f func(*Node) int) (lo, hi int) {
	lo = f(v[0])
	for _, c := range v {
		lo, hi = min(lo, f(c)), max(hi, f(c))
	}
	return lo, hi
}

func dump(v View) string {
	var s []string
	for _, c := range v {
		d := ""
		if c.Draining {
			d = "!"
		}
		s = append(s, c.ID+"/"+c.Zone+d)
	}
	return fmt.Sprint(s)
}

// Over many random views and groups, moving replicas by Spread until it has no move
// left keeps the group's size and distinct nodes, never adds a draining node, makes
// every move gain a zone, and ends with the group in as many distinct zones as the
// nodes that are not draining allow (the zones the group holds plus the others').
func TestSpreadProperties(t *testing.T) {
	for seed := int64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		v, _ := randomView(rng, true)
		zones := map[string]string{}
		var have []string
		for _, c := range v {
			zones[c.ID] = c.Zone
			if len(have) < 5 && rng.Intn(2) == 0 {
				have = append(have, c.ID)
			}
		}
		if len(have) == 0 {
			continue
		}
		start := slices.Clone(have)
		distinct := func() int {
			zs := map[string]bool{}
			for _, id := range have {
				zs[zones[id]] = true
			}
			return len(zs)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: from %v, view %v, now %v: %s", seed, start, dump(v), have, fmt.Sprintf(format, args...))
		}
		for moves := 0; ; moves++ {
			if moves > len(v) {
				fail("no end after %d moves", moves)
			}
			before := distinct()
			drop, add, ok := Spread(have, zones, v)
			if !ok {
				break
			}
			i := slices.Index(have, drop)
			if i < 0 || slices.Contains(have, add) {
				fail("move %s -> %s", drop, add)
			}
			for _, c := range v {
				if c.ID == add && c.Draining {
					fail("added draining %s", add)
				}
			}
			have = append(slices.Delete(have, i, i+1), add)
			if distinct() != before+1 {
				fail("move %s -> %s gained no zone", drop, add)
			}
		}
		if len(have) != len(start) {
			fail("size %d, want %d", len(have), len(start))
		}
		possible := map[string]bool{}
		for _, id := range have {
			possible[zones[id]] = true
		}
		for z := range zonesOf(v, false) {
			possible[z] = true
		}
		if want := min(len(have), len(possible)); distinct() != want {
			fail("%d distinct zones at the end, want %d", distinct(), want)
		}
	}
}
