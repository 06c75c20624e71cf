package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

// fakeCluster is a three-node cluster as admin.Cluster sees it: n1..n3, one partition
// group (7) led by n1. It records the operations it was asked for.
type fakeCluster struct {
	mu    sync.Mutex
	calls []string
	fail  error // returned by every method when set
}

var _ admin.Cluster = (*fakeCluster)(nil)

func (f *fakeCluster) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.fail
}

func (f *fakeCluster) known(id string) error {
	if id != "n1" && id != "n2" && id != "n3" {
		return fmt.Errorf("node %q: %w", id, meta.ErrNotFound)
	}
	return nil
}

func (f *fakeCluster) ClusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	if err := f.record("status"); err != nil {
		return admin.ClusterStatus{}, err
	}
	st := admin.ClusterStatus{NodeID: "n2", MetadataLeader: "n1", Members: []admin.Member{
		{ID: "n1", ClusterAddr: "10.0.0.1:5400", AMQPAddr: "10.0.0.1:5672", Zone: "a", State: "alive", MetadataRole: "leader", Replicas: 1, Leading: 1},
		{ID: "n2", ClusterAddr: "10.0.0.2:5400", State: "alive", MetadataRole: "voter", Replicas: 1},
		{ID: "n3", ClusterAddr: "10.0.0.3:5400", State: "suspect", MetadataRole: "voter"},
	}}
	if admin.WantDigests(ctx) {
		st.Members[0].MetadataDigest, st.Members[0].MetadataApplied = "abc", 9
	}
	return st, nil
}

func (f *fakeCluster) Partitions(context.Context) ([]admin.PartitionStatus, error) {
	if err := f.record("partitions"); err != nil {
		return nil, err
	}
	return []admin.PartitionStatus{{Entity: "orders", Index: 0, GroupID: 7, Leader: "n1", Replicas: []admin.ReplicaStatus{
		{Node: "n1", Voter: true, LastIndex: 42}, {Node: "n2", Voter: true, LastIndex: 40, Lag: 2},
	}}}, nil
}

func (f *fakeCluster) DrainNode(_ context.Context, id string) error {
	if err := f.record("drain " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) UndrainNode(_ context.Context, id string) error {
	if err := f.record("undrain " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) RemoveNode(_ context.Context, id string) error {
	if err := f.record("remove " + id); err != nil {
		return err
	}
	return f.known(id)
}

func (f *fakeCluster) TransferLeader(_ context.Context, group uint32, to string) error {
	if err := f.record(fmt.Sprintf("transfer %d to=%q", group, to)); err != nil {
		return err
	}
	if group != 7 {
		return fmt.Errorf("partition group %d: %w", group, meta.ErrNotFound)
	}
	if to != "" {
		return f.known(to)
	}
	return nil
}

func (f *fakeCluster) lastCall() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return ""
	}
	return f.calls[len(f.calls)-1]
}

