package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

const testConnStr = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=k3y;UseDevelopmentEmulator=true"

// stateStore is the admin.Store a cluster API test needs: the namespace and its key.
type stateStore struct {
	mu sync.Mutex
	st *meta.State
}

func (s *stateStore) Apply(_ context.Context, c meta.Command) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Apply(&meta.Entry{Cmd: c})
}

func (s *stateStore) Read(_ context.Context, fn func(*meta.State)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.st)
	return nil
}

func (s *stateStore) Runtime(context.Context, admin.Entity) (admin.RuntimeCounts, error) {
	return admin.RuntimeCounts{}, nil
}

// fakeCluster answers like a three-node cluster and records what it was asked.
type fakeCluster struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (f *fakeCluster) call(c string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.fail
}

func (f *fakeCluster) known(id string) error {
	if id == "n1" || id == "n2" || id == "n3" {
		return nil
	}
	return fmt.Errorf("node %q is not a member: %w", id, meta.ErrNotFound)
}

func (f *fakeCluster) ClusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	if err := f.call("status"); err != nil {
		return admin.ClusterStatus{}, err
	}
	if admin.WantDigests(ctx) {
		return admin.ClusterStatus{NodeID: "n2", MetadataLeader: "n1", Members: []admin.Member{
			{ID: "n1", State: "alive", MetadataRole: "leader", MetadataDigest: "d1", MetadataApplied: 17},
			{ID: "n2", State: "alive", MetadataRole: "voter"},
		}}, nil
	}
	return admin.ClusterStatus{NodeID: "n2", MetadataLeader: "n1", Members: []admin.Member{
		{ID: "n1", ClusterAddr: "10.0.0.1:5400", AMQPAddr: "10.0.0.1:5672", AdminAddr: "10.0.0.1:5300", Zone: "a", State: "alive", MetadataRole: "leader", Replicas: 2, Leading: 1},
		{ID: "n2", ClusterAddr: "10.0.0.2:5400", AMQPAddr: "10.0.0.2:5672", Zone: "b", State: "alive", MetadataRole: "voter", Replicas: 2, Leading: 1},
		{ID: "n3", ClusterAddr: "10.0.0.3:5400", State: "dead", MetadataRole: "voter"},
	}}, nil
}

func (f *fakeCluster) Partitions(context.Context) ([]admin.PartitionStatus, error) {
	if err := f.call("partitions"); err != nil {
		return nil, err
	}
	return []admin.PartitionStatus{
		{Entity: "orders", Index: 0, GroupID: 7, Leader: "n1", Replicas: []admin.ReplicaStatus{
			{Node: "n1", Voter: true, LastIndex: 42}, {Node: "n2", Voter: true, LastIndex: 40, Lag: 2}, {Node: "n3", LastIndex: 30, Lag: 12}},
			WantReplicas: 3},
		{Entity: "orders", Index: 1, GroupID: 8, Replicas: []admin.ReplicaStatus{{Node: "n2", Voter: true}},
			WantReplicas: 3, UnderReplicated: true},
	}, nil
}

func (f *fakeCluster) DrainNode(_ context.Context, id string) error {
	if err := f.call("drain " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) UndrainNode(_ context.Context, id string) error {
	if err := f.call("undrain " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) RemoveNode(_ context.Context, id string) error {
	if err := f.call("remove " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) TransferLeader(_ context.Context, g uint32, to string) error {
	if err := f.call(fmt.Sprintf("transfer %d %s", g, to)); err != nil {
		return err
	}
	if g != 7 && g != 8 {
		return fmt.Errorf("partition group %d: %w", g, meta.ErrNotFound)
	}
	if to == "" {
		return nil
	}
	return f.known(to)
}

// clusterNode serves the real admin handler with c as its cluster (nil: no cluster) and
// returns a qbctl runner pointed at it.
func clusterNode(t *testing.T, c admin.Cluster) func(args ...string) (string, error) {
	t.Helper()
	qb := adminNode(t, c)
	return func(args ...string) (string, error) {
		out, _, err := qb(args...)
		return out, err
	}
}

// adminNode is clusterNode's runner that also returns what qbctl wrote to stderr.
func adminNode(t *testing.T, c admin.Cluster) func(args ...string) (stdout, stderr string, err error) {
	t.Helper()
	srv := adminServer(t, c)
	addr := strings.TrimPrefix(srv.URL, "http://")
	return func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"--admin-addr", addr, "--connection-string", testConnStr}, args...), &out, &errOut)
		return out.String(), errOut.String(), err
	}
}

