package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/internal/certs"
	"github.com/quorumbus/quorumbus/internal/sas"
	"github.com/quorumbus/quorumbus/test/harness"
)

// trusting is a client TLS configuration that trusts the CA in caFile only. ServerName
// is set because the tests' endpoints carry a port (sb://localhost:PORT/), which the SDK
// keeps in the host name it verifies; on the standard port 5671 (sb://host/) it is not
// needed.
func trusting(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	pool, err := certs.LoadPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: "localhost"}
}

// withEndpoint replaces the Endpoint of a connection string with sb://localhost:<port of addr>/.
func withEndpoint(t *testing.T, connStr, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, p := range strings.Split(connStr, ";") {
		if strings.HasPrefix(p, "Endpoint=") {
			p = "Endpoint=sb://localhost:" + port + "/"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ";")
}

// tlsAdmin is an azservicebus/admin client speaking HTTPS to the node's admin port, with
// a normal connection string whose endpoint is that port.
func tlsAdmin(t *testing.T, n *harness.Node, cfg *tls.Config) *admin.Client {
	t.Helper()
	c, err := admin.NewClientFromConnectionString(withEndpoint(t, n.TLSConnectionString, n.Admin), &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}},
			Retry:     policy.RetryOptions{MaxRetries: -1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tlsClient(t *testing.T, connStr string, opts *azservicebus.ClientOptions) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(connStr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// sendReceive sends one message to queue q and receives and completes it.
func sendReceive(t *testing.T, c *azservicebus.Client, q, text string) {
	t.Helper()
	ctx := testCtx(t)
	s, err := c.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(text)}, nil); err != nil {
		t.Fatalf("send over TLS: %v", err)
	}
	r, err := c.NewReceiverForQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	m := receiveOne(t, r, 30*time.Second)
	if string(m.Body) != text {
		t.Fatalf("received %d bytes %.40q, want %d bytes %.40q", len(m.Body), m.Body, len(text), text)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// TestTLSSelfSignedNode: a node started with --tls-self-signed and plain AMQP off
// serves the official SDK over AMQPS with a normal (non-emulator) connection string,
// the CA passed through ClientOptions.TLSConfig; the admin client creates the queue over
// HTTPS; a client that does not trust the CA, a plain AMQP client and TLS 1.1 are
// refused.
func TestTLSSelfSignedNode(t *testing.T) {
	n := harness.Start(t, "--tls-self-signed", "--amqp-addr", "")
	if n.CA == "" || n.AMQPS == "" || !strings.HasPrefix(n.AdminURL, "https://") {
		t.Fatalf("endpoints %+v: want a CA file, an AMQPS listener and an https admin URL", n.Endpoints)
	}
	if strings.Contains(n.TLSConnectionString, "UseDevelopmentEmulator") ||
		!strings.HasPrefix(n.TLSConnectionString, "Endpoint=sb://localhost:") {
		t.Fatalf("TLS connection string %q: want a normal sb://localhost:PORT/ endpoint", n.TLSConnectionString)
	}
	if !strings.Contains(n.Log(), n.CA) {
		t.Errorf("the node did not print its CA path %s at start:\n%s", n.CA, n.Log())
	}
	cfg := trusting(t, n.CA)

	q := name("tls")
	if _, err := tlsAdmin(t, n, cfg).CreateQueue(testCtx(t), q, nil); err != nil {
		t.Fatalf("create queue over HTTPS: %v", err)
	}
	c := tlsClient(t, n.TLSConnectionString, &azservicebus.ClientOptions{TLSConfig: cfg})
	sendReceive(t, c, q, "over amqps")

	t.Run("UntrustedCAIsRefused", func(t *testing.T) {
		c := tlsClient(t, n.TLSConnectionString, &azservicebus.ClientOptions{
			TLSConfig:    &tls.Config{ServerName: "localhost"}, // the system roots
			RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
		})
		s, err := c.NewSender(q, nil)
		if err == nil {
			err = s.SendMessage(testCtx(t), &azservicebus.Message{Body: []byte("x")}, nil)
		}
		var uerr x509.UnknownAuthorityError
		if !errors.As(err, &uerr) && (err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority")) {
			t.Fatalf("send trusting the system roots only: err = %v, want an unknown-authority error", err)
		}
	})
	t.Run("TLS11IsRefused", func(t *testing.T) {
		for _, addr := range []string{n.AMQPS, n.Admin} {
			old := cfg.Clone()
			old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			conn, err := tls.Dial("tcp", addr, old)
			if err == nil {
				conn.Close()
				t.Fatalf("%s accepted a TLS 1.1 handshake", addr)
			}
		}
	})
	t.Run("Explorer", func(t *testing.T) {
		// The explorer's message API works on a node without plain AMQP: it reaches the
		// broker in-process, not through a listener. Send from it, then peek it back.
		var keyName, key string
		for _, kv := range strings.Split(n.TLSConnectionString, ";") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "SharedAccessKeyName":
				keyName = v
			case "SharedAccessKey":
				key = v
			}
		}
		token := sas.Format(n.AdminURL+"/", keyName, key, time.Now().Add(time.Hour))
		hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cfg}}
		call := func(path, body string) string {
			t.Helper()
			req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, n.AdminURL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", path, err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b.String())
			}
			return b.String()
		}
		call("/$ui/api/send", fmt.Sprintf(`{"entity": %q, "body": "from the explorer"}`, q))
		var peeked struct {
			Messages []struct {
				Body []byte `json:"body"`
			} `json:"messages"`
		}
		if err := json.Unmarshal([]byte(call("/$ui/api/peek", fmt.Sprintf(`{"entity": %q}`, q))), &peeked); err != nil {
			t.Fatal(err)
		}
		if len(peeked.Messages) != 1 || string(peeked.Messages[0].Body) != "from the explorer" {
			t.Fatalf("peek after an explorer send: %+v", peeked.Messages)
		}
		// The SDK over AMQPS receives what the explorer sent, and the queue is empty again.
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		m := receiveOne(t, r, 30*time.Second)
		if string(m.Body) != "from the explorer" {
			t.Fatalf("received %q, want the explorer's message", m.Body)
		}
		if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
			t.Fatalf("complete: %v", err)
		}
	})
	t.Run("Qbctl", func(t *testing.T) {
		// qbctl next to the data directory trusts the development CA: the admin API
		// over HTTPS, and messages over AMQPS (the only AMQP listener).
		out, err := n.Qbctl(t, "queue", "list")
		if err != nil || !strings.Contains(out, q) {
			t.Fatalf("qbctl queue list over HTTPS: %v\n%s", err, out)
		}
		if out, err := n.Qbctl(t, "send", q, "--body", "from qbctl"); err != nil {
			t.Fatalf("qbctl send over AMQPS: %v\n%s", err, out)
		}
		out, err = n.Qbctl(t, "receive", q, "--expect", "from qbctl")
		if err != nil {
			t.Fatalf("qbctl receive over AMQPS: %v\n%s", err, out)
		}
	})
	t.Run("PlainAMQPIsOff", func(t *testing.T) {
		if n.AMQP != n.AMQPS {
			t.Fatalf("endpoints amqp %s, amqps %s: with --amqp-addr \"\" the only AMQP listener is AMQPS", n.AMQP, n.AMQPS)
		}
		if strings.Contains(n.Log(), "  AMQP      ") {
			t.Fatalf("the node announced a plain AMQP listener:\n%s", n.Log())
		}
	})
}

