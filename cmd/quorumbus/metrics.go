package main

import (
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cmd/internal/version"
)

// amqpCollector exports the AMQP listener's Stats at scrape time. It lives here, in
// the wiring, because package amqp imports no metrics library.
type amqpCollector struct {
	srv interface{ Stats() amqp.Stats }
}

var (
	descConns     = prometheus.NewDesc("quorumbus_amqp_connections", "Open AMQP connections on this node.", nil, nil)
	descLinks     = prometheus.NewDesc("quorumbus_amqp_links", "Attached AMQP links on this node by the client's role (sender, receiver), $management and $cbs links included.", []string{"role"}, nil)
	descCredit    = prometheus.NewDesc("quorumbus_amqp_link_credit", "Link credit outstanding on this node: for senders, granted by the node and not yet used; for receivers, granted by clients and not yet used by a delivery.", []string{"role"}, nil)
	descUnsettled = prometheus.NewDesc("quorumbus_amqp_unsettled_deliveries", "Peek-lock deliveries sent to clients on this node that await their outcome (lock not expired).", nil, nil)
	descOutQueued = prometheus.NewDesc("quorumbus_amqp_outgoing_queued_bytes", "Bytes held for clients on this node and not yet written to their sockets.", nil, nil)
	descStalls    = prometheus.NewDesc("quorumbus_amqp_stalls_total", "Times a receiver (or request link) waited at a bound: unsettled (--amqp-max-unsettled-per-link/-per-conn) or outgoing (--amqp-max-conn-outgoing-mb).", []string{"bound"}, nil)
	descEntLinks  = prometheus.NewDesc("quorumbus_amqp_entity_links", "Attached AMQP links on this node to one queue, topic or subscription (dead-letter sub-queue included), by the client's role (sender, receiver).", []string{"entity", "subscription", "role"}, nil)
	descEntConns  = prometheus.NewDesc("quorumbus_amqp_entity_connections", "AMQP connections on this node with at least one link to the queue, topic or subscription.", []string{"entity", "subscription"}, nil)
	descErrors    = prometheus.NewDesc("quorumbus_amqp_errors_total", "AMQP errors this node sent to clients (detach, end, close, rejected deliveries and settlements, refused $management and $cbs requests), by condition.", []string{"condition"}, nil)
)

func (c amqpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConns
	ch <- descLinks
	ch <- descCredit
	ch <- descUnsettled
	ch <- descOutQueued
	ch <- descStalls
	ch <- descErrors
	ch <- descEntLinks
	ch <- descEntConns
}

func (c amqpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.Stats()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(descLinks, prometheus.GaugeValue, float64(st.SenderLinks), "sender")
	ch <- prometheus.MustNewConstMetric(descLinks, prometheus.GaugeValue, float64(st.ReceiverLinks), "receiver")
	ch <- prometheus.MustNewConstMetric(descCredit, prometheus.GaugeValue, float64(st.SenderCredit), "sender")
	ch <- prometheus.MustNewConstMetric(descCredit, prometheus.GaugeValue, float64(st.ReceiverCredit), "receiver")
	ch <- prometheus.MustNewConstMetric(descUnsettled, prometheus.GaugeValue, float64(st.Unsettled))
	ch <- prometheus.MustNewConstMetric(descOutQueued, prometheus.GaugeValue, float64(st.OutgoingQueued))
	ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(st.UnsettledStalls), "unsettled")
	ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(st.OutgoingStalls), "outgoing")
	for cond, n := range st.Errors {
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(n), cond)
	}
	for path, e := range st.Entities {
		entity, sub := splitEntityPath(path)
		ch <- prometheus.MustNewConstMetric(descEntLinks, prometheus.GaugeValue, float64(e.SenderLinks), entity, sub, "sender")
		ch <- prometheus.MustNewConstMetric(descEntLinks, prometheus.GaugeValue, float64(e.ReceiverLinks), entity, sub, "receiver")
		ch <- prometheus.MustNewConstMetric(descEntConns, prometheus.GaugeValue, float64(e.Connections), entity, sub)
	}
}

// httpCollector exports the HTTP ports' connection counts (cmd/internal/httplimit).
type httpCollector struct{ w *webFront }

var (
	descHTTPConns   = prometheus.NewDesc("quorumbus_http_connections", "Open HTTP connections on this node, by port: admin, or amqp for the HTTP side of the AMQP and AMQPS ports (WebSocket connections included).", []string{"port"}, nil)
	descHTTPRefused = prometheus.NewDesc("quorumbus_http_connections_refused_total", "HTTP connections this node closed at once because --http-max-connections were open on their port, by port.", []string{"port"}, nil)
)

func (c httpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHTTPConns
	ch <- descHTTPRefused
}

func (c httpCollector) Collect(ch chan<- prometheus.Metric) {
	var open int64
	var refused uint64
	for _, l := range c.w.amqp {
		open, refused = open+l.Open(), refused+l.Refused()
	}
	ch <- prometheus.MustNewConstMetric(descHTTPConns, prometheus.GaugeValue, float64(c.w.admin.Open()), "admin")
	ch <- prometheus.MustNewConstMetric(descHTTPRefused, prometheus.CounterValue, float64(c.w.admin.Refused()), "admin")
	ch <- prometheus.MustNewConstMetric(descHTTPConns, prometheus.GaugeValue, float64(open), "amqp")
	ch <- prometheus.MustNewConstMetric(descHTTPRefused, prometheus.CounterValue, float64(refused), "amqp")
}

// buildInfo is the quorumbus_build_info gauge: always 1, its labels say which build
// runs (cmd/internal/version), so that a dashboard can show a rolling upgrade.
func buildInfo() prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "quorumbus_build_info",
		Help:        "Always 1; its labels are the running build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "go_version": v.GoVersion},
	})
	g.Set(1)
	return g
}

// splitEntityPath splits "orders/Subscriptions/eu" into the entity and subscription
// labels the entity series use ("orders", "eu"); a queue or topic has no subscription.
func splitEntityPath(p string) (entity, sub string) {
	if i := strings.Index(strings.ToLower(p), "/subscriptions/"); i >= 0 {
		return p[:i], p[i+len("/subscriptions/"):]
	}
	return p, ""
}

// pprofHandler serves net/http/pprof's pages under /debug/pprof/ (--pprof).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