// adminServer serves the real admin handler, with the namespace key of testConnStr and
// c as its cluster (nil: no cluster), until the test ends.
func adminServer(t *testing.T, c admin.Cluster) *httptest.Server {
	t.Helper()
	st := &stateStore{st: meta.New()}
	for _, cmd := range []meta.Command{
		&meta.SetNamespace{Name: "quorumbus"},
		&meta.PutSASKey{Key: meta.SASKey{Name: "RootManageSharedAccessKey", PrimaryKey: "k3y", Rights: meta.RightManage | meta.RightSend | meta.RightListen}},
		&meta.PutSASKey{Key: meta.SASKey{Name: "sender", PrimaryKey: "s3nd", Rights: meta.RightSend}},
	} {
		if err := st.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	cfg := admin.DefaultConfig()
	cfg.Store, cfg.Cluster = st, c
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestClusterStatusTableAndJSON(t *testing.T) {
	qb := clusterNode(t, &fakeCluster{})
	out, err := qb("cluster", "status")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "metadata leader: n1 (as seen by n2)" ||
		strings.Join(strings.Fields(lines[1]), " ") != "ID STATE ZONE METADATA REPLICAS LEADING CLUSTER ADDR AMQP ADDR" {
		t.Fatalf("table:\n%s", out)
	}
	if got := strings.Fields(lines[2]); strings.Join(got, " ") != "n1 alive a leader 2 1 10.0.0.1:5400 10.0.0.1:5672" {
		t.Errorf("row n1: %q", lines[2])
	}
	if got := strings.Fields(lines[4]); strings.Join(got, " ") != "n3 dead - voter 0 0 10.0.0.3:5400 -" {
		t.Errorf("row n3: %q", lines[4])
	}

	for _, args := range [][]string{{"cluster", "status", "-o", "json"}, {"--output", "json", "cluster", "status"}, {"-o", "json", "cluster", "status"}} {
		out, err = qb(args...)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			NodeID         string
			MetadataLeader string
			Members        []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
		}
		if got.NodeID != "n2" || got.MetadataLeader != "n1" || len(got.Members) != 3 {
			t.Fatalf("%v: %s", args, out)
		}
		m := got.Members[0]
		for k, want := range map[string]any{"ID": "n1", "State": "alive", "Zone": "a", "MetadataRole": "leader", "Replicas": 2.0,
			"Leading": 1.0, "ClusterAddr": "10.0.0.1:5400", "AMQPAddr": "10.0.0.1:5672", "AdminAddr": "10.0.0.1:5300"} {
			if m[k] != want {
				t.Errorf("%v: members[0].%s = %v, want %v", args, k, m[k], want)
			}
		}
	}
}

// cluster status --digests shows each member's metadata digest and applied index.
func TestClusterStatusDigests(t *testing.T) {
	qb := clusterNode(t, &fakeCluster{})
	out, err := qb("cluster", "status", "--digests", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Members []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Members) != 2 {
		t.Fatalf("not JSON with two members: %v\n%s", err, out)
	}
	if m := got.Members[0]; m["MetadataDigest"] != "d1" || m["MetadataApplied"] != 17.0 {
		t.Errorf("members[0] = %v, want MetadataDigest d1, MetadataApplied 17", m)
	}
	out, err = qb("cluster", "status", "--digests")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasSuffix(lines[1], "METADATA APPLIED  METADATA DIGEST") ||
		!strings.HasSuffix(strings.TrimSpace(lines[2]), "17                d1") {
		t.Errorf("table:\n%s", out)
	}
}

func TestClusterPartitionsShowsLag(t *testing.T) {
	qb := clusterNode(t, &fakeCluster{})
	out, err := qb("cluster", "partitions")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ENTITY PARTITION GROUP LEADER REPLICAS UNDER REPLICATED" {
		t.Fatalf("table:\n%s", out)
	}
	if !strings.Contains(lines[1], "n1, n2 (lag 2), n3 (nonvoter, lag 12)") || !strings.Contains(lines[1], "orders") ||
		!strings.HasSuffix(strings.TrimSpace(lines[1]), " no") {
		t.Errorf("group 7: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 4 || f[3] != "-" || !strings.HasSuffix(lines[2], "YES (wants 3)") {
		t.Errorf("group without a leader, under-replicated: %q", lines[2])
	}
	out, err = qb("cluster", "partitions", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Entity    string
		Partition int
		GroupID   uint32
		Leader    string
		Replicas  []struct {
			Node      string
			Voter     bool
			LastIndex uint64
			Lag       uint64
		}
		UnderReplicated *bool
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if u0, u1 := rows[0].UnderReplicated, rows[1].UnderReplicated; u0 == nil || *u0 || u1 == nil || !*u1 {
		t.Errorf("UnderReplicated: %v, %v; want false, true", u0, u1)
	}
	if r := rows[0]; r.Entity != "orders" || r.GroupID != 7 || r.Leader != "n1" || len(r.Replicas) != 3 ||
		r.Replicas[1].Lag != 2 || r.Replicas[2].Voter || r.Replicas[0].LastIndex != 42 {
		t.Errorf("row 0: %+v", r)
	}
}

func TestNodeAndPartitionCommands(t *testing.T) {
	fc := &fakeCluster{}
	qb := clusterNode(t, fc)
	for _, tc := range []struct {
		args []string
		call string
		out  string // in stdout on success
		err  string // in the error otherwise
	}{
		{[]string{"node", "drain", "n3"}, "drain n3", "node n3 draining", ""},
		{[]string{"node", "remove", "n3"}, "remove n3", "node n3 removed", ""},
		{[]string{"node", "remove", "n3", "-o", "json"}, "remove n3", `"Action": "remove"`, ""},
		{[]string{"node", "undrain", "n3"}, "undrain n3", "node n3 no longer draining", ""},
		{[]string{"node", "undrain", "n9"}, "undrain n9", "", `node undrain n9: not found: node "n9" is not a member`},
		{[]string{"partition", "transfer-leader", "7", "--to", "n2"}, "transfer 7 n2", "group 7 moved to n2", ""},
		{[]string{"partition", "transfer-leader", "--to", "n2", "8"}, "transfer 8 n2", "group 8 moved to n2", ""},
		{[]string{"partition", "transfer-leader", "7"}, "transfer 7 ", "moved to another voter", ""},
		{[]string{"node", "drain", "n9"}, "drain n9", "", `node drain n9: not found: node "n9" is not a member`},
		{[]string{"partition", "transfer-leader", "9"}, "transfer 9 ", "", "transfer-leader of group 9: not found: partition group 9"},
	} {
		fc.mu.Lock()
		fc.calls = nil
		fc.mu.Unlock()
		out, err := qb(tc.args...)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && !strings.Contains(out, tc.out):
			t.Errorf("%v: stdout %q, want %q", tc.args, out, tc.out)
		}
		if err != nil && (strings.Contains(err.Error(), "{") || strings.Contains(err.Error(), "HTTP")) {
			t.Errorf("%v: a raw HTTP answer in the error: %v", tc.args, err)
		}
		fc.mu.Lock()
		if len(fc.calls) != 1 || fc.calls[0] != tc.call {
			t.Errorf("%v: cluster calls %q, want %q", tc.args, fc.calls, tc.call)
		}
		fc.mu.Unlock()
	}
	fc.fail = fmt.Errorf("no metadata leader: %w", admin.ErrUnavailable)
	if _, err := qb("cluster", "status"); err == nil || !strings.Contains(err.Error(), "cannot do this now, try again: no metadata leader") {
		t.Errorf("unavailable: %v", err)
	}
}

func TestClusterCommandErrorsAreSentences(t *testing.T) {
	qb := clusterNode(t, nil)
	if _, err := qb("cluster", "status"); err == nil || !strings.Contains(err.Error(), "runs without a cluster") {
		t.Errorf("no cluster: %v", err)
	}
	// A key without Manage.
	qbSend := clusterNode(t, &fakeCluster{})
	_, err := qbSend("--connection-string", strings.Replace(strings.Replace(testConnStr, "RootManageSharedAccessKey", "sender", 1), "k3y", "s3nd", 1), "cluster", "partitions")
	if err == nil || !strings.Contains(err.Error(), "the key \"sender\" lacks the Manage right") {
		t.Errorf("no Manage: %v", err)
	}
	// Nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"--admin-addr", addr, "--connection-string", testConnStr, "cluster", "status"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the admin API at "+addr) {
		t.Errorf("unreachable: %v", err)
	}
}

func TestClusterUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"cluster"}, {"cluster", "frob"}, {"cluster", "status", "extra"}, {"cluster", "status", "-o", "yaml"},
		{"node"}, {"node", "drain"}, {"node", "evict", "n1"}, {"node", "drain", "n1", "n2"},
		{"partition"}, {"partition", "transfer-leader"}, {"partition", "transfer-leader", "x"}, {"partition", "move", "7"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"--connection-string", testConnStr, "--admin-addr", "127.0.0.1:1"}, args...), &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

// qbctl mirrors the cluster API's JSON types rather than import the broker: every field
// of admin's types must survive a round trip through qbctl's.
func TestClusterTypesMatchTheAPI(t *testing.T) {
	for _, tc := range []struct{ api, local any }{
		{admin.ClusterStatus{NodeID: "a", MetadataLeader: "b", Members: []admin.Member{{ID: "c", ClusterAddr: "d", AMQPAddr: "e",
			AdminAddr: "f", Zone: "g", State: "h", MetadataRole: "i", Replicas: 1, Leading: 2, MetadataDigest: "j", MetadataApplied: 3}}}, &clusterStatus{}},
		{[]admin.PartitionStatus{{Entity: "a", Index: 1, GroupID: 2, Leader: "b", Replicas: []admin.ReplicaStatus{
			{Node: "c", Voter: true, LastIndex: 3, Lag: 4}}, WantReplicas: 3, UnderReplicated: true}}, &[]partitionStatus{}},
		{admin.ClusterError{Code: 404, Message: "m"}, &apiError{}},
		{admin.RebalanceStatus{NodeID: "a", MaxMoves: 2, Moves: []admin.RebalanceMove{{Entity: "b", Index: 1, GroupID: 2,
			Joining: []string{"c"}, CatchingUp: []string{"d"}, Leaving: []string{"e"}}}, Nodes: []admin.RebalanceNode{{ID: "f",
			Zone: "g", State: "up", Replicas: 3, Leading: 4, ReplicasEven: true, LeadingEven: true}}, EvenReplicas: 1.5,
			EvenLeading: 2.5, Balanced: true, Done: true}, &rebalanceStatus{}},
		{admin.RestoreResult{Queues: 1, Topics: 2, Subscriptions: 3, Keys: 4, Partitions: 5, Bytes: 6}, &restoreResult{}},
	} {
		want, _ := json.Marshal(tc.api)
		if err := json.Unmarshal(want, tc.local); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(tc.local)
		var a, b any
		_ = json.Unmarshal(want, &a)
		_ = json.Unmarshal(got, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%T: qbctl reads %s as %s", tc.api, want, got)
		}
	}
}