// copyPair writes the certificate and key of f to certFile and keyFile, each through
// a temporary file and a rename, as a tool replacing certificates would.
func copyPair(t *testing.T, f certs.SelfSignedFiles, certFile, keyFile string) {
	t.Helper()
	for from, to := range map[string]string{f.Cert: certFile, f.Key: keyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".tmp", to); err != nil {
			t.Fatal(err)
		}
	}
}

// servedLeaf is the certificate a TLS listener presents, verified against cfg.
func servedLeaf(addr string, cfg *tls.Config) ([]byte, error) {
	d := &tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 5 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, nil
}

// TestTLSCertificateReloadedFromFiles: a node started with --tls-cert/--tls-key serves
// a new certificate on AMQPS and HTTPS as soon as the files are replaced, without a
// restart, and the SDK connects trusting only the new CA.
func TestTLSCertificateReloadedFromFiles(t *testing.T) {
	now := time.Now()
	a, err := certs.SelfSigned(filepath.Join(t.TempDir(), "a"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := certs.SelfSigned(filepath.Join(t.TempDir(), "b"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyPair(t, a, certFile, keyFile)
	n := harness.Start(t, "--tls-cert", certFile, "--tls-key", keyFile)
	cfgA, cfgB := trusting(t, a.CA), trusting(t, b.CA)
	for _, addr := range []string{n.AMQPS, n.Admin} {
		if _, err := servedLeaf(addr, cfgA); err != nil {
			t.Fatalf("%s before the swap, trusting CA a: %v", addr, err)
		}
	}
	q := name("reload")
	if _, err := tlsAdmin(t, n, cfgA).CreateQueue(testCtx(t), q, nil); err != nil {
		t.Fatalf("create queue over HTTPS: %v", err)
	}

	copyPair(t, b, certFile, keyFile)
	wantB := certDER(t, b.Cert)
	for _, addr := range []string{n.AMQPS, n.Admin} {
		harness.WaitFor(t, 20*time.Second, func() error {
			raw, err := servedLeaf(addr, cfgB)
			if err != nil {
				return err
			}
			if !bytes.Equal(raw, wantB) {
				return fmt.Errorf("%s serves a certificate other than b's", addr)
			}
			return nil
		})
	}
	c := tlsClient(t, n.TLSConnectionString, &azservicebus.ClientOptions{TLSConfig: cfgB})
	sendReceive(t, c, q, "after rotation")
}

// certDER is the first certificate of a PEM file.
func certDER(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	return blk.Bytes
}
