package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/cluster/admin"
)

// qbctl status fails (exit status 1: an error that is not a usage error) when nothing
// answers at the admin address, so scripts and probes can use it; it succeeds against a
// node that is healthy and ready.
func TestStatusFailsWhenTheNodeIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"--admin-addr", addr, "--connection-string", testConnStr, "status"}, &out, &errOut)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("status of a node that is not there: err %v (want exit status 1)\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "unreachable") {
		t.Errorf("status does not say the node is unreachable:\n%s", out.String())
	}

	qb := adminNode(t, &fakeCluster{})
	stdout, _, err := qb("status")
	if err != nil || !strings.Contains(stdout, "quorumbus") {
		t.Fatalf("status of a healthy node: %v\n%s", err, stdout)
	}
}

// unreachableCluster is fakeCluster with a partition group whose third replica's node
// did not answer, and replica digests when asked for.
type unreachableCluster struct{ fakeCluster }

func (f *unreachableCluster) Partitions(ctx context.Context) ([]admin.PartitionStatus, error) {
	ps := []admin.PartitionStatus{{Entity: "orders", Index: 0, GroupID: 7, Leader: "n1", Replicas: []admin.ReplicaStatus{
		{Node: "n1", Voter: true, LastIndex: 42}, {Node: "n2", Voter: true, LastIndex: 42}, {Node: "n3", Voter: true, Unreachable: true}}}}
	if admin.WantDigests(ctx) {
		ps[0].Replicas[0].Digest = "3fa9c2e01b7d00112233445566778899"
		ps[0].Replicas[1].Digest = "3fa9c2e01b7d00112233445566778899"
	}
	return ps, nil
}

// A replica whose node did not answer shows as unreachable (its lag is unknown, not 0),
// and --digests adds the digest column to the table.
func TestPartitionsShowUnreachableReplicasAndDigests(t *testing.T) {
	qb := clusterNode(t, &unreachableCluster{})
	out, err := qb("cluster", "partitions")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "n1, n2 (lag 0), n3 (unreachable)") || strings.Contains(out, "DIGESTS") {
		t.Errorf("table:\n%s", out)
	}
	out, err = qb("cluster", "partitions", "--digests")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DIGESTS") ||
		!strings.HasSuffix(lines[1], "n1 3fa9c2e01b7d, n2 3fa9c2e01b7d, n3 -") {
		t.Errorf("table with --digests:\n%s", out)
	}
	out, err = qb("cluster", "partitions", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Replicas []map[string]any }
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Replicas[2]["Unreachable"] != true {
		t.Errorf("json: %v\n%s", err, out)
	}
}

// sdkKey is a key in the SDK's style: PascalCase, Go initialisms upper-case.
var sdkKey = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// checkKeys walks a decoded JSON value and reports every object key not in the SDK's
// style, except inside user-named maps (application properties, SQL parameters).
func checkKeys(t *testing.T, what string, v any, path string) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !sdkKey.MatchString(k) {
				t.Errorf("%s: key %s%s is not in the SDK's style", what, path, k)
			}
			if k == "ApplicationProperties" || k == "Parameters" {
				continue
			}
			checkKeys(t, what, e, path+k+".")
		}
	case []any:
		for _, e := range x {
			checkKeys(t, what, e, path+"[].")
		}
	}
}

