package harness

import (
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a node's /metrics, parsed: the metric families by name.
type Metrics map[string]*dto.MetricFamily

// ScrapeMetrics reads and parses the /metrics of the node whose admin API listens at
// admin (HOST:PORT), waiting at most timeout.
func ScrapeMetrics(admin string, timeout time.Duration) (Metrics, error) {
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("/metrics of %s: %d %s", admin, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics of %s does not parse: %v", admin, err)
	}
	return mfs, nil
}

// Each calls fn with the labels and value of every series of name (a histogram's value
// is its sample count).
func (m Metrics) Each(name string, fn func(labels map[string]string, v float64)) {
	mf := m[name]
	if mf == nil {
		return
	}
	for _, s := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range s.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		var v float64
		switch {
		case s.Gauge != nil:
			v = s.GetGauge().GetValue()
		case s.Counter != nil:
			v = s.GetCounter().GetValue()
		case s.Untyped != nil:
			v = s.GetUntyped().GetValue()
		case s.Histogram != nil:
			v = float64(s.GetHistogram().GetSampleCount())
		}
		fn(labels, v)
	}
}

// Sum is the value of name{labels...} (label name, value pairs), summed over the series
// that match (a queue's partitions, say), or an error when none does.
func (m Metrics) Sum(name string, labels ...string) (float64, error) {
	if m[name] == nil {
		return 0, fmt.Errorf("no metric %s", name)
	}
	sum, found := 0.0, false
	m.Each(name, func(got map[string]string, v float64) {
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				return
			}
		}
		sum, found = sum+v, true
	})
	if !found {
		return 0, fmt.Errorf("no series %s%v", name, labels)
	}
	return sum, nil
}
