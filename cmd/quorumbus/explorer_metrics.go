package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cmd/internal/explorer"
)

// clusterMetrics implements explorer.Metrics: this node's registry, and every other
// member's /metrics on its admin address, read in parallel.
type clusterMetrics struct {
	self    string
	reg     prometheus.Gatherer
	cluster admin.Cluster // nil: a node without a cluster, only itself
	client  *http.Client
	scheme  string // of the admin API: http, or https with TLS
}

var _ explorer.Metrics = (*clusterMetrics)(nil)

// newClusterMetrics reads the peers' metrics over HTTPS when the admin API serves TLS,
// trusting the system's roots plus caFile or the node's own certificate (the nodes of a
// deployment share one, or one CA).
func newClusterMetrics(self string, reg prometheus.Gatherer, c admin.Cluster, tlsOn bool, trust string) *clusterMetrics {
	m := &clusterMetrics{self: self, reg: reg, cluster: c, scheme: "http", client: &http.Client{Timeout: 3 * time.Second}}
	if tlsOn {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if b, err := os.ReadFile(trust); err == nil {
			pool.AppendCertsFromPEM(b)
		}
		m.scheme = "https"
		m.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return m
}

func (m *clusterMetrics) NodeMetrics(ctx context.Context) []explorer.NodeMetrics {
	out := []explorer.NodeMetrics{m.own()}
	if m.cluster == nil {
		return out
	}
	st, err := m.cluster.ClusterStatus(ctx)
	if err != nil {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, mb := range st.Members {
		if mb.ID == m.self {
			continue
		}
		wg.Add(1)
		go func(mb admin.Member) {
			defer wg.Done()
			nm := explorer.NodeMetrics{Node: mb.ID}
			if mb.AdminAddr == "" {
				nm.Err = fmt.Errorf("%s is %s: no admin address known", mb.ID, mb.State)
			} else {
				nm.Families, nm.Err = m.scrape(ctx, mb.AdminAddr)
			}
			mu.Lock()
			out = append(out, nm)
			mu.Unlock()
		}(mb)
	}
	wg.Wait()
	return out
}

func (m *clusterMetrics) own() explorer.NodeMetrics {
	fs, err := m.reg.Gather()
	nm := explorer.NodeMetrics{Node: m.self, Families: map[string]*dto.MetricFamily{}, Err: err}
	for _, f := range fs {
		nm.Families[f.GetName()] = f
	}
	if err != nil {
		nm.Families = nil
	}
	return nm
}

func (m *clusterMetrics) scrape(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.scheme+"://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading its metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading its metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
}