// Every -o json output names its keys one way, the SDK's, and writes <, > and & as
// they are.
func TestJSONOutputsUseOneKeyStyle(t *testing.T) {
	qb := adminNode(t, &unreachableCluster{})
	for _, args := range [][]string{
		{"queue", "create", "jobs"}, {"topic", "create", "events"}, {"subscription", "create", "events", "eu"},
		{"rule", "create", "events", "eu", "big", "--sql", "size > 1 AND size < 10", "--action", "SET tag = 'a&b'"},
	} {
		if _, _, err := qb(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	var checked int
	for _, args := range [][]string{
		{"status"}, {"cluster", "status"}, {"cluster", "status", "--digests"}, {"cluster", "partitions"},
		{"cluster", "partitions", "--digests"}, {"node", "drain", "n1"}, {"node", "undrain", "n1"},
		{"partition", "transfer-leader", "7"}, {"queue", "show", "jobs"}, {"queue", "list"}, {"topic", "list"},
		{"subscription", "list", "events"}, {"subscription", "show", "events", "eu"}, {"rule", "list", "events", "eu"},
		{"rule", "show", "events", "eu", "big"}, {"key", "list"}, {"key", "create", "sender2", "--rights", "Send"},
		{"queue", "delete", "jobs"},
	} {
		out, _, err := qb(append(args, "-o", "json")...)
		if err != nil {
			t.Errorf("%v: %v", args, err)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Errorf("%v: not JSON: %v\n%s", args, err, out)
			continue
		}
		checkKeys(t, strings.Join(args, " "), v, "")
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if strings.Contains(out, esc) {
				t.Errorf("%v: HTML-escaped output (%s):\n%s", args, esc, out)
			}
		}
		checked++
	}
	out, _, err := qb("rule", "show", "events", "eu", "big", "-o", "json")
	if err != nil || !strings.Contains(out, "size > 1 AND size < 10") || !strings.Contains(out, "a&b") {
		t.Errorf("rule show: %v\n%s", err, out)
	}
	if checked < 15 {
		t.Fatalf("only %d outputs checked", checked)
	}
}

// Next to a node's data directory, qbctl takes the admin address from the node's
// endpoints.json (a node started on other ports needs no --admin-addr); a given
// --admin-addr, QUORUMBUS_ADMIN_ADDR or a connection string from elsewhere keep it out.
func TestAdminAddressFromEndpointsJSON(t *testing.T) {
	t.Setenv("QUORUMBUS_ADMIN_ADDR", "")
	t.Setenv("QUORUMBUS_CONNECTION_STRING", "")
	srv := adminServer(t, &fakeCluster{})
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "connection-string"), []byte(testConnStr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ep, _ := json.Marshal(map[string]string{"admin": "0.0.0.0:" + port, "amqp": "127.0.0.1:5672"})
	if err := os.WriteFile(filepath.Join(dir, "endpoints.json"), ep, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--data", dir, "cluster", "status"}, &out, &errOut); err != nil {
		t.Fatalf("qbctl --data DIR cluster status: %v", err)
	}
	if !strings.Contains(out.String(), "metadata leader: n1") {
		t.Errorf("cluster status:\n%s", out.String())
	}
	// An explicit address wins (here one where nothing listens).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	err = run(context.Background(), []string{"--data", dir, "--admin-addr", closed, "cluster", "status"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("--admin-addr %s was not used: %v", closed, err)
	}
	t.Setenv("QUORUMBUS_ADMIN_ADDR", closed)
	err = run(context.Background(), []string{"--data", dir, "cluster", "status"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("QUORUMBUS_ADMIN_ADDR %s was not used: %v", closed, err)
	}
}

// qbctl apply brings the namespace to a Config.json, again and again: the first run
// creates, an edited file updates, --prune deletes what the file no longer declares.
func TestApplyConfigJSON(t *testing.T) {
	qb := adminNode(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "Config.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"UserConfig": {"Namespaces": [{"Name": "quorumbus", "Queues": [{"Name": "jobs", "Properties": {"MaxDeliveryCount": 4}}, {"Name": "extra"}]}]}}`)
	out, _, err := qb("apply", "-f", file)
	if err != nil || !strings.Contains(out, "create queue jobs") || !strings.Contains(out, "2 change(s) applied") {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	if out, _, err = qb("apply", "-f", file); err != nil || !strings.Contains(out, "0 change(s) applied") {
		t.Fatalf("the same file again: %v\n%s", err, out)
	}
	write(`{"UserConfig": {"Namespaces": [{"Name": "quorumbus", "Queues": [{"Name": "jobs", "Properties": {"MaxDeliveryCount": 9}}]}]}}`)
	if out, _, err = qb("apply", "-f", file); err != nil || !strings.Contains(out, "update queue jobs") || strings.Contains(out, "delete") {
		t.Fatalf("edited: %v\n%s", err, out)
	}
	q := showJSON(t, qb, "queue", "show", "jobs")
	if q["MaxDeliveryCount"] != 9.0 {
		t.Errorf("jobs after apply: %v", q)
	}
	if out, _, err = qb("apply", "-f", file, "--prune", "-o", "json"); err != nil || !strings.Contains(out, `"delete queue extra"`) {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	if _, _, err := qb("apply"); !errors.Is(err, errUsage) {
		t.Errorf("apply without -f: %v", err)
	}
}
