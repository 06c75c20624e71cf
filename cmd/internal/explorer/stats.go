package explorer

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Metrics gathers the metrics of every node of the cluster, this one included, as each
// serves them on its /metrics (P9: the consumer owns the interface; cmd implements it).
type Metrics interface {
	NodeMetrics(ctx context.Context) []NodeMetrics
}

// NodeMetrics is one node's own metrics, or why they could not be read.
type NodeMetrics struct {
	Node     string
	Families map[string]*dto.MetricFamily // by metric name; nil when Err is set
	Err      error
}

// StatsResponse is POST /$ui/api/stats: counters and gauges for the rates and health
// view. The counters are totals; the page divides the difference of two answers by the
// difference of their Time to get a rate per second.
type StatsResponse struct {
	Time     time.Time     `json:"time"`
	Nodes    []NodeStats   `json:"nodes"`
	Entities []EntityStats `json:"entities"`
}

// NodeStats is one node's traffic and clients.
type NodeStats struct {
	Node  string `json:"node"`
	Error string `json:"error,omitempty"` // its metrics could not be read
	// Incoming and Outgoing are the message counters of the partitions it leads
	// (entity series come only from a partition's leader).
	Incoming float64 `json:"incoming"`
	Outgoing float64 `json:"outgoing"`
	// Connections and Links are the AMQP connections and links it holds.
	Connections float64 `json:"connections"`
	Links       float64 `json:"links"`
	Ready       bool    `json:"ready"`
}

// EntityStats is one queue, topic or subscription over the whole cluster.
type EntityStats struct {
	Entity       string `json:"entity"`
	Subscription string `json:"subscription,omitempty"`
	// Incoming counts messages stored (for a topic, each copy on its subscription),
	// Outgoing deliveries; both over every partition, each counted once.
	Incoming   float64 `json:"incoming"`
	Outgoing   float64 `json:"outgoing"`
	DeadLetter float64 `json:"deadLetter"` // messages in the dead-letter sub-queue
	// Connections, SenderLinks and ReceiverLinks are the clients attached to it, on
	// every node.
	Connections   float64 `json:"connections"`
	SenderLinks   float64 `json:"senderLinks"`
	ReceiverLinks float64 `json:"receiverLinks"`
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) error {
	if h.cfg.Metrics == nil {
		return errorf(http.StatusNotImplemented, "this node does not serve metrics to the explorer")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, aggregate(h.cfg.Metrics.NodeMetrics(ctx), h.cfg.now()))
	return nil
}

// aggregate sums the nodes' series into the per-node and per-entity view.
func aggregate(ms []NodeMetrics, now time.Time) StatsResponse {
	out := StatsResponse{Time: now, Nodes: []NodeStats{}, Entities: []EntityStats{}}
	type key struct{ entity, sub string }
	ents := map[key]*EntityStats{}
	entity := func(m *dto.Metric) *EntityStats {
		k := key{label(m, "entity"), label(m, "subscription")}
		e := ents[k]
		if e == nil {
			e = &EntityStats{Entity: k.entity, Subscription: k.sub}
			ents[k] = e
		}
		return e
	}
	for _, nm := range ms {
		ns := NodeStats{Node: nm.Node}
		if nm.Err != nil {
			ns.Error = nm.Err.Error()
			out.Nodes = append(out.Nodes, ns)
			continue
		}
		each := func(name string, fn func(m *dto.Metric, v float64)) {
			if f := nm.Families[name]; f != nil {
				for _, m := range f.GetMetric() {
					fn(m, value(m))
				}
			}
		}
		each("quorumbus_entity_incoming_messages_total", func(m *dto.Metric, v float64) { ns.Incoming += v; entity(m).Incoming += v })
		each("quorumbus_entity_outgoing_messages_total", func(m *dto.Metric, v float64) { ns.Outgoing += v; entity(m).Outgoing += v })
		each("quorumbus_entity_dead_letter_messages", func(m *dto.Metric, v float64) { entity(m).DeadLetter += v })
		each("quorumbus_amqp_connections", func(_ *dto.Metric, v float64) { ns.Connections += v })
		each("quorumbus_amqp_links", func(_ *dto.Metric, v float64) { ns.Links += v })
		each("quorumbus_node_ready", func(_ *dto.Metric, v float64) { ns.Ready = v == 1 })
		each("quorumbus_amqp_entity_connections", func(m *dto.Metric, v float64) { entity(m).Connections += v })
		each("quorumbus_amqp_entity_links", func(m *dto.Metric, v float64) {
			if label(m, "role") == "sender" {
				entity(m).SenderLinks += v
			} else {
				entity(m).ReceiverLinks += v
			}
		})
		out.Nodes = append(out.Nodes, ns)
	}
	for _, e := range ents {
		out.Entities = append(out.Entities, *e)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	sort.Slice(out.Entities, func(i, j int) bool {
		a, b := out.Entities[i], out.Entities[j]
		if !strings.EqualFold(a.Entity, b.Entity) {
			return strings.ToLower(a.Entity) < strings.ToLower(b.Entity)
		}
		return strings.ToLower(a.Subscription) < strings.ToLower(b.Subscription)
	})
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
