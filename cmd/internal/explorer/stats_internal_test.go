package explorer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func families(t *testing.T, text string) NodeMetrics {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return NodeMetrics{Families: fs}
}

// The stats sum each entity's series over the nodes (each partition comes from its
// leader only), give each node its own totals, and list a node that did not answer
// with its error.
func TestAggregateStats(t *testing.T) {
	n1 := families(t, `
quorumbus_entity_incoming_messages_total{entity="jobs",subscription="",partition="0"} 10
quorumbus_entity_outgoing_messages_total{entity="jobs",subscription="",partition="0"} 7
quorumbus_entity_dead_letter_messages{entity="jobs",subscription="",partition="0"} 1
quorumbus_amqp_connections 3
quorumbus_amqp_links{role="sender"} 2
quorumbus_amqp_links{role="receiver"} 4
quorumbus_amqp_entity_links{entity="jobs",subscription="",role="sender"} 1
quorumbus_amqp_entity_links{entity="jobs",subscription="",role="receiver"} 2
quorumbus_amqp_entity_connections{entity="jobs",subscription=""} 2
quorumbus_node_ready 1
`)
	n1.Node = "n1"
	n2 := families(t, `
quorumbus_entity_incoming_messages_total{entity="jobs",subscription="",partition="1"} 5
quorumbus_entity_incoming_messages_total{entity="events",subscription="eu",partition="0"} 4
quorumbus_amqp_entity_links{entity="jobs",subscription="",role="receiver"} 1
quorumbus_amqp_entity_connections{entity="jobs",subscription=""} 1
`)
	n2.Node = "n2"
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	got := aggregate([]NodeMetrics{n2, {Node: "n3", Err: errors.New("reading its metrics: timeout")}, n1}, now)
	if !got.Time.Equal(now) || len(got.Nodes) != 3 || got.Nodes[0].Node != "n1" || got.Nodes[2].Error == "" {
		t.Fatalf("nodes: %+v", got.Nodes)
	}
	if n := got.Nodes[0]; n.Incoming != 10 || n.Outgoing != 7 || n.Connections != 3 || n.Links != 6 || !n.Ready {
		t.Errorf("n1: %+v", n)
	}
	if n := got.Nodes[1]; n.Incoming != 9 || n.Ready {
		t.Errorf("n2: %+v", n)
	}
	if len(got.Entities) != 2 {
		t.Fatalf("entities: %+v", got.Entities)
	}
	ev, jobs := got.Entities[0], got.Entities[1]
	if ev.Entity != "events" || ev.Subscription != "eu" || ev.Incoming != 4 {
		t.Errorf("events/eu: %+v", ev)
	}
	want := EntityStats{Entity: "jobs", Incoming: 15, Outgoing: 7, DeadLetter: 1, Connections: 3, SenderLinks: 1, ReceiverLinks: 3}
	if jobs != want {
		t.Errorf("jobs: %+v, want %+v", jobs, want)
	}
}