func (f *fakeCluster) RebalanceStatus(context.Context) (admin.RebalanceStatus, error) {
	if err := f.call("rebalance"); err != nil {
		return admin.RebalanceStatus{}, err
	}
	return admin.RebalanceStatus{NodeID: "n2", MaxMoves: 2, EvenReplicas: 7.2, EvenLeading: 2.4,
		Moves: []admin.RebalanceMove{{Entity: "orders", Index: 3, GroupID: 9, CatchingUp: []string{"n4"}, Leaving: []string{"n1"}}},
		Nodes: []admin.RebalanceNode{
			{ID: "n1", Zone: "a", State: "up", Replicas: 9, Leading: 3, LeadingEven: true},
			{ID: "n4", State: "up", Replicas: 5, Leading: 2, ReplicasEven: true, LeadingEven: true},
			{ID: "n5", State: "down", Replicas: 1},
		}}, nil
}

// qbctl cluster rebalance status shows the moves under way and each node's share
// against the even one, as a table and as JSON.
func TestClusterRebalanceStatus(t *testing.T) {
	qb := clusterNode(t, &fakeCluster{})
	out, err := qb("cluster", "rebalance", "status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rebalance: in progress: 1 group(s) changing membership (as seen by n2; --rebalance-moves 2)",
		"even share: 7.2 replicas, 2.4 leaderships per node",
		"NODE STATE ZONE REPLICAS EVEN LEADING EVEN",
		"n1 up a 9 NO 3 yes",
		"n5 down - 1 - 0 -",
		"ENTITY PARTITION GROUP JOINING CATCHING UP LEAVING",
		"orders 3 9 - n4 n1",
	} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			found = found || strings.Join(strings.Fields(l), " ") == want
		}
		if !found {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	out, err = qb("cluster", "rebalance", "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		NodeID   string
		MaxMoves int
		Done     bool
		Nodes    []map[string]any
		Moves    []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.NodeID != "n2" || got.MaxMoves != 2 || got.Done || len(got.Nodes) != 3 || len(got.Moves) != 1 ||
		got.Nodes[0]["Replicas"] != 9.0 || got.Nodes[0]["ReplicasEven"] != false || got.Moves[0]["GroupID"] != 9.0 {
		t.Fatalf("JSON:\n%s", out)
	}
}
