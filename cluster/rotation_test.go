package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/internal/certs"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// withSecrets sets a node's cluster credentials as the binary derives them from
// --cluster-secret current and --cluster-secret-accepted accepted.
func withSecrets(t testing.TB, c *Config, current string, accepted ...string) {
	t.Helper()
	var acc [][]byte
	for _, a := range accepted {
		key, err := certs.GossipKey([]byte(a))
		if err != nil {
			t.Fatal(err)
		}
		acc = append(acc, []byte(a))
		c.GossipAcceptKeys = append(c.GossipAcceptKeys, key)
	}
	tc, err := certs.SecretClusterTLS([]byte(current), c.NodeID, time.Now(), acc...)
	if err != nil {
		t.Fatal(err)
	}
	key, err := certs.GossipKey([]byte(current))
	if err != nil {
		t.Fatal(err)
	}
	c.TLS, c.GossipKey = tc, key
}

// Midway through a rotation from A to B, a node that uses A and accepts B and one that
// uses B and accepts A form one cluster: gossip sealed with either key opens on both
// (memberlist's keyring), and mutual TLS succeeds both ways.
func TestNodesOfAdjacentRotationStepsFormACluster(t *testing.T) {
	const a, b = "cluster secret A, the old one", "cluster secret B, the new one"
	nodes := startClusterWith(t, 2, 2, func(c *Config) {
		if c.NodeID == "n1" {
			withSecrets(t, c, a, b)
		} else {
			withSecrets(t, c, b, a)
		}
	})
	testutil.WaitFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			g, r := memberIDs(n)
			if len(g) != 2 || len(r) != 2 {
				return fmt.Errorf("%s sees gossip members %v, Raft voters %v; want both nodes", n.NodeID(), g, r)
			}
		}
		return nil
	})
}

// GossipAcceptKeys need a primary key and a memberlist key size each.
func TestConfigValidateGossipAcceptKeys(t *testing.T) {
	key := make([]byte, 32)
	for _, tc := range []struct {
		name    string
		primary []byte
		accept  [][]byte
		want    string // "" for valid
	}{
		{"primary and accepted", key, [][]byte{make([]byte, 16), make([]byte, 32)}, ""},
		{"accepted without primary", nil, [][]byte{key}, "need a GossipKey"},
		{"accepted of a bad size", key, [][]byte{key, make([]byte, 10)}, "GossipAcceptKeys[1] must be 16, 24 or 32 bytes"},
	} {
		c := testConfig(t.TempDir())
		c.GossipKey, c.GossipAcceptKeys = tc.primary, tc.accept
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
	}
}
