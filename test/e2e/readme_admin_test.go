package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// readmeAdmin is the README quick start's Go admin snippet, as a user copies it: the
// administration client from the TLS connection string the node prints, trusting the
// node's CA file. Keep the two in step.
func readmeAdmin(ctx context.Context, connStr, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}

	ac, err := admin.NewClientFromConnectionString(connStr, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: httpClient},
	})
	if err != nil {
		return err
	}
	_, err = ac.CreateQueue(ctx, "orders", nil)
	return err
}

// TestReadmeAdminSnippet: the Go administration client works from the TLS connection
// string (the AMQPS port serves the admin API too, told apart by the first bytes after
// the handshake), and the data-plane client uses the same string on the same port.
func TestReadmeAdminSnippet(t *testing.T) {
	n := harness.Start(t, "--tls-self-signed")
	ctx := testCtx(t)
	if err := readmeAdmin(ctx, n.TLSConnectionString, n.CA); err != nil {
		t.Fatalf("README admin snippet: %v", err)
	}
	cfg := trusting(t, n.CA)
	props, err := tlsAdmin(t, n, cfg).GetQueue(ctx, "orders", nil)
	if err != nil || props == nil {
		t.Fatalf("the queue the snippet created: %v, %v", props, err)
	}
	c := tlsClient(t, n.TLSConnectionString, &azservicebus.ClientOptions{TLSConfig: cfg})
	sendReceive(t, c, "orders", "after the admin snippet")
}

// plainHTTP does what the .NET administration client does with UseDevelopmentEmulator=true
// (and what the official emulator's users point at its port 5300): plain HTTP to the
// Endpoint's host and port, nothing else changed.
type plainHTTP struct{}

func (plainHTTP) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme = "http"
	return http.DefaultTransport.RoundTrip(req)
}

// TestEmulatorStringServesAdminOverHTTP: the connection string `make run` prints (plain
// AMQP port, UseDevelopmentEmulator=true) reaches the admin API when the client speaks
// plain HTTP to its Endpoint, and the same port keeps serving AMQP.
func TestEmulatorStringServesAdminOverHTTP(t *testing.T) {
	n := harness.Start(t)
	ctx := testCtx(t)
	ac, err := admin.NewClientFromConnectionString(n.ConnectionString, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: plainHTTP{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := name("emuadmin")
	if _, err := ac.CreateQueue(ctx, q, nil); err != nil {
		t.Fatalf("create queue over HTTP on the AMQP port: %v", err)
	}
	c := tlsClient(t, n.ConnectionString, nil) // plain AMQP: the emulator flag
	sendReceive(t, c, q, "after the admin call on the same port")
}
