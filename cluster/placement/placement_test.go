package placement

import (
	"fmt"
	"slices"
	"testing"
)

// view builds a View from "id zone [draining]" specs.
func view(spec ...string) View {
	var out View
	for _, s := range spec {
		c := &Node{}
		var flags string
		fmt.Sscanf(s, "%s %s %s", &c.ID, &c.Zone, &flags) //nolint:errcheck // flags is optional
		c.Draining = flags == "draining"
		out = append(out, c)
	}
	return out
}

// The replication factor is reached whenever enough nodes are alive: a draining node
// hosts a replica when the other live nodes are too few (with n3 draining and
// n1 dead a new queue had one replica; with n3 draining, two), but never leads, and is
// not chosen while another node can host the replica.
func TestPlaceReachesReplicasWithDrainingNodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodes    []string
		replicas int
		want     []string // sorted replicas of the one group
		notFirst string   // must not be the preferred leader
	}{
		{"one draining of three", []string{"n1 a", "n2 b", "n3 c draining"}, 3, []string{"n1", "n2", "n3"}, "n3"},
		{"drain and a dead node", []string{"n2 b", "n3 c draining"}, 3, []string{"n2", "n3"}, "n3"},
		{"every node draining", []string{"n1 a draining", "n2 b draining", "n3 c draining"}, 3, []string{"n1", "n2", "n3"}, ""},
		{"draining only when needed", []string{"n1 a", "n2 b", "n3 c draining", "n4 a"}, 3, []string{"n1", "n2", "n4"}, ""},
		{"one node", []string{"n1 a"}, 3, []string{"n1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Place(view(tc.nodes...), 1, tc.replicas)
			if len(got) != 1 {
				t.Fatalf("%d groups, want 1", len(got))
			}
			if tc.notFirst != "" && got[0][0] == tc.notFirst {
				t.Errorf("preferred leader %s is draining: %v", got[0][0], got[0])
			}
			s := slices.Clone(got[0])
			slices.Sort(s)
			if !slices.Equal(s, tc.want) {
				t.Errorf("replicas %v, want %v", got[0], tc.want)
			}
		})
	}
}

// Many groups over more nodes than replicas: each group has distinct nodes in distinct
// zones, the load is even, and the preferred leaders rotate.
func TestPlaceSpreads(t *testing.T) {
	cs := view("n1 a", "n2 b", "n3 c", "n4 a", "n5 b", "n6 c")
	got := Place(cs, 16, 3)
	load, leads := map[string]int{}, map[string]int{}
	for _, g := range got {
		zones := map[byte]bool{}
		for _, id := range g {
			load[id]++
		}
		for _, c := range cs {
			if slices.Contains(g, c.ID) {
				zones[c.Zone[0]] = true
			}
		}
		if len(g) != 3 || len(zones) != 3 {
			t.Errorf("group %v: want 3 nodes in 3 zones", g)
		}
		leads[g[0]]++
	}
	for id, l := range load {
		if l < 7 || l > 9 { // 48 replicas over 6 nodes
			t.Errorf("load %v uneven (%s: %d)", load, id, l)
		}
	}
	for id, l := range leads {
		if l < 2 || l > 3 { // 16 leaders over 6 nodes
			t.Errorf("leaders %v uneven (%s: %d)", leads, id, l)
		}
	}
}

