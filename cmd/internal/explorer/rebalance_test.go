package explorer

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/cluster/admin"
)

// rebalanceOf runs the cluster view's summary of GET /$cluster/rebalance
// (assets/problems.js, Problems.rebalance) with Node.js over rb, as the admin API
// encodes it, and returns its lines: the state and sentence, the uneven nodes, then
// one line per move. Skipped where Node.js is not installed.
func rebalanceOf(t *testing.T, rb *admin.RebalanceStatus) []string {
	t.Helper()
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not installed")
	}
	in, err := json.Marshal(rb)
	if err != nil {
		t.Fatal(err)
	}
	const script = `
const P = require('./assets/problems.js');
const r = P.rebalance(JSON.parse(require('fs').readFileSync(0, 'utf8')));
if (r === null) { console.log('null'); process.exit(0); }
console.log(r.state + ': ' + r.text);
for (const u of r.uneven) console.log('uneven: ' + u);
for (const m of r.moves) console.log('move: ' + m.text);
`
	cmd := exec.Command(nodeJS, "-e", script)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node: %v\n%s", err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// The cluster view's rebalancing panel, from what GET /$cluster/rebalance answers: two
// new nodes after a scale-out, moves under way, each group's moving replicas named;
// then balanced; moves turned off while uneven; a node that does not answer the
// endpoint (an earlier release) shows no panel.
func TestClusterViewShowsRebalancing(t *testing.T) {
	scaling := &admin.RebalanceStatus{NodeID: "n1", MaxMoves: 2, EvenReplicas: 3.6, EvenLeading: 1.2,
		Moves: []admin.RebalanceMove{
			{Entity: "orders", Index: 0, GroupID: 7, CatchingUp: []string{"n4"}, Leaving: []string{"n1"}},
			{Entity: "payments", Index: 3, GroupID: 12, Joining: []string{"n5"}},
		},
		Nodes: []admin.RebalanceNode{
			{ID: "n1", State: "up", Replicas: 6, Leading: 2, ReplicasEven: false, LeadingEven: true},
			{ID: "n2", State: "up", Replicas: 4, Leading: 1, ReplicasEven: true, LeadingEven: true},
			{ID: "n4", State: "up", Replicas: 1, Leading: 0, ReplicasEven: false, LeadingEven: false},
			{ID: "n5", State: "draining", Replicas: 0},
		}}
	got := rebalanceOf(t, scaling)
	want := []string{
		"moving: Moving replicas of 2 partition groups (at most 2 at once); an even share is 3.6 replicas and 1.2 leaderships per node. Draining: n5.",
		"uneven: n1 holds 6 replicas, leads 2",
		"uneven: n4 holds 1 replicas, leads 0",
		"move: orders#0 (group 7): n4 catching up, n1 leaving",
		"move: payments#3 (group 12): n5 joining",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("scaling out:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	done := &admin.RebalanceStatus{MaxMoves: 2, EvenReplicas: 3, EvenLeading: 1, Balanced: true, Done: true,
		Nodes: []admin.RebalanceNode{{ID: "n1", State: "up", Replicas: 3, Leading: 1, ReplicasEven: true, LeadingEven: true}}}
	if got := rebalanceOf(t, done); len(got) != 1 || !strings.HasPrefix(got[0], "balanced: Balanced: every node") {
		t.Errorf("balanced: %q", got)
	}
	off := &admin.RebalanceStatus{MaxMoves: 0, EvenReplicas: 3, EvenLeading: 1,
		Nodes: []admin.RebalanceNode{{ID: "n3", State: "up", Replicas: 0, Leading: 0}}}
	if got := rebalanceOf(t, off); len(got) != 2 || !strings.HasPrefix(got[0], "off: Not balanced, and automatic moves are off (--rebalance-moves 0)") {
		t.Errorf("moves off: %q", got)
	}
	if got := rebalanceOf(t, nil); len(got) != 1 || got[0] != "null" {
		t.Errorf("no endpoint: %q", got)
	}
}
