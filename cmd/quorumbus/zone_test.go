package main

import (
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/kubenode"
)

// kubeAPI is an API server answering GET /api/v1/nodes/NAME with answer(try).
func kubeAPI(t *testing.T, answer func(try int32, w http.ResponseWriter)) kubenode.Config {
	t.Helper()
	var tries atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		answer(tries.Add(1), w)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubenode.Config{Server: srv.URL, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"), Timeout: 5 * time.Second}
}

// --zone-from-node: the node's zone label, after an API server that answers 503 at
// first (a control plane restarting); a node without the label gives no zone; a
// refusal fails at once with the reason; an API server that never answers fails
// after the wait.
func TestZoneFromNode(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	kc := kubeAPI(t, func(try int32, w http.ResponseWriter) {
		if try < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"metadata":{"name":"n1","labels":{"topology.kubernetes.io/zone":"westeurope-2"}}}`)
	})
	if z, err := zoneFromNode(ctx, kc, "n1", time.Minute, log); err != nil || z != "westeurope-2" {
		t.Fatalf("zone %q, %v; want westeurope-2", z, err)
	}

	kc = kubeAPI(t, func(_ int32, w http.ResponseWriter) {
		_, _ = io.WriteString(w, `{"metadata":{"name":"n1","labels":{"kubernetes.io/os":"linux"}}}`)
	})
	if z, err := zoneFromNode(ctx, kc, "n1", time.Minute, log); err != nil || z != "" {
		t.Fatalf("no label: zone %q, %v", z, err)
	}

	var forbidden atomic.Int32
	kc = kubeAPI(t, func(_ int32, w http.ResponseWriter) {
		forbidden.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","message":"nodes \"n1\" is forbidden: User \"system:serviceaccount:messaging:default\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"}`)
	})
	_, err := zoneFromNode(ctx, kc, "n1", time.Minute, log)
	if err == nil || !strings.Contains(err.Error(), "--zone-from-node") || !strings.Contains(err.Error(), "cannot get resource") || forbidden.Load() != 1 {
		t.Fatalf("403: %v after %d tries, want one try and the reason", err, forbidden.Load())
	}

	kc = kubeAPI(t, func(_ int32, w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) })
	if _, err := zoneFromNode(ctx, kc, "n1", 700*time.Millisecond, log); err == nil || !strings.Contains(err.Error(), "no answer within 700ms") {
		t.Fatalf("never answering: %v", err)
	}
}
