package ops

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quorumbus/quorumbus/test/harness"
)

// metricRef finds the metric names a PromQL expression uses: our series and the Go and
// process collectors'.
var metricRef = regexp.MustCompile(`\b(?:quorumbus|go)_[a-z0-9_]+`)

// exprsOf collects every "expr" string in a decoded JSON document (dashboard targets).
func exprsOf(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				exprsOf(x, out)
			}
		}
	case []any:
		for _, x := range v {
			exprsOf(x, out)
		}
	}
}

// TestMetricsDashboardAndAlertsMatchAScrape: every metric the Grafana
// dashboard (deploy/grafana/quorumbus.json) and the alert rules (deploy/prometheus and
// the chart's copy) query is in a scrape of a real two-node cluster after a little
// traffic, so neither can silently rot when a series is renamed; and the chart ships
// exactly the rules of deploy/prometheus/alerts.yaml.
func TestMetricsDashboardAndAlertsMatchAScrape(t *testing.T) {
	raw, err := os.ReadFile(repoFile(t, "deploy/grafana/quorumbus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash["uid"] != "quorumbus" || dash["title"] == "" {
		t.Errorf("dashboard uid %v title %v", dash["uid"], dash["title"])
	}
	var exprs []string
	exprsOf(dash, &exprs)
	if len(exprs) < 20 {
		t.Fatalf("only %d queries in the dashboard", len(exprs))
	}
	alerts, err := os.ReadFile(repoFile(t, "deploy/prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	chartAlerts, err := os.ReadFile(repoFile(t, "helm/quorumbus/files/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(chartAlerts) != string(alerts) {
		t.Error("helm/quorumbus/files/alerts.yaml differs from deploy/prometheus/alerts.yaml: copy it over")
	}
	var used []string
	for _, line := range strings.Split(string(alerts), "\n") {
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") {
			used = append(used, metricRef.FindAllString(l, -1)...)
		}
	}
	for _, e := range exprs {
		used = append(used, metricRef.FindAllString(e, -1)...)
	}

	// Two nodes and a replicated queue: forwarding RPCs, followers and leaders exist.
	c := harness.StartCluster(t, 2, harness.WithArgs("--replicas", "2"))
	ctx := ctxT(t, 90*time.Second)
	if _, err := c.Nodes[0].AdminClient(t).CreateQueue(ctx, "dash", nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes { // through both nodes: one of them forwards
		sendN(t, n.Client(t), "dash", 2, func(i int) *azservicebus.Message { return &azservicebus.Message{Body: []byte("x")} })
	}
	r, err := c.Nodes[1].Client(t).NewReceiverForQueue("dash", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReceiveMessages(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	bad, _ := c.Nodes[0].Client(t).NewReceiverForQueue("no-such-queue", nil)
	if _, err := bad.ReceiveMessages(ctx, 1, nil); err == nil {
		t.Fatal("receive from a missing queue succeeded")
	}

	have := map[string]bool{}
	for _, n := range c.Nodes {
		for name, mf := range scrape(t, n) {
			have[name] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					have[name+s] = true
				}
			}
		}
	}
	var missing []string
	seen := map[string]bool{}
	for _, m := range used {
		if !have[m] && !seen[m] {
			missing = append(missing, m)
		}
		seen[m] = true
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("queried but not in a scrape: %v", missing)
	}
	if len(seen) < 25 {
		t.Errorf("only %d distinct metrics queried: %v", len(seen), seen)
	}
}