// Add raises a group to the replication factor with the live nodes it lacks: not
// draining first, a draining one when nothing else can, nothing when it has them.
func TestAdd(t *testing.T) {
	zones := map[string]string{"n1": "a", "n2": "b", "n3": "c", "n4": "a"}
	for _, tc := range []struct {
		name     string
		have     []string
		nodes    []string
		replicas int
		want     []string
	}{
		{"a node returns", []string{"n2", "n3"}, []string{"n1 a", "n2 b", "n3 c draining"}, 3, []string{"n1"}},
		{"only a draining node", []string{"n1", "n2"}, []string{"n1 a", "n2 b", "n3 c draining"}, 3, []string{"n3"}},
		{"not draining first", []string{"n2"}, []string{"n1 a", "n2 b", "n3 c draining", "n4 a"}, 3, []string{"n1", "n4"}},
		{"one to three", []string{"n2"}, []string{"n1 a", "n2 b", "n3 c"}, 3, []string{"n1", "n3"}},
		{"full", []string{"n1", "n2", "n3"}, []string{"n1 a", "n2 b", "n3 c", "n4 a"}, 3, nil},
		{"no other node alive", []string{"n2"}, []string{"n2 b"}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Add(tc.have, zones, view(tc.nodes...), tc.replicas)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("added %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWant(t *testing.T) {
	for _, tc := range []struct{ replicas, registered, want int }{
		{3, 3, 3}, {3, 1, 1}, {3, 5, 3}, {5, 4, 4}, {3, 0, 1},
	} {
		if got := Want(tc.replicas, tc.registered); got != tc.want {
			t.Errorf("Want(%d, %d) = %d, want %d", tc.replicas, tc.registered, got, tc.want)
		}
	}
}

// The next metadata voter comes from a zone with the fewest voters; within a zone the
// candidates keep their order.
func TestSpreadVoters(t *testing.T) {
	zoneOf := map[string]string{"v1": "a", "v2": "a", "v3": "b", "x1": "a", "y1": "b", "z1": "c", "z2": "c"}
	got := SpreadVoters([]string{"x1", "y1", "z2", "z1"}, []string{"v1", "v2", "v3"}, zoneOf)
	if want := []string{"z2", "z1", "y1", "x1"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// Spread moves one replica of a group out of a zone holding two of them into a live
// zone the group lacks: not onto a draining node, not while a replica is down, not out
// of the only replica of a zone, and the preferred leader last.
func TestSpread(t *testing.T) {
	zones := map[string]string{"n1": "a", "n2": "a", "n3": "a", "n4": "b", "n5": "c", "n6": "c", "x1": "", "x2": "", "n7": "d"}
	for _, tc := range []struct {
		name      string
		have      []string
		nodes     []string
		drop, add string // "" when no move
	}{
		{"zone b joined late", []string{"n1", "n2", "n3"}, []string{"n1 a", "n2 a", "n3 a", "n4 b"}, "n3", "n4"},
		{"leader moved last", []string{"n1", "n4", "n2"}, []string{"n1 a", "n2 a", "n4 b", "n5 c"}, "n2", "n5"},
		{"the fuller zone first", []string{"n4", "n1", "n2", "n3", "n5"}, []string{"n1 a", "n2 a", "n3 a", "n4 b", "n5 c", "x1 -", "n6 c", "n7 d"}, "n3", "n7"},
		{"spread already", []string{"n1", "n4", "n5"}, []string{"n1 a", "n2 a", "n4 b", "n5 c", "n6 c"}, "", ""},
		{"only a draining node in the missing zone", []string{"n1", "n2", "n4"}, []string{"n1 a", "n2 a", "n4 b", "n5 c draining"}, "", ""},
		{"a replica is down", []string{"n1", "n2", "n4"}, []string{"n1 a", "n4 b", "n5 c"}, "", ""},
		{"no zones", []string{"x1", "x2"}, []string{"x1 -", "x2 -", "n4 b"}, "", ""},
		{"least loaded target", []string{"n1", "n2", "n4"}, []string{"n1 a", "n2 a", "n4 b", "n5 c load", "n6 c"}, "n2", "n6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := view(tc.nodes...)
			for _, c := range v {
				if c.Zone == "-" {
					c.Zone = ""
				}
			}
			// "load" in the flags column marks a node with one replica placed.
			for i, s := range tc.nodes {
				var id, z, flags string
				fmt.Sscanf(s, "%s %s %s", &id, &z, &flags) //nolint:errcheck // flags is optional
				if flags == "load" {
					v[i].Load = 1
				}
			}
			drop, add, ok := Spread(tc.have, zones, v)
			if ok != (tc.drop != "") {
				t.Fatalf("Spread = %q, %q, %v; want a move %v", drop, add, ok, tc.drop != "")
			}
			if tc.drop == "" {
				return
			}
			if drop != tc.drop || (tc.add != "" && add != tc.add) {
				t.Errorf("Spread moves %s to %s, want %s to %s", drop, add, tc.drop, tc.add)
			}
		})
	}
}

// SwapVoters moves a metadata voter out of a zone holding two more voters than a
// non-voter's zone, never the leader's, and nothing when the zones are within one.
func TestSwapVoters(t *testing.T) {
	zoneOf := map[string]string{"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c", "x": ""}
	for _, tc := range []struct {
		name            string
		voters, cands   []string
		leader          string
		promote, demote string // "" when no swap
	}{
		{"three in one zone", []string{"a1", "a2", "a3", "b1", "c1"}, []string{"b2", "c2"}, "a1", "b2", "a3"},
		{"not the leader", []string{"a1", "a2", "a3", "b1", "c1"}, []string{"c2"}, "a3", "c2", "a2"},
		{"the emptiest zone first", []string{"a1", "a2", "a3", "b1"}, []string{"b2", "c1"}, "b1", "c1", "a3"},
		{"within one", []string{"a1", "a2", "b1", "b2", "c1"}, []string{"c2", "a3"}, "a1", "", ""},
		{"no candidate", []string{"a1", "a2", "a3"}, nil, "a1", "", ""},
		{"no zones", []string{"x", "a1", "a2"}, []string{"x"}, "a1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d, ok := SwapVoters(tc.voters, tc.cands, tc.leader, zoneOf)
			if ok != (tc.promote != "") || p != tc.promote || d != tc.demote {
				t.Errorf("SwapVoters = %q, %q, %v; want %q, %q", p, d, ok, tc.promote, tc.demote)
			}
		})
	}
}
