package explorer

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// problemsOf runs the overview's problems (assets/problems.js) with Node.js over a
// cluster status, partitions and unanswering nodes given as JSON, and returns the lines
// it lists as "kind: text". The test is skipped where Node.js is not installed.
func problemsOf(t *testing.T, input any) []string {
	t.Helper()
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not installed")
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	const script = `
const P = require('./assets/problems.js');
const x = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const stats = { nodes: new Map((x.down || []).map((n) => [n, { node: n, error: 'connection refused' }])), ents: new Map() };
for (const p of P.problems(x.status, x.parts, stats)) console.log(p.kind + ': ' + p.text);
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

type replicaJS struct {
	Node        string `json:"node"`
	Voter       bool   `json:"voter"`
	Lag         int    `json:"lag"`
	Unreachable bool   `json:"unreachable"`
}

type partJS struct {
	Entity   string      `json:"entity"`
	Index    int         `json:"index"`
	GroupID  int         `json:"groupId"`
	Leader   string      `json:"leader"`
	Replicas []replicaJS `json:"replicas"`
}

// One dead node holding a replica of 18 partition groups is listed as a few lines, each
// naming the node and the number of groups, not a line per group and harm (it was 37
// lines); a removed node that still runs is listed as such.
func TestProblemsGroupedByCause(t *testing.T) {
	var parts []partJS
	for i := 0; i < 18; i++ {
		parts = append(parts, partJS{Entity: "orders", Index: i, GroupID: i + 1, Leader: []string{"n1", "n2"}[i%2],
			Replicas: []replicaJS{{Node: "n1", Voter: true}, {Node: "n2", Voter: true}, {Node: "n3", Voter: true, Unreachable: true}}})
	}
	got := problemsOf(t, map[string]any{
		"status": map[string]any{"members": []map[string]string{{"id": "n1", "state": "alive"}, {"id": "n2", "state": "alive"},
			{"id": "n3", "state": "dead"}, {"id": "n4", "state": "removed"}}},
		"parts": parts,
		"down":  []string{"n3"},
	})
	want := []string{
		"dead-node: Node n3 is dead",
		"dead-node: Node n4 was removed from the cluster but still runs: stop it",
		"unreachable-replica: Replicas on n3 are unreachable in 18 partition groups (orders 0, orders 1, orders 2 and 15 more)",
		"under-replicated: 18 partition groups are under-replicated, a replica on n3 unreachable (orders 0, orders 1, orders 2 and 15 more)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Partition leadership far from an even spread over the live nodes that hold replicas
// is a problem (a node removed and added back once led none of 18 groups for good, and
// the explorer said "Problems: None"); within 20 % of an even share it is not.
func TestProblemsShowLeadershipSkew(t *testing.T) {
	member := func(id, state string, replicas, leading int) map[string]any {
		return map[string]any{"id": id, "state": state, "replicas": replicas, "leading": leading}
	}
	skewed := problemsOf(t, map[string]any{"status": map[string]any{"members": []map[string]any{
		member("n1", "alive", 18, 12), member("n2", "alive", 18, 6), member("n3", "alive", 18, 0)}}})
	want := "leader-skew: Partition leadership is uneven: n1 leads 12, n2 leads 6, n3 leads 0 of 18 groups (even share 6.0)"
	if strings.Join(skewed, "\n") != want {
		t.Errorf("problems with n3 leading none of 18 groups: %q, want %q", skewed, want)
	}
	for _, members := range [][]map[string]any{
		{member("n1", "alive", 18, 7), member("n2", "alive", 18, 6), member("n3", "alive", 18, 5)},
		// A node that is down, draining or holds no replica does not count.
		{member("n1", "alive", 18, 9), member("n2", "alive", 18, 9), member("n3", "dead", 18, 0)},
		{member("n1", "alive", 18, 9), member("n2", "alive", 18, 9), member("n3", "draining", 18, 0)},
		{member("n1", "alive", 18, 9), member("n2", "alive", 18, 9), member("n4", "alive", 0, 0)},
	} {
		got := problemsOf(t, map[string]any{"status": map[string]any{"members": members}})
		for _, p := range got {
			if strings.HasPrefix(p, "leader-skew") {
				t.Errorf("members %v: %q, want no leader-skew", members, got)
			}
		}
	}
}