// newClusterServer serves a handler whose Config.Cluster is c (nil allowed).
func newClusterServer(t *testing.T, c admin.Cluster) *httptest.Server {
	t.Helper()
	now := func() time.Time { return time.Now() }
	store := &memStore{st: meta.New(), now: now, counts: map[admin.Entity]admin.RuntimeCounts{}}
	for _, cmd := range []meta.Command{
		&meta.SetNamespace{Name: "sbemulatorns"},
		&meta.PutSASKey{Key: meta.SASKey{Name: rootName, PrimaryKey: rootKey, Rights: meta.RightManage | meta.RightSend | meta.RightListen}},
		&meta.PutSASKey{Key: meta.SASKey{Name: "listener", PrimaryKey: "listen-key", Rights: meta.RightListen}},
	} {
		if err := store.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	cfg := admin.DefaultConfig()
	cfg.Store, cfg.Now, cfg.Cluster = store, now, c
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type clusterResp struct {
	code   int
	header http.Header
	body   string
}

// clusterDo sends method path signed for the whole namespace with key name/key ("" for
// no Authorization header).
func clusterDo(t *testing.T, srv *httptest.Server, method, path, keyName, key string) clusterResp {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if keyName != "" {
		req.Header.Set("Authorization", sign("sb://127.0.0.1:5672", keyName, key))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return clusterResp{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

func TestClusterStatusAndPartitionsJSON(t *testing.T) {
	fc := &fakeCluster{}
	srv := newClusterServer(t, fc)

	r := clusterDo(t, srv, http.MethodGet, "/$cluster/status", rootName, rootKey)
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("status: %d %s %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
		t.Fatal(err)
	}
	members, _ := raw["members"].([]any)
	if raw["nodeId"] != "n2" || raw["metadataLeader"] != "n1" || len(members) != 3 {
		t.Fatalf("status body: %s", r.body)
	}
	m0 := members[0].(map[string]any)
	for k, want := range map[string]any{"id": "n1", "clusterAddr": "10.0.0.1:5400", "amqpAddr": "10.0.0.1:5672",
		"zone": "a", "state": "alive", "metadataRole": "leader", "replicas": 1.0, "leading": 1.0} {
		if m0[k] != want {
			t.Errorf("members[0].%s = %v, want %v (%s)", k, m0[k], want, r.body)
		}
	}

	if _, ok := m0["metadataDigest"]; ok {
		t.Errorf("status without ?digests=true has a metadata digest: %s", r.body)
	}
	r = clusterDo(t, srv, http.MethodGet, "/$cluster/status?digests=true", rootName, rootKey)
	if r.code != 200 || !strings.Contains(r.body, `"metadataDigest": "abc"`) || !strings.Contains(r.body, `"metadataApplied": 9`) {
		t.Errorf("status?digests=true: %d %s", r.code, r.body)
	}

	r = clusterDo(t, srv, http.MethodGet, "/$cluster/partitions", rootName, rootKey)
	var ps []admin.PartitionStatus
	if r.code != 200 || json.Unmarshal([]byte(r.body), &ps) != nil {
		t.Fatalf("partitions: %d %s", r.code, r.body)
	}
	want := []admin.PartitionStatus{{Entity: "orders", GroupID: 7, Leader: "n1", Replicas: []admin.ReplicaStatus{
		{Node: "n1", Voter: true, LastIndex: 42}, {Node: "n2", Voter: true, LastIndex: 40, Lag: 2}}}}
	if !equalJSON(ps, want) {
		t.Fatalf("partitions = %s, want %s", js(ps), js(want))
	}
	for _, k := range []string{`"groupId": 7`, `"lastIndex": 40`, `"lag": 2`, `"voter": true`, `"entity": "orders"`, `"index": 0`} {
		if !strings.Contains(r.body, k) {
			t.Errorf("partitions body lacks %s:\n%s", k, r.body)
		}
	}
}

func TestClusterActions(t *testing.T) {
	fc := &fakeCluster{}
	srv := newClusterServer(t, fc)
	for _, tc := range []struct {
		method, path string
		code         int
		call         string // what the cluster was asked; "" = not called
		msg          string // in the JSON error message
	}{
		{http.MethodPost, "/$cluster/nodes/n3/drain", 204, "drain n3", ""},
		{http.MethodPost, "/$cluster/nodes/n9/drain", 404, "drain n9", `node "n9"`},
		{http.MethodPost, "/$cluster/nodes/a%2Fb/drain", 404, "drain a/b", `node "a/b"`},
		{http.MethodPost, "/%24cluster/nodes/n3/drain", 204, "drain n3", ""},
		{http.MethodPost, "/$cluster/nodes/n3/undrain", 204, "undrain n3", ""},
		{http.MethodPost, "/$cluster/nodes/n9/undrain", 404, "undrain n9", `node "n9"`},
		{http.MethodGet, "/$cluster/nodes/n3/undrain", 405, "", "use POST"},
		{http.MethodDelete, "/$cluster/nodes/n3", 204, "remove n3", ""},
		{http.MethodDelete, "/$cluster/nodes/n9", 404, "remove n9", "not found"},
		{http.MethodPost, "/$cluster/partitions/7/transfer-leader?to=n2", 204, `transfer 7 to="n2"`, ""},
		{http.MethodPost, "/$cluster/partitions/7/transfer-leader", 204, `transfer 7 to=""`, ""},
		{http.MethodPost, "/$cluster/partitions/8/transfer-leader", 404, `transfer 8 to=""`, "group 8"},
		{http.MethodPost, "/$cluster/partitions/7/transfer-leader?to=n9", 404, `transfer 7 to="n9"`, `node "n9"`},
		{http.MethodPost, "/$cluster/partitions/x7/transfer-leader", 400, "", `"x7" is not a number`},
		{http.MethodPost, "/$cluster/partitions/4294967296/transfer-leader", 400, "", "not a number"},
		{http.MethodPost, "/$cluster/partitions/-1/transfer-leader", 400, "", "not a number"},
		{http.MethodGet, "/$cluster/nodes/n3/drain", 405, "", "use POST"},
		{http.MethodPost, "/$cluster/status", 405, "", "use GET"},
		{http.MethodPut, "/$cluster/nodes/n3", 405, "", "use DELETE"},
		{http.MethodGet, "/$cluster/frobnicate", 404, "", "unknown cluster API path"},
		{http.MethodGet, "/$cluster", 404, "", "unknown cluster API path"},
		{http.MethodDelete, "/$cluster/nodes/", 404, "", "unknown cluster API path"},
	} {
		fc.mu.Lock()
		fc.calls = nil
		fc.mu.Unlock()
		r := clusterDo(t, srv, tc.method, tc.path, rootName, rootKey)
		if r.code != tc.code {
			t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, r.code, tc.code, r.body)
			continue
		}
		if got := fc.lastCall(); got != tc.call {
			t.Errorf("%s %s: cluster call %q, want %q", tc.method, tc.path, got, tc.call)
		}
		if tc.code == 204 {
			if r.body != "" {
				t.Errorf("%s %s: 204 with body %q", tc.method, tc.path, r.body)
			}
			continue
		}
		var e admin.ClusterError
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s %s: error body %q (%v), want code %d and a message with %q", tc.method, tc.path, r.body, err, tc.code, tc.msg)
		}
		if tc.code == 405 && r.header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
	}
}

// Only a key with the Manage right may use the cluster API, exactly as for entities.
func TestClusterAPIAuthorization(t *testing.T) {
	fc := &fakeCluster{}
	srv := newClusterServer(t, fc)
	for _, tc := range []struct {
		name, keyName, key, want string
	}{
		{"no token", "", "", "missing Authorization"},
		{"listen only", "listener", "listen-key", "Manage"},
		{"wrong key", rootName, "not-the-key", "InvalidSignature"},
	} {
		r := clusterDo(t, srv, http.MethodPost, "/$cluster/nodes/n3/drain", tc.keyName, tc.key)
		var e admin.ClusterError
		if r.code != 401 || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s, want 401 mentioning %q", tc.name, r.code, r.body, tc.want)
		}
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	if c := fc.lastCall(); c != "" {
		t.Fatalf("an unauthorized request reached the cluster: %q", c)
	}
	// A token scoped to one entity does not cover /$cluster.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/$cluster/status", nil)
	req.Header.Set("Authorization", sign("https://127.0.0.1:5672/orders", rootName, rootKey))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("entity-scoped token: %d, want 401", resp.StatusCode)
	}
}

func TestClusterAPIErrorsAndNoCluster(t *testing.T) {
	fc := &fakeCluster{fail: fmt.Errorf("no metadata leader: %w", admin.ErrUnavailable)}
	srv := newClusterServer(t, fc)
	r := clusterDo(t, srv, http.MethodGet, "/$cluster/status", rootName, rootKey)
	if r.code != 503 || !strings.Contains(r.body, "no metadata leader") || r.header.Get("Retry-After") == "" {
		t.Fatalf("unavailable: %d %v %s", r.code, r.header, r.body)
	}
	fc.fail = fmt.Errorf("bad request: %w", &meta.ValidationError{Field: "to", Reason: "is not a voter"})
	if r := clusterDo(t, srv, http.MethodPost, "/$cluster/partitions/7/transfer-leader?to=n3", rootName, rootKey); r.code != 400 {
		t.Fatalf("validation error: %d %s", r.code, r.body)
	}
	fc.fail = fmt.Errorf("disk on fire")
	if r := clusterDo(t, srv, http.MethodGet, "/$cluster/partitions", rootName, rootKey); r.code != 500 {
		t.Fatalf("other error: %d %s", r.code, r.body)
	}

	none := newClusterServer(t, nil)
	for _, p := range []string{"/$cluster/status", "/$cluster/partitions"} {
		r := clusterDo(t, none, http.MethodGet, p, rootName, rootKey)
		var e admin.ClusterError
		if r.code != 404 || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Message, "without a cluster") {
			t.Errorf("%s with no cluster: %d %s", p, r.code, r.body)
		}
	}
	// Entity paths still work next to the cluster API.
	req, _ := http.NewRequest(http.MethodGet, none.URL+"/$namespaceinfo", nil)
	req.Header.Set("Authorization", sign("sb://127.0.0.1:5672", rootName, rootKey))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("$namespaceinfo: %d", resp.StatusCode)
	}
}

