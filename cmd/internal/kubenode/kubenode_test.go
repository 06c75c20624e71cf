package kubenode_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/kubenode"
)

// fakeAPI is an API server holding nodes, answering GET /api/v1/nodes/NAME to the
// bearer token "tok" only, over TLS; status, when set, answers everything instead.
func fakeAPI(t *testing.T, nodes map[string]string, status int) (kubenode.Config, *[]string) {
	t.Helper()
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		if status != 0 {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes \"n1\" is forbidden: User \"system:serviceaccount:messaging:quorumbus\" cannot get resource \"nodes\"","code":403}`))
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","message":"Unauthorized","code":401}`))
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
		labels, found := nodes[name]
		if !ok || !found || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","message":"nodes \"` + name + `\" not found","code":404}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"` + name + `","labels":{` + labels + `}},"status":{}}`))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubenode.Config{Server: srv.URL, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"), Timeout: 5 * time.Second}, &seen
}

func TestLabel(t *testing.T) {
	cfg, seen := fakeAPI(t, map[string]string{
		"n1": `"kubernetes.io/hostname":"n1","topology.kubernetes.io/zone":"eu-west-1a"`,
		"n2": `"kubernetes.io/hostname":"n2"`,
	}, 0)
	ctx := context.Background()
	v, ok, err := kubenode.Label(ctx, cfg, "n1", kubenode.ZoneLabel)
	if err != nil || !ok || v != "eu-west-1a" {
		t.Fatalf("n1: %q %v %v, want eu-west-1a", v, ok, err)
	}
	if (*seen)[0] != "GET /api/v1/nodes/n1" {
		t.Errorf("requests %q", *seen)
	}
	// A node without the label: no zone, no error.
	if v, ok, err := kubenode.Label(ctx, cfg, "n2", kubenode.ZoneLabel); err != nil || ok || v != "" {
		t.Fatalf("n2: %q %v %v, want no label", v, ok, err)
	}
	// A node that does not exist: an error naming it, not worth retrying.
	_, _, err = kubenode.Label(ctx, cfg, "n3", kubenode.ZoneLabel)
	if err == nil || !strings.Contains(err.Error(), `nodes "n3" not found`) || errors.Is(err, kubenode.ErrRetryable) {
		t.Fatalf("n3: %v", err)
	}
	// A bad name never reaches the server.
	if _, _, err := kubenode.Label(ctx, cfg, "../secrets", kubenode.ZoneLabel); err == nil {
		t.Fatal("a node name with a slash was accepted")
	}
	// A wrong token: refused, with what the account needs.
	if err := os.WriteFile(cfg.TokenFile, []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = kubenode.Label(ctx, cfg, "n1", kubenode.ZoneLabel)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "get on nodes") || errors.Is(err, kubenode.ErrRetryable) {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestLabelRefusedOrUnavailable(t *testing.T) {
	ctx := context.Background()
	cfg, _ := fakeAPI(t, nil, http.StatusForbidden)
	_, _, err := kubenode.Label(ctx, cfg, "n1", kubenode.ZoneLabel)
	if err == nil || !strings.Contains(err.Error(), `cannot get resource "nodes"`) || !strings.Contains(err.Error(), "ClusterRole") || errors.Is(err, kubenode.ErrRetryable) {
		t.Fatalf("403: %v", err)
	}
	cfg, _ = fakeAPI(t, nil, http.StatusServiceUnavailable)
	if _, _, err := kubenode.Label(ctx, cfg, "n1", kubenode.ZoneLabel); !errors.Is(err, kubenode.ErrRetryable) {
		t.Fatalf("503: %v, want retryable", err)
	}
	// A server whose certificate the CA file does not sign is not trusted.
	other, _ := fakeAPI(t, map[string]string{"n1": `"topology.kubernetes.io/zone":"a"`}, 0)
	other.CAFile = otherCA(t)
	if _, _, err := kubenode.Label(ctx, other, "n1", kubenode.ZoneLabel); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server: %v", err)
	}
	// Files missing: the error says what.
	missing := cfg
	missing.TokenFile = filepath.Join(t.TempDir(), "token")
	if _, _, err := kubenode.Label(ctx, missing, "n1", kubenode.ZoneLabel); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("no token: %v", err)
	}
}

func TestInCluster(t *testing.T) {
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
	c, err := kubenode.InCluster(func(k string) string { return env[k] })
	if err != nil || c.Server != "https://[fd00::1]:443" || c.TokenFile != kubenode.ServiceAccountDir+"/token" || c.CAFile != kubenode.ServiceAccountDir+"/ca.crt" {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := kubenode.InCluster(func(string) string { return "" }); !errors.Is(err, kubenode.ErrNotInCluster) {
		t.Fatalf("outside a pod: %v", err)
	}
}

// otherCA writes a CA certificate that signed nothing the test servers present.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
