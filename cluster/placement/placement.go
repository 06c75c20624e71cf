package placement

import (
	"slices"
	"sort"
)

// Node is a live node a replica may be placed on.
type Node struct {
	ID, Zone string
	Draining bool // marked draining: used only when not enough other nodes are alive
	Load     int  // partition replicas placed on it
	Leads    int  // partition groups whose preferred leader (first replica) it is
}

// View is the live nodes placement chooses from. Place and Add count the replicas they
// choose into the nodes' Load and Leads, so that one View serves several choices in a
// row (the groups of one entity, or every group raised in one pass).
type View []*Node

// Place chooses the replicas of each of partitions new groups (at least one):
// min(replicas, len(view)) distinct nodes per group, the first of each its preferred
// leader (see the package doc for the rules).
func Place(view View, partitions, replicas int) [][]string {
	partitions = max(partitions, 1)
	k := min(max(replicas, 1), len(view))
	out := make([][]string, partitions)
	for i := range out {
		pick := pick(nil, view, k)
		// Preferred leader: not draining, leading the fewest groups.
		sort.SliceStable(pick, func(a, b int) bool {
			if pick[a].Draining != pick[b].Draining {
				return !pick[a].Draining
			}
			return pick[a].Leads < pick[b].Leads
		})
		ids := make([]string, len(pick))
		for j, c := range pick {
			ids[j] = c.ID
			c.Load++
		}
		if len(pick) > 0 {
			pick[0].Leads++
		}
		out[i] = ids
	}
	return out
}

// Add chooses the nodes to add to a group whose replicas are have (zones: the zone of
// each of them, "" when unknown) so that it has replicas, by the rules Place follows;
// nil when it has them already or no other node of view is alive.
func Add(have []string, zones map[string]string, view View, replicas int) []string {
	var free View
	for _, c := range view {
		if !contains(have, c.ID) {
			free = append(free, c)
		}
	}
	k := min(replicas-len(have), len(free))
	if k <= 0 {
		return nil
	}
	used := map[string]bool{}
	for _, id := range have {
		used[zones[id]] = true
	}
	pick := pick(used, free, k)
	ids := make([]string, len(pick))
	for j, c := range pick {
		ids[j] = c.ID
		c.Load++
	}
	return ids
}

// Want is how many replicas each group should have: replicas (--replicas), capped by
// the registered nodes, and at least one.
func Want(replicas, registered int) int {
	return max(min(replicas, registered), 1)
}

