package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

// TestMetricsAndDebugEndpoints: GET /metrics and /debug/pprof/ reach their handlers
// when configured, with or without an Authorization header; without a Debug handler
// (no --pprof) the pprof path is an entity path like any other, which needs a token; a
// management API request (with api-version) for /metrics is an entity path too.
func TestMetricsAndDebugEndpoints(t *testing.T) {
	store := &memStore{st: meta.New(), now: time.Now, counts: map[admin.Entity]admin.RuntimeCounts{}}
	if err := store.Apply(context.Background(), &meta.SetNamespace{Name: "ns"}); err != nil {
		t.Fatal(err)
	}
	serve := func(debug bool) *httptest.Server {
		cfg := admin.DefaultConfig()
		cfg.Store = store
		cfg.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics here") })
		if debug {
			cfg.Debug = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pprof here") })
		}
		h, err := admin.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	get := func(srv *httptest.Server, path, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	on, off := serve(true), serve(false)
	if c, b := get(on, "/metrics", ""); c != 200 || b != "metrics here" {
		t.Errorf("/metrics: %d %q", c, b)
	}
	if c, b := get(on, "/debug/pprof/heap", ""); c != 200 || b != "pprof here" {
		t.Errorf("/debug/pprof/heap with --pprof: %d %q", c, b)
	}
	if c, b := get(off, "/debug/pprof/heap", ""); c == 200 || b == "pprof here" {
		t.Errorf("/debug/pprof/heap without --pprof: %d %q", c, b)
	}
	// A scraper or probe that sends credentials gets the same answer as one that does
	// not, whatever the credentials.
	for _, auth := range []string{"SharedAccessSignature sr=x&sig=y&se=1&skn=k", "Bearer abc", "Basic dXNlcjpwYXNz"} {
		if c, b := get(on, "/metrics", auth); c != 200 || b != "metrics here" {
			t.Errorf("/metrics with Authorization %q: %d %q", auth, c, b)
		}
		for _, p := range []string{"/healthz", "/readyz", "/health"} {
			if c, b := get(on, p, auth); c != 200 || !strings.Contains(b, "healthy") {
				t.Errorf("%s with Authorization %q: %d %q", p, auth, c, b)
			}
		}
	}
	// A management API request (it names its api-version) for /metrics is the entity
	// path, which needs a valid token.
	if c, b := get(on, "/metrics?api-version=2021-05", "SharedAccessSignature sr=x&sig=y&se=1&skn=k"); c != 401 || b == "metrics here" {
		t.Errorf("/metrics?api-version is not the entity path: %d %q", c, b)
	}
}

// TestHealthRefusalLogCarriesTrackingId: a refused admin request is logged with the
// TrackingId its error Detail shows the client, as an attribute of its own.
func TestHealthRefusalLogCarriesTrackingId(t *testing.T) {
	store := &memStore{st: meta.New(), now: time.Now, counts: map[admin.Entity]admin.RuntimeCounts{}}
	var logs strings.Builder
	cfg := admin.DefaultConfig()
	cfg.Store = store
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/q1", strings.NewReader("<entry/>"))) // no token: 401
	m := regexp.MustCompile(`TrackingId:([0-9a-f-]+)`).FindStringSubmatch(rec.Body.String())
	if rec.Code != http.StatusUnauthorized || m == nil {
		t.Fatalf("answer %d %s", rec.Code, rec.Body.String())
	}
	if !strings.Contains(logs.String(), `"tracking_id":"`+m[1]+`"`) {
		t.Errorf("log lacks tracking_id %s:\n%s", m[1], logs.String())
	}
}
