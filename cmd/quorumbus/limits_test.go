package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cmd/internal/httplimit"
)

// TestAMQPLimitsFromEverySource: each AMQP limit is a flag, a QUORUMBUS_ variable
// and a config file key, defaults to amqp.DefaultConfig's, and reaches the
// amqp.Config the node starts with (sessions as channel-max too).
func TestAMQPLimitsFromEverySource(t *testing.T) {
	c, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := amqp.DefaultConfig()
	got := amqp.DefaultConfig()
	c.AMQPLimits.apply(got)
	if got.MaxConnections != def.MaxConnections || got.MaxSessions != def.MaxSessions || got.ChannelMax != def.ChannelMax ||
		got.MaxLinks != def.MaxLinks || got.MaxFrameSize != def.MaxFrameSize || got.UnauthenticatedTimeout != def.UnauthenticatedTimeout {
		t.Fatalf("defaults differ from amqp.DefaultConfig: %+v", c.AMQPLimits)
	}

	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"amqp-max-connections": 50, "amqp-max-app-properties-size": 1000,
		"amqp-claim-recheck-interval": "5s", "amqp-txn-timeout": "30s",
		"amqp-max-unsettled-per-conn": 300}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = loadConfig([]string{"--amqp-max-sessions", "16", "--amqp-max-frame-size=4096", "--amqp-unauthenticated-timeout", "10s"},
		env(map[string]string{
			"QUORUMBUS_CONFIG":                         file,
			"QUORUMBUS_AMQP_MAX_LINKS_PER_SESSION":     "7",
			"QUORUMBUS_AMQP_MAX_UNAUTHENTICATED_LINKS": "3",
			"QUORUMBUS_AMQP_MAX_APP_PROPERTY_DEPTH":    "0",
			"QUORUMBUS_AMQP_TXN_MAX_OPERATIONS":        "20",
			"QUORUMBUS_AMQP_MAX_UNSETTLED_PER_LINK":    "100",
			"QUORUMBUS_AMQP_MAX_CONN_OUTGOING_MB":      "4",
		}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ac := amqp.DefaultConfig()
	c.AMQPLimits.apply(ac)
	if ac.MaxConnections != 50 || ac.MaxAppPropertiesSize != 1000 || ac.ClaimRecheckInterval != 5*time.Second ||
		ac.MaxSessions != 16 || ac.ChannelMax != 15 || ac.MaxFrameSize != 4096 || ac.UnauthenticatedTimeout != 10*time.Second ||
		ac.MaxLinks != 7 || ac.MaxUnauthenticatedLinks != 3 || ac.MaxAppPropertyDepth != 0 ||
		ac.TxnTimeout != 30*time.Second || ac.TxnMaxOperations != 20 ||
		ac.MaxUnsettledPerLink != 100 || ac.MaxUnsettledPerConn != 300 || ac.MaxConnOutgoing != 4<<20 {
		t.Fatalf("limits not applied: %+v", c.AMQPLimits)
	}
	if err := ac.Validate(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--amqp-max-connections", "0"}, "--amqp-max-connections 0"},
		{[]string{"--amqp-max-sessions", "70000"}, "--amqp-max-sessions 70000"},
		{[]string{"--amqp-max-frame-size", "100"}, "--amqp-max-frame-size 100"},
		{[]string{"--amqp-unauthenticated-timeout", "-1s"}, "--amqp-unauthenticated-timeout"},
		{[]string{"--amqp-txn-timeout", "0s"}, "--amqp-txn-timeout"},
		{[]string{"--amqp-txn-max-operations", "0"}, "--amqp-txn-max-operations 0"},
		{[]string{"--amqp-max-unsettled-per-link", "0"}, "--amqp-max-unsettled-per-link 0"},
		{[]string{"--amqp-max-conn-outgoing-mb", "0"}, "--amqp-max-conn-outgoing-mb 0"},
	} {
		_, err := loadConfig(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestHTTPLimitsFromEverySource: each HTTP limit is a flag, a QUORUMBUS_ variable and a
// config file key, defaults to httplimit.DefaultConfig's, and a value that cannot work
// is refused naming its flag.
func TestHTTPLimitsFromEverySource(t *testing.T) {
	c, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPLimits != httplimit.DefaultConfig() {
		t.Fatalf("defaults %+v, want httplimit.DefaultConfig's", c.HTTPLimits)
	}
	file := filepath.Join(t.TempDir(), "qb.json")
	if err := os.WriteFile(file, []byte(`{"http-max-connections": 50, "http-idle-timeout": "5s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = loadConfig([]string{"--http-read-timeout", "2s"}, env(map[string]string{
		"QUORUMBUS_CONFIG":             file,
		"QUORUMBUS_HTTP_WRITE_TIMEOUT": "3s",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := httplimit.Config{MaxConnections: 50, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, IdleTimeout: 5 * time.Second}
	if c.HTTPLimits != want {
		t.Fatalf("got %+v, want %+v", c.HTTPLimits, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-max-connections", "0"}, "--http-max-connections 0"},
		{[]string{"--http-read-timeout", "0s"}, "--http-read-timeout"},
		{[]string{"--http-write-timeout", "-1s"}, "--http-write-timeout"},
		{[]string{"--http-idle-timeout", "0s"}, "--http-idle-timeout"},
	} {
		_, err := loadConfig(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}
