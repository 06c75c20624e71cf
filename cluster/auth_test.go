package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/internal/certs"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// withSecret sets a node's cluster credentials as the binary derives them from
// --cluster-secret: mutual TLS from the derived CA and the derived gossip key.
func withSecret(t testing.TB, secret string) func(*Config) {
	return func(c *Config) {
		tc, err := certs.SecretClusterTLS([]byte(secret), c.NodeID, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key, err := certs.GossipKey([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		c.TLS, c.GossipKey = tc, key
	}
}

// memberIDs are the members n sees through gossip and in the metadata group's Raft
// configuration.
func memberIDs(n *Node) (gossip, raftIDs []string) {
	for _, m := range n.gossip.Members() {
		gossip = append(gossip, m.ID)
	}
	for _, s := range n.meta.Servers() {
		raftIDs = append(raftIDs, string(s.ID))
	}
	return gossip, raftIDs
}

// closedByPeer reports whether reads on c end because the peer closed the connection
// (EOF, reset, or a TLS alert), as opposed to the deadline passing while the peer keeps
// it open.
func closedByPeer(c net.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		switch {
		case err == nil:
			continue // e.g. an alert record before the close
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("the cluster port kept the connection open for %v", within)
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			return nil
		}
		var alert tls.AlertError
		if errors.As(err, &alert) || strings.Contains(err.Error(), "remote error") {
			return nil
		}
		return fmt.Errorf("read: %v", err)
	}
}

// TestClusterAuthSecret: two nodes sharing a cluster secret form a cluster over mutual
// TLS with encrypted gossip. A third node with another secret, trying to join them, is
// refused (its Start fails) and never appears in gossip or the metadata group; a raw
// TCP connection that names the RPC route without TLS, and a TLS client with a
// certificate from another CA, are closed.
func TestClusterAuthSecret(t *testing.T) {
	const secret = "correct horse battery staple, 32b"
	nodes := startClusterWith(t, 2, 2, withSecret(t, secret))
	testutil.WaitFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			g, r := memberIDs(n)
			if len(g) != 2 || len(r) != 2 {
				return fmt.Errorf("%s sees gossip members %v, Raft voters %v; want both nodes", n.NodeID(), g, r)
			}
		}
		return nil
	})

	t.Run("WrongSecretCannotJoin", func(t *testing.T) {
		c := testConfig(t.TempDir())
		c.NodeID = "intruder"
		c.ClusterAddr = testutil.FreeAddr(t)
		c.Join = []string{nodes[0].ClusterAddr(), nodes[1].ClusterAddr()}
		withSecret(t, "another secret, also long enough")(&c)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := Start(ctx, c)
		if err == nil {
			closeNode(t, n)
			t.Fatal("a node with the wrong cluster secret started as a member")
		}
		for _, nd := range nodes {
			g, r := memberIDs(nd)
			if strings.Contains(strings.Join(g, ","), "intruder") || strings.Contains(strings.Join(r, ","), "intruder") {
				t.Fatalf("%s lists the intruder: gossip %v, Raft %v", nd.NodeID(), g, r)
			}
		}
	})

	t.Run("WrongGossipKeyCannotJoin", func(t *testing.T) {
		// A certificate from the right CA is not enough: gossip is sealed with the key
		// derived from the secret, and memberlist drops what does not open with it.
		c := testConfig(t.TempDir())
		c.NodeID = "half-intruder"
		c.ClusterAddr = testutil.FreeAddr(t)
		c.Join = []string{nodes[0].ClusterAddr(), nodes[1].ClusterAddr()}
		withSecret(t, secret)(&c)
		other, err := certs.GossipKey([]byte("another secret, also long enough"))
		if err != nil {
			t.Fatal(err)
		}
		c.GossipKey = other
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := Start(ctx, c)
		if err == nil {
			closeNode(t, n)
			t.Fatal("a node with the cluster CA but another gossip key started as a member")
		}
		for _, nd := range nodes {
			if g, r := memberIDs(nd); strings.Contains(strings.Join(g, ",")+strings.Join(r, ","), "half-intruder") {
				t.Fatalf("%s lists the half-intruder: gossip %v, Raft %v", nd.NodeID(), g, r)
			}
		}
	})

	t.Run("PlainTCPIsClosed", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", nodes[0].ClusterAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The mux header of the forwarding RPC route (type 2, id 0), then a request.
		if _, err := c.Write([]byte{2, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		if err := closedByPeer(c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ForeignCertificateIsClosed", func(t *testing.T) {
		foreign, err := certs.SecretClusterTLS([]byte("another secret, also long enough"), "intruder", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// Trust any server, so that only the node's check of the client certificate
		// decides.
		foreign.VerifyPeerCertificate = nil
		d := &tls.Dialer{Config: foreign, NetDialer: &net.Dialer{Timeout: 5 * time.Second}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", nodes[0].ClusterAddr())
		if err != nil {
			t.Fatalf("client side of the handshake: %v", err)
		}
		defer c.Close()
		// TLS 1.3: the server checks the client certificate after the client's side of
		// the handshake is done; it then refuses and closes without reading the route.
		_, _ = c.Write([]byte{2, 0, 0, 0, 0})
		if err := closedByPeer(c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