// pick picks k of view (k <= len(view)): nodes not draining before draining ones, and
// within each, distinct zones first, then the least loaded (then by ID). used names
// zones that already hold a replica. It sorts view.
func pick(used map[string]bool, view View, k int) View {
	sort.SliceStable(view, func(a, b int) bool {
		if view[a].Load != view[b].Load {
			return view[a].Load < view[b].Load
		}
		return view[a].ID < view[b].ID
	})
	zones := map[string]bool{}
	for z := range used {
		zones[z] = true
	}
	var out View
	for _, draining := range []bool{false, true} {
		for _, c := range view { // distinct zones first
			if len(out) < k && c.Draining == draining && !zones[c.Zone] {
				out, zones[c.Zone] = append(out, c), true
			}
		}
		for _, c := range view {
			if len(out) < k && c.Draining == draining && !contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// SpreadVoters orders cands (node IDs) so that those in the zones holding the fewest of
// voters come first, keeping the order of cands within a zone: the metadata group
// promotes its next voter in a zone it lacks. zoneOf gives each node's zone.
func SpreadVoters(cands, voters []string, zoneOf map[string]string) []string {
	count := map[string]int{}
	for _, v := range voters {
		count[zoneOf[v]]++
	}
	sort.SliceStable(cands, func(i, j int) bool { return count[zoneOf[cands[i]]] < count[zoneOf[cands[j]]] })
	return cands
}

// Spread chooses one move that puts the replicas of a group (have, zones: the zone of
// each, "" when unknown) in one more distinct zone: drop is a replica in a zone that
// holds two or more of them, add a live node of view, not draining, in a zone that
// holds none. It reports ok false when there is no such move, or when a replica of the
// group is not in view (a node down: re-placing it is replaceDead's business, and a
// group that is already short of a live replica is not moved). Nodes with no zone ("")
// are no failure domain: such a replica is never dropped, such a node never added.
//
// drop is taken from the zone holding the most replicas, the preferred leader (have[0])
// last, then the most loaded node (then the last in have); add is the least loaded node
// (then by ID). Each move raises the number of distinct zones, so repeated moves end.
// The caller replaces drop by add in the placement: the group's leader then adds add as
// a non-voter, promotes it once caught up, and only then removes drop.
func Spread(have []string, zones map[string]string, view View) (drop, add string, ok bool) {
	live := map[string]*Node{}
	for _, c := range view {
		live[c.ID] = c
	}
	count := map[string]int{}
	for _, id := range have {
		if live[id] == nil {
			return "", "", false
		}
		count[zones[id]]++
	}
	var to *Node
	for _, c := range view {
		if c.Zone == "" || c.Draining || count[c.Zone] > 0 || contains(have, c.ID) {
			continue
		}
		if to == nil || c.Load < to.Load || (c.Load == to.Load && c.ID < to.ID) {
			to = c
		}
	}
	if to == nil {
		return "", "", false
	}
	from := -1
	better := func(i, j int) bool { // is have[i] a better replica to drop than have[j]?
		zi, zj := zones[have[i]], zones[have[j]]
		if count[zi] != count[zj] {
			return count[zi] > count[zj]
		}
		if (i == 0) != (j == 0) {
			return j == 0
		}
		if li, lj := live[have[i]].Load, live[have[j]].Load; li != lj {
			return li > lj
		}
		return i > j
	}
	for i, id := range have {
		if z := zones[id]; z == "" || count[z] < 2 {
			continue
		}
		if from < 0 || better(i, from) {
			from = i
		}
	}
	if from < 0 {
		return "", "", false
	}
	to.Load++
	live[have[from]].Load--
	return have[from], to.ID, true
}

// SwapVoters chooses, for a metadata group whose voters (all alive) are as many as it
// should have, a non-voter to promote and a voter to demote so that the voters spread
// over zones: promote is a candidate (cands, in order of preference) in a zone holding
// at least two voters fewer than the zone holding the most, among the zones with the
// fewest; demote a voter of that fullest zone other than leader (the last of them in
// voters). ok is false when no zone holds two voters more than a candidate's. Nodes
// with no zone ("") are no failure domain: never promoted, never demoted for a zone.
// Each swap lowers the imbalance, so repeated swaps end.
func SwapVoters(voters, cands []string, leader string, zoneOf map[string]string) (promote, demote string, ok bool) {
	count := map[string]int{}
	for _, v := range voters {
		if z := zoneOf[v]; z != "" {
			count[z]++
		}
	}
	full := ""
	for _, v := range voters { // the fullest zone, the first in voters among equals
		if z := zoneOf[v]; z != "" && (full == "" || count[z] > count[full]) {
			full = z
		}
	}
	if full == "" {
		return "", "", false
	}
	for _, c := range cands {
		z := zoneOf[c]
		if z == "" || contains(voters, c) || count[z]+2 > count[full] {
			continue
		}
		if promote == "" || count[z] < count[zoneOf[promote]] {
			promote = c
		}
	}
	if promote == "" {
		return "", "", false
	}
	for _, v := range voters {
		if zoneOf[v] == full && v != leader {
			demote = v
		}
	}
	return promote, demote, demote != ""
}

// Group is one partition group as Rebalance sees it: its ID and replicas (the first
// the preferred leader).
type Group struct {
	ID       uint32
	Replicas []string
}

// Balanced reports whether every node of view that is not draining holds a share of
// the replicas within slack of even, Slack(even): the replicas on those nodes (their
// Load) over their number. A view with fewer than two such nodes is balanced.
func Balanced(view View) bool {
	up, total := 0, 0
	for _, c := range view {
		if !c.Draining {
			up++
			total += c.Load
		}
	}
	if up < 2 {
		return true
	}
	even := float64(total) / float64(up)
	slack := Slack(even)
	for _, c := range view {
		if !c.Draining && (float64(c.Load) > even+slack || float64(c.Load) < even-slack) {
			return false
		}
	}
	return true
}

// Slack is how far from an even share (of replicas or of leaderships) a node may be
// and still count as balanced: 20 % of it, at least one.
func Slack(even float64) float64 { return max(1, 0.2*even) }

// Rebalance chooses one replica move toward an even spread of replicas over the nodes
// of view (their Load, which the caller counts over every placed group): while the view
// is not Balanced, a replica of group groups[g] on the most loaded node (drop) is
// replaced by the least loaded node outside the group (add), their loads differing by
// at least two, so each move lowers the sum of the squared loads and repeated moves
// end. It reports ok false when the view is Balanced or no group can move.
//
// Only a group whose replicas (at least want of them) are all in view is moved: an
// under-replicated group, or one with a replica down, is not. A move never lowers the
// number of distinct zones of a group (nodes with no zone, "", count as one). While a
// node of view is draining nothing moves (the node's replicas leave when it is removed,
// and until then it is no target). Among the groups that can move, one whose preferred
// leader is not drop is taken first (then the first in groups), so a move disturbs no
// leadership where it can. Rebalance counts the move into the nodes' Load, so one View
// serves several moves in a row (the caller drops g from groups).
func Rebalance(groups []Group, zones map[string]string, view View, want int) (g int, drop, add string, ok bool) {
	live := map[string]*Node{}
	for _, c := range view {
		if c.Draining {
			return -1, "", "", false
		}
		live[c.ID] = c
	}
	if Balanced(view) {
		return -1, "", "", false
	}
	// Pairs (from, to) by load difference, largest first.
	byLoad := slices.Clone(view)
	sort.SliceStable(byLoad, func(a, b int) bool {
		if byLoad[a].Load != byLoad[b].Load {
			return byLoad[a].Load > byLoad[b].Load
		}
		return byLoad[a].ID < byLoad[b].ID
	})
	type pair struct{ from, to *Node }
	var pairs []pair
	for i, f := range byLoad {
		for j := len(byLoad) - 1; j > i; j-- {
			if t := byLoad[j]; f.Load-t.Load >= 2 {
				pairs = append(pairs, pair{f, t})
			}
		}
	}
	sort.SliceStable(pairs, func(a, b int) bool {
		return pairs[a].from.Load-pairs[a].to.Load > pairs[b].from.Load-pairs[b].to.Load
	})
	movable := func(gr Group, from, to string) bool {
		if len(gr.Replicas) < want || contains(gr.Replicas, to) || !contains(gr.Replicas, from) {
			return false
		}
		before, after := map[string]bool{}, map[string]bool{zones[to]: true}
		for _, r := range gr.Replicas {
			if live[r] == nil {
				return false
			}
			before[zones[r]] = true
			if r != from {
				after[zones[r]] = true
			}
		}
		return len(after) >= len(before)
	}
	for _, p := range pairs {
		best := -1
		for i, gr := range groups {
			if !movable(gr, p.from.ID, p.to.ID) {
				continue
			}
			if best < 0 || (groups[best].Replicas[0] == p.from.ID && gr.Replicas[0] != p.from.ID) {
				best = i
			}
		}
		if best >= 0 {
			p.from.Load--
			p.to.Load++
			return best, p.from.ID, p.to.ID, true
		}
	}
	return -1, "", "", false
}
