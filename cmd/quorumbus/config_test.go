package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaultsAreTheEmulatorPorts(t *testing.T) {
	c, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.AMQPAddr != "127.0.0.1:5672" || c.AdminAddr != "127.0.0.1:5300" || c.Data != "./data" ||
		c.KeyName != "RootManageSharedAccessKey" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigPrecedenceFlagOverEnvOverFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "qb.json")
	if err := os.WriteFile(file, []byte(`{"data": "/from/file", "amqp-addr": "127.0.0.1:1111",
		"admin-addr": "127.0.0.1:2222", "shutdown-timeout": 5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := env(map[string]string{
		"QUORUMBUS_CONFIG":    file,
		"QUORUMBUS_AMQP_ADDR": "127.0.0.1:3333",
		"QUORUMBUS_DATA":      "/from/env",
	})
	c, err := loadConfig([]string{"--data", "/from/flag"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Data != "/from/flag" {
		t.Errorf("data = %q, want the flag's", c.Data)
	}
	if c.AMQPAddr != "127.0.0.1:3333" {
		t.Errorf("amqp-addr = %q, want the environment's", c.AMQPAddr)
	}
	if c.AdminAddr != "127.0.0.1:2222" {
		t.Errorf("admin-addr = %q, want the file's", c.AdminAddr)
	}
	if c.ShutdownTimeout != 5*time.Second {
		t.Errorf("shutdown-timeout = %v, want 5s from a bare number", c.ShutdownTimeout)
	}
}

func TestConfigRejectsBadValuesNamingTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--amqp-addr", "nope"}, nil, "--amqp-addr"},
		{nil, map[string]string{"QUORUMBUS_ADMIN_ADDR": "bad"}, "--admin-addr"},
		{[]string{"--log-level", "loud"}, nil, "--log-level"},
		{nil, map[string]string{"QUORUMBUS_SHUTDOWN_TIMEOUT": "soon"}, "QUORUMBUS_SHUTDOWN_TIMEOUT"},
		{[]string{"stray"}, nil, "unexpected argument"},
	} {
		_, err := loadConfig(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("args %v env %v: err = %v, want mention of %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestConfigFileUnknownKeyIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"amqp-adr": "127.0.0.1:1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadConfig([]string{"--config", file}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown key "amqp-adr"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestClusterSettingsDefaults(t *testing.T) {
	c, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if host != "" && c.NodeID != host {
		t.Errorf("node-id = %q, want the host name %q (stable per StatefulSet pod)", c.NodeID, host)
	}
	if !c.nodeIDDefaulted {
		t.Error("node-id not marked defaulted")
	}
	if c.BootstrapExpect != 1 || c.Replicas != 3 || c.DeadNodeGrace != 10*time.Minute || c.RaftLogStore != "shared" ||
		c.AdvertiseAddr != "" || c.Join != nil || c.Zone != "" || c.RebalanceMoves != 2 {
		t.Fatalf("cluster defaults: %+v", c)
	}
}

// Each cluster setting comes from a flag, the environment or the file, with the usual
// precedence, and lands in cluster.Config.
func TestClusterSettingsFromEverySource(t *testing.T) {
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"join": ["qb-0.qb:5400", "qb-1.qb:5400"], "bootstrap-expect": 3,
		"replicas": "2", "zone": "file-zone", "dead-node-grace": 90, "raft-log-store": "wal", "rebalance-moves": 4}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig([]string{"--config", file, "--node-id", "qb-2", "--advertise-addr", "qb-2.qb:5400",
		"--cluster-addr", "0.0.0.0:5400", "--zone", "eu-1a"},
		env(map[string]string{"QUORUMBUS_REPLICAS": "5"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "qb-2" || c.AdvertiseAddr != "qb-2.qb:5400" || c.Zone != "eu-1a" || c.Replicas != 5 ||
		c.BootstrapExpect != 3 || c.DeadNodeGrace != 90*time.Second || c.RaftLogStore != "wal" ||
		strings.Join(c.Join, ",") != "qb-0.qb:5400,qb-1.qb:5400" || c.RebalanceMoves != 4 {
		t.Fatalf("config: %+v", c)
	}

	c, err = loadConfig([]string{"--join", "a:1, b:2", "--bootstrap-expect", "2", "--dead-node-grace", "1m"},
		env(map[string]string{"QUORUMBUS_JOIN": "x:9", "QUORUMBUS_BOOTSTRAP_EXPECT": "7", "QUORUMBUS_ZONE": "z",
			"QUORUMBUS_RAFT_LOG_STORE": "wal", "QUORUMBUS_REBALANCE_MOVES": "0"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Join, ",") != "a:1,b:2" || c.BootstrapExpect != 2 || c.Zone != "z" || c.DeadNodeGrace != time.Minute ||
		c.RebalanceMoves != 0 {
		t.Fatalf("flags over env: %+v", c)
	}
	// The chart's cluster.zoneFromNode: the Kubernetes node's name, from the environment.
	c2, err := loadConfig(nil, env(map[string]string{"QUORUMBUS_ZONE_FROM_NODE": "aks-pool-0"}), io.Discard)
	if err != nil || c2.ZoneFromNode != "aks-pool-0" || c2.Zone != "" {
		t.Fatalf("zone-from-node: %+v %v", c2, err)
	}

	amqpAddr := &net.TCPAddr{IP: net.IPv4zero, Port: 5672}
	adminAddr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5300}
	c.AdvertiseAddr = "qb-2.qb:5400"
	cc := clusterConfig(c, amqpAddr, adminAddr)
	if cc.AdvertiseAddr != "qb-2.qb:5400" || cc.AMQPAddr != "qb-2.qb:5672" || cc.AdminAddr != "10.0.0.7:5300" ||
		strings.Join(cc.Join, ",") != "a:1,b:2" || cc.BootstrapExpect != 2 || cc.Zone != "z" ||
		cc.Replicas != c.Replicas || cc.DeadNodeGrace != time.Minute || cc.NodeID != c.NodeID ||
		cc.Storage.LogStore != "wal" || cc.RebalanceMoves != 0 {
		t.Fatalf("cluster.Config: %+v", cc)
	}
	if cc.AMQPAddr = advertised(amqpAddr, ""); cc.AMQPAddr != "0.0.0.0:5672" {
		t.Fatalf("no advertise host: %q", cc.AMQPAddr)
	}
}

func TestClusterSettingsRejectedWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--advertise-addr", "qb-0.qb"}, nil, `--advertise-addr "qb-0.qb": want HOST:PORT`},
		{[]string{"--advertise-addr", "0.0.0.0:5400"}, nil, "cannot be dialled"},
		{[]string{"--advertise-addr", "qb-0:0"}, nil, `port "0"`},
		{[]string{"--cluster-addr", "0.0.0.0:5400"}, nil, "set --advertise-addr"},
		{[]string{"--cluster-addr", ":5400"}, nil, "set --advertise-addr"},
		{[]string{"--cluster-addr", "[::]:5400"}, nil, "set --advertise-addr"},
		{[]string{"--join", "a:1,b"}, nil, `--join entry 2 "b"`},
		{[]string{"--join", "a:1,"}, nil, `--join entry 2 ""`},
		{nil, map[string]string{"QUORUMBUS_JOIN": "a:http"}, `port "http"`},
		{[]string{"--bootstrap-expect", "0"}, nil, "--bootstrap-expect 0: must be at least 1"},
		{[]string{"--bootstrap-expect", "three"}, nil, "bootstrap-expect"},
		{nil, map[string]string{"QUORUMBUS_BOOTSTRAP_EXPECT": "three"}, `QUORUMBUS_BOOTSTRAP_EXPECT="three": "three" is not a whole number`},
		{[]string{"--replicas", "0"}, nil, "--replicas 0: must be at least 1"},
		{[]string{"--dead-node-grace", "0s"}, nil, "--dead-node-grace 0s: must be positive"},
		{[]string{"--rebalance-moves", "-1"}, nil, "--rebalance-moves -1: must be 0 (no automatic moves) or more"},
		{[]string{"--zone", "a"}, map[string]string{"QUORUMBUS_ZONE_FROM_NODE": "node-1"}, `--zone "a" and --zone-from-node "node-1": set one`},
		{[]string{"--raft-log-store", "rocksdb"}, nil, `--raft-log-store "rocksdb": want shared, bolt or wal`},
		{nil, map[string]string{"QUORUMBUS_RAFT_LOG_STORE": "WAL"}, `--raft-log-store "WAL": want shared, bolt or wal`},
	} {
		_, err := loadConfig(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("args %v env %v: err = %v, want mention of %q", tc.args, tc.env, err, tc.want)
		}
	}
	// A wildcard cluster address is fine once peers are told where to dial.
	if _, err := loadConfig([]string{"--cluster-addr", "0.0.0.0:5400", "--advertise-addr", "10.1.2.3:5400"}, env(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"replicas": "many"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig([]string{"--config", file}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), `key "replicas"`) {
		t.Fatalf("file: %v", err)
	}
}

// The data directory keeps the ID its Raft state belongs to: a defaulted ID (the host
// name) yields to it, an explicit one that contradicts it is refused.
func TestNodeIDIsRecordedInTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	if id, err := resolveNodeID(dir, "host-a", true); err != nil || id != "host-a" {
		t.Fatalf("fresh: %q %v", id, err)
	}
	if id, err := resolveNodeID(dir, "host-b", true); err != nil || id != "host-a" {
		t.Fatalf("new host name, defaulted: %q %v, want the recorded host-a", id, err)
	}
	if id, err := resolveNodeID(dir, "host-a", false); err != nil || id != "host-a" {
		t.Fatalf("explicit, same: %q %v", id, err)
	}
	if _, err := resolveNodeID(dir, "other", false); err == nil || !strings.Contains(err.Error(), `belongs to node "host-a"`) {
		t.Fatalf("explicit, different: %v", err)
	}

	// Written before IDs were recorded: a single node, "node-1" unless named.
	legacy := t.TempDir()
	if err := os.Mkdir(filepath.Join(legacy, "meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	if id, err := resolveNodeID(legacy, "host-a", true); err != nil || id != "node-1" {
		t.Fatalf("legacy, defaulted: %q %v", id, err)
	}
	legacy2 := t.TempDir()
	if err := os.Mkdir(filepath.Join(legacy2, "meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	if id, err := resolveNodeID(legacy2, "named", false); err != nil || id != "named" {
		t.Fatalf("legacy, explicit: %q %v", id, err)
	}
	if b, _ := os.ReadFile(filepath.Join(legacy2, "node-id")); strings.TrimSpace(string(b)) != "named" {
		t.Fatalf("recorded %q", b)
	}
}

// --check-config prints what the node would start with as a config file that loads back
// to the same settings (the key redacted); the chart tests rely on it.
func TestCheckConfigPrintsALoadableConfigFile(t *testing.T) {
	c, err := loadConfig([]string{"--check-config", "--node-id", "qb-1", "--cluster-addr", "0.0.0.0:5400",
		"--advertise-addr", "qb-1.qb:5400", "--join", "qb-0.qb:5400,qb-1.qb:5400", "--dead-node-grace", "90s"},
		env(map[string]string{"QUORUMBUS_SAS_KEY": "sas-key-value", "QUORUMBUS_REPLICAS": "2",
			"QUORUMBUS_CLUSTER_SECRET": "cluster-secret-value-0123"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.checkOnly {
		t.Fatal("--check-config not recorded")
	}
	b, err := c.effectiveJSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "sas-key-value") || !strings.Contains(string(b), `"sas-key": "REDACTED"`) ||
		strings.Contains(string(b), "cluster-secret-value") || !strings.Contains(string(b), `"cluster-secret": "REDACTED"`) {
		t.Fatalf("key or cluster secret not redacted:\n%s", b)
	}
	file := filepath.Join(t.TempDir(), "effective.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := loadConfig([]string{"--config", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	back.Key, back.ClusterSecret, back.nodeIDDefaulted = c.Key, c.ClusterSecret, c.nodeIDDefaulted
	back.checkOnly = true
	if back.NodeID != "qb-1" || back.Replicas != 2 || back.DeadNodeGrace != 90*time.Second ||
		strings.Join(back.Join, ",") != "qb-0.qb:5400,qb-1.qb:5400" || back.AdvertiseAddr != c.AdvertiseAddr {
		t.Fatalf("round trip:\n%+v\n%+v", back, c)
	}
}

// TestHealthObservabilitySettings: --pprof is off by default and, like --log-format and
// --log-level, comes from a flag, QUORUMBUS_<NAME> or a config-file key; an explicit
// --pprof=false beats the environment; a value that is not a boolean names its source.
func TestHealthObservabilitySettings(t *testing.T) {
	c, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil || c.Pprof || c.LogFormat != "text" || c.LogLevel != "info" {
		t.Fatalf("defaults: pprof %v format %q level %q (%v)", c.Pprof, c.LogFormat, c.LogLevel, err)
	}
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"pprof": true, "log-format": "json", "log-level": "debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = loadConfig([]string{"--config", file}, env(nil), io.Discard)
	if err != nil || !c.Pprof || c.LogFormat != "json" || c.LogLevel != "debug" {
		t.Errorf("from the file: pprof %v format %q level %q (%v)", c.Pprof, c.LogFormat, c.LogLevel, err)
	}
	c, err = loadConfig(nil, env(map[string]string{"QUORUMBUS_PPROF": "true", "QUORUMBUS_LOG_FORMAT": "json"}), io.Discard)
	if err != nil || !c.Pprof || c.LogFormat != "json" {
		t.Errorf("from the environment: pprof %v format %q (%v)", c.Pprof, c.LogFormat, err)
	}
	c, err = loadConfig([]string{"--pprof=false"}, env(map[string]string{"QUORUMBUS_PPROF": "true"}), io.Discard)
	if err != nil || c.Pprof {
		t.Errorf("--pprof=false over the environment: pprof %v (%v)", c.Pprof, err)
	}
	if c, err = loadConfig([]string{"--pprof"}, env(nil), io.Discard); err != nil || !c.Pprof {
		t.Errorf("--pprof: %v (%v)", c.Pprof, err)
	}
	if _, err := loadConfig(nil, env(map[string]string{"QUORUMBUS_PPROF": "maybe"}), io.Discard); err == nil || !strings.Contains(err.Error(), "QUORUMBUS_PPROF") {
		t.Errorf("QUORUMBUS_PPROF=maybe: %v", err)
	}
	b, err := Config{Pprof: true}.effectiveJSON()
	if err != nil || !strings.Contains(string(b), `"pprof": true`) {
		t.Errorf("effective config %s (%v)", b, err)
	}
}

// TestConfigTLSSettings: the TLS settings come from flags, QUORUMBUS_* and file keys like
// every other; plain AMQP is turned off with "" (flag, file) or off (any source), but only
// when TLS is configured; a certificate needs its key.
func TestConfigTLSSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"tls-self-signed": true, "amqp-addr": "", "amqps-addr": "127.0.0.1:6671"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig([]string{"--config", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLSSelfSigned || c.AMQPAddr != "" || c.AMQPSAddr != "127.0.0.1:6671" {
		t.Fatalf("from the file: %+v", c)
	}
	c, err = loadConfig(nil, env(map[string]string{
		"QUORUMBUS_TLS_CERT": "/s/tls.crt", "QUORUMBUS_TLS_KEY": "/s/tls.key", "QUORUMBUS_AMQP_ADDR": "off",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLSCert != "/s/tls.crt" || c.TLSKey != "/s/tls.key" || c.AMQPAddr != "" {
		t.Fatalf("from the environment: %+v", c)
	}
	if c, err := loadConfig([]string{"--tls-self-signed", "--amqp-addr", ""}, env(nil), io.Discard); err != nil || !c.TLSSelfSigned || c.AMQPAddr != "" {
		t.Fatalf("from flags: %+v, %v", c, err)
	}
	if c, _ := loadConfig(nil, env(nil), io.Discard); c.AMQPSAddr != "127.0.0.1:5671" || c.tlsEnabled() {
		t.Fatalf("defaults: amqps-addr %q, TLS %v", c.AMQPSAddr, c.tlsEnabled())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--amqp-addr", ""}, "--amqp-addr is off and TLS is not configured"},
		{[]string{"--tls-cert", "/a.crt"}, "--tls-cert and --tls-key"},
		{[]string{"--tls-self-signed", "--tls-cert", "/a", "--tls-key", "/b"}, "cannot be combined"},
		{[]string{"--tls-self-signed", "--amqps-addr", "5671"}, "--amqps-addr"},
	} {
		_, err := loadConfig(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := loadConfig(nil, env(map[string]string{"QUORUMBUS_TLS_SELF_SIGNED": "maybe"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "QUORUMBUS_TLS_SELF_SIGNED") {
		t.Errorf("QUORUMBUS_TLS_SELF_SIGNED=maybe: err = %v", err)
	}
}

// TestConfigClusterCredentials: the cluster certificate files come as a set and need the
// secret, which keys gossip encryption; each is a flag, QUORUMBUS_* and a file key.
func TestConfigClusterCredentials(t *testing.T) {
	c, err := loadConfig(nil, env(map[string]string{
		"QUORUMBUS_CLUSTER_SECRET": "@/run/secrets/cluster", "QUORUMBUS_CLUSTER_TLS_CERT": "/c/tls.crt",
		"QUORUMBUS_CLUSTER_TLS_KEY": "/c/tls.key", "QUORUMBUS_CLUSTER_TLS_CA": "/c/ca.crt",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ClusterSecret != "@/run/secrets/cluster" || c.ClusterTLSCert != "/c/tls.crt" || c.ClusterTLSKey != "/c/tls.key" || c.ClusterTLSCA != "/c/ca.crt" {
		t.Fatalf("from the environment: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-tls-cert", "/a", "--cluster-tls-key", "/b", "--cluster-secret", "0123456789abcdef"}, "set all three"},
		{[]string{"--cluster-tls-cert", "/a", "--cluster-tls-key", "/b", "--cluster-tls-ca", "/c"}, "needs --cluster-secret"},
	} {
		_, err := loadConfig(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, _, _, err := clusterCredentials(Config{ClusterSecret: "short", NodeID: "n1"}); err == nil ||
		!strings.Contains(err.Error(), "--cluster-secret") {
		t.Errorf("a 5-byte secret: err = %v, want a --cluster-secret error", err)
	}
	tc, key, accept, err := clusterCredentials(Config{ClusterSecret: "0123456789abcdef", NodeID: "n1"})
	if err != nil || tc == nil || len(key) != 32 || len(accept) != 0 {
		t.Fatalf("derived credentials: %v, %v, %d-byte key", tc != nil, err, len(key))
	}
}

// TestConfigClusterSecretAccepted: the secrets accepted besides the current one are a
// comma-separated list in a flag and QUORUMBUS_*, an array (or such a string) in the
// file; each is a value or @FILE, is redacted by --check-config unless it names a file,
// and yields a gossip key. They need --cluster-secret, and a stray comma or a short
// secret is named.
func TestConfigClusterSecretAccepted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "next")
	if err := os.WriteFile(file, []byte("the next cluster secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{"@" + file, "an accepted secret of some length"}
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgFile, []byte(`{"cluster-secret": "the current cluster secret",
		"cluster-secret-accepted": ["@`+file+`", "an accepted secret of some length"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, load := range map[string]func() (Config, error){
		"flag": func() (Config, error) {
			return loadConfig([]string{"--cluster-secret", "the current cluster secret",
				"--cluster-secret-accepted", strings.Join(want, " , ")}, env(nil), io.Discard)
		},
		"env": func() (Config, error) {
			return loadConfig(nil, env(map[string]string{"QUORUMBUS_CLUSTER_SECRET": "the current cluster secret",
				"QUORUMBUS_CLUSTER_SECRET_ACCEPTED": strings.Join(want, ",")}), io.Discard)
		},
		"file": func() (Config, error) { return loadConfig([]string{"--config", cfgFile}, env(nil), io.Discard) },
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(c.ClusterSecretAccepted, want) {
			t.Fatalf("%s: accepted %q, want %q", name, c.ClusterSecretAccepted, want)
		}
		b, err := c.effectiveJSON()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "some length") || !strings.Contains(string(b), `"@`+file+`",`) {
			t.Fatalf("%s: accepted secrets not redacted, or the file not named:\n%s", name, b)
		}
		tc, key, accept, err := clusterCredentials(c)
		if err != nil || tc == nil || len(key) != 32 || len(accept) != 2 || len(accept[0]) != 32 ||
			bytes.Equal(accept[0], key) || bytes.Equal(accept[0], accept[1]) {
			t.Fatalf("%s: credentials: %v, %d-byte key, accepted keys %d", name, err, len(key), len(accept))
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-secret-accepted", "an accepted secret of some length"}, "needs --cluster-secret"},
		{[]string{"--cluster-secret", "the current cluster secret", "--cluster-secret-accepted", "an accepted secret of some length,"}, "empty entry"},
	} {
		if _, err := loadConfig(tc.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	_, _, _, err := clusterCredentials(Config{ClusterSecret: "the current cluster secret", NodeID: "n1",
		ClusterSecretAccepted: []string{"an accepted secret of some length", "short"}})
	if err == nil || !strings.Contains(err.Error(), "--cluster-secret-accepted entry 2") {
		t.Errorf("a 5-byte accepted secret: err = %v, want it named", err)
	}
}
