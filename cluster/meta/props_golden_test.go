package meta

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// What the Config.json loader makes of every property on every kind of entity (and what
// it warns about), and how validation words each bound: byte for byte, so that moving
// the properties into one table changes no behaviour. Regenerate with -update.
func TestPropertiesGolden(t *testing.T) {
	all := `"LockDuration":"PT45S","MaxSizeInMegabytes":2048,"RequiresDuplicateDetection":true,"DuplicateDetectionHistoryTimeWindow":"PT1M",
		"RequiresSession":true,"DefaultMessageTimeToLive":"PT2H","DeadLetteringOnMessageExpiration":true,"MaxDeliveryCount":3,
		"EnableBatchedOperations":false,"AutoDeleteOnIdle":"PT10M","ForwardTo":"","ForwardDeadLetteredMessagesTo":"","Status":"SendDisabled",
		"EnablePartitioning":true,"PartitionCount":2,"MaxMessageSizeInKilobytes":1024,"UserMetadata":"u","SupportOrdering":false,
		"EnableExpress":true,"DeadLetteringOnFilterEvaluationExceptions":true,"FilteringMessagesBeforePublishing":true,
		"EnableSubscriptionPartitioning":true`
	cfg := `{"UserConfig":{"Namespaces":[{"Name":"ns","Queues":[{"Name":"q","Properties":{` + all + `}}],
		"Topics":[{"Name":"t","Properties":{` + all + `},"Subscriptions":[{"Name":"s","Properties":{` + all + `}}]}]}]}}`
	var b strings.Builder
	c, warns, err := LoadEmulatorConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		fmt.Fprintln(&b, "warning:", w)
	}
	for _, cmd := range c.Commands() {
		fmt.Fprintf(&b, "%T %+v\n", cmd, cmd)
	}
	for _, p := range []any{DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()} {
		fmt.Fprintf(&b, "default %T %+v\n", p, p)
	}
	type validator interface{ Validate() error }
	bad := func(name string, v validator) { fmt.Fprintf(&b, "%s: %v\n", name, v.Validate()) }
	for _, d := range []time.Duration{0, time.Second, 10 * time.Minute} {
		q, tp, s := DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()
		q.LockDuration, s.LockDuration = d, d
		bad("queue lock "+d.String(), &q)
		bad("subscription lock "+d.String(), &s)
		q, s = DefaultQueueProperties(), DefaultSubscriptionProperties()
		q.DefaultMessageTimeToLive, tp.DefaultMessageTimeToLive, s.DefaultMessageTimeToLive = d, d, d
		bad("queue ttl "+d.String(), &q)
		bad("topic ttl "+d.String(), &tp)
		bad("subscription ttl "+d.String(), &s)
		q, tp, s = DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()
		q.AutoDeleteOnIdle, tp.AutoDeleteOnIdle, s.AutoDeleteOnIdle = d, d, d
		bad("queue idle "+d.String(), &q)
		bad("topic idle "+d.String(), &tp)
		bad("subscription idle "+d.String(), &s)
		q, tp = DefaultQueueProperties(), DefaultTopicProperties()
		q.DuplicateDetectionHistoryTimeWindow, tp.DuplicateDetectionHistoryTimeWindow = d*1000, d*1000
		bad("queue dup "+(d*1000).String(), &q)
		bad("topic dup "+(d*1000).String(), &tp)
	}
	for _, n := range []int64{-1, 0, 1, 1 << 20, 1<<20 + 1, 102400, 102401} {
		q, tp, s := DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()
		q.MaxSizeInMegabytes, tp.MaxMessageSizeInKilobytes = n, n
		q.MaxDeliveryCount, s.MaxDeliveryCount = int32(n), int32(n)
		bad(fmt.Sprint("queue size/delivery ", n), &q)
		bad(fmt.Sprint("topic message size ", n), &tp)
		bad(fmt.Sprint("subscription delivery ", n), &s)
		q, tp = DefaultQueueProperties(), DefaultTopicProperties()
		q.PartitionCount, tp.PartitionCount = int32(n), int32(n)
		bad(fmt.Sprint("queue partitions ", n), &q)
		bad(fmt.Sprint("topic partitions ", n), &tp)
	}
	q, tp, s := DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()
	q.Status, tp.Status, s.Status = 9, 9, 9
	bad("queue status", &q)
	bad("topic status", &tp)
	bad("subscription status", &s)
	q, tp, s = DefaultQueueProperties(), DefaultTopicProperties(), DefaultSubscriptionProperties()
	q.UserMetadata, tp.UserMetadata, s.UserMetadata = strings.Repeat("x", 1025), strings.Repeat("x", 1025), strings.Repeat("x", 1025)
	bad("queue metadata", &q)
	bad("topic metadata", &tp)
	bad("subscription metadata", &s)
	q, s = DefaultQueueProperties(), DefaultSubscriptionProperties()
	q.ForwardTo, s.ForwardDeadLetteredMessagesTo = "a//b", "sb://h/Subscriptions"
	bad("queue forward", &q)
	bad("subscription forward", &s)
	q = DefaultQueueProperties()
	q.LockDuration, q.MaxDeliveryCount = time.Second, 0 // two errors: the first in table order
	bad("queue two errors", &q)

	golden(t, "testdata/properties.golden", []byte(b.String()))
}
