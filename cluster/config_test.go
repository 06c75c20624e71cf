package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Start fills in nothing: a setting left at zero that must be above it is an error
// naming the setting, not a default taken behind the caller's back (DefaultConfig holds
// the defaults).
func TestStartRejectsUnsetSettings(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.BootstrapExpect = 0 }, "BootstrapExpect 0"},
		{func(c *Config) { c.Replicas = 0 }, "Replicas 0"},
		{func(c *Config) { c.DeadNodeGrace = 0 }, "DeadNodeGrace 0s"},
		{func(c *Config) { c.ReadyTimeout = 0 }, "ReadyTimeout 0s"},
		{func(c *Config) { c.TxnPrepareWindow = 0 }, "TxnPrepareWindow 0s"},
		{func(c *Config) { c.TxnRecoveryInterval = 0 }, "TxnRecoveryInterval 0s"},
		{func(c *Config) { c.ServeWait = 0 }, "ServeWait 0s"},
		{func(c *Config) { c.Raft.Pipeline = 257 }, "Raft.Pipeline 257"},
		{func(c *Config) { c.Raft.QuiesceAfter = -time.Second }, "Raft.QuiesceAfter -1s"},
	} {
		c := testConfig(t.TempDir())
		tc.edit(&c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := Start(ctx, c)
		cancel()
		if err == nil {
			closeNode(t, n)
			t.Errorf("Start accepted a config without %s", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start: %v, want it to name %q", err, tc.want)
		}
	}
}

// DefaultConfig, given a data directory, is a config Start accepts as it is.
func TestDefaultConfigValidates(t *testing.T) {
	c := DefaultConfig()
	c.DataDir = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
