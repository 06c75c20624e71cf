// Package redrive holds what qbctl's `dlq resubmit` and the explorer's resubmit share:
// the copy of a dead-lettered message that is sent back to an entity.
package redrive

import "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

// deadLetterKeys are the application properties the broker adds to dead-lettered
// messages; a resubmitted copy leaves them behind.
var deadLetterKeys = []string{"DeadLetterReason", "DeadLetterErrorDescription"}

// Copy is the message a resubmit sends for m: its body, properties and application
// properties without its broker state (sequence number, lock, enqueued time, dead-letter
// reason). The header's TTL on a received message is its effective TTL, usually the
// entity's default; a message dead-lettered because it expired would expire again as
// soon as it is back, so the copy takes the entity's current default TTL instead.
// Broker-stamped annotations are not the sender's to set: only the partition key, which
// routes the copy, is kept.
func Copy(m *azservicebus.ReceivedMessage) *azservicebus.AMQPAnnotatedMessage {
	raw := m.RawAMQPMessage
	out := &azservicebus.AMQPAnnotatedMessage{Body: raw.Body, Properties: raw.Properties}
	if raw.Header != nil && (raw.Header.Durable || raw.Header.Priority != 0) {
		out.Header = &azservicebus.AMQPAnnotatedMessageHeader{Durable: raw.Header.Durable, Priority: raw.Header.Priority}
	}
	if len(raw.ApplicationProperties) > 0 {
		out.ApplicationProperties = make(map[string]any, len(raw.ApplicationProperties))
		for k, v := range raw.ApplicationProperties {
			out.ApplicationProperties[k] = v
		}
		for _, k := range deadLetterKeys {
			delete(out.ApplicationProperties, k)
		}
	}
	if v, ok := raw.MessageAnnotations["x-opt-partition-key"]; ok {
		out.MessageAnnotations = map[any]any{"x-opt-partition-key": v}
	}
	return out
}
