package main

import (
	"io"
	"os"
	"path/filepath"
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