// rebalancingCluster is fakeCluster reporting replica rebalancing.
type rebalancingCluster struct{ fakeCluster }

func (f *rebalancingCluster) RebalanceStatus(context.Context) (admin.RebalanceStatus, error) {
	if err := f.record("rebalance"); err != nil {
		return admin.RebalanceStatus{}, err
	}
	return admin.RebalanceStatus{NodeID: "n2", MaxMoves: 2, Moves: []admin.RebalanceMove{},
		Nodes:        []admin.RebalanceNode{{ID: "n1", State: "up", Replicas: 3, Leading: 1, ReplicasEven: true, LeadingEven: true}},
		EvenReplicas: 3, EvenLeading: 1, Balanced: true, Done: true}, nil
}

// GET /$cluster/rebalance answers the Rebalancer's status as JSON (moves an array even
// when nothing moves); another method is 405 naming GET, and a cluster that does not
// report rebalancing is 404 with a sentence.
func TestClusterRebalanceJSON(t *testing.T) {
	srv := newClusterServer(t, &rebalancingCluster{})
	r := clusterDo(t, srv, http.MethodGet, "/$cluster/rebalance", rootName, rootKey)
	if r.code != 200 {
		t.Fatalf("rebalance: %d %s", r.code, r.body)
	}
	for _, k := range []string{`"nodeId": "n2"`, `"maxMoves": 2`, `"moves": []`, `"replicasEven": true`, `"evenReplicas": 3`, `"done": true`} {
		if !strings.Contains(r.body, k) {
			t.Errorf("rebalance body lacks %s:\n%s", k, r.body)
		}
	}
	if r := clusterDo(t, srv, http.MethodPost, "/$cluster/rebalance", rootName, rootKey); r.code != 405 || r.header.Get("Allow") != "GET" {
		t.Errorf("POST rebalance: %d Allow %q %s", r.code, r.header.Get("Allow"), r.body)
	}
	if r := clusterDo(t, srv, http.MethodGet, "/$cluster/rebalance", "listener", "listen-key"); r.code != 401 {
		t.Errorf("rebalance with a Listen key: %d %s", r.code, r.body)
	}
	plain := newClusterServer(t, &fakeCluster{})
	if r := clusterDo(t, plain, http.MethodGet, "/$cluster/rebalance", rootName, rootKey); r.code != 404 || !strings.Contains(r.body, "does not report rebalancing") {
		t.Errorf("rebalance on a cluster without it: %d %s", r.code, r.body)
	}
}
