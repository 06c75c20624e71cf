package admin

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The descriptions the admin API writes, and what it reads from them, byte for byte:
// entities with defaults, with every property changed, and partitioned ones. Regenerate
// with -update and review the diff; a change here changes what every SDK reads.
func TestAtomDescriptionsGolden(t *testing.T) {
	q := meta.DefaultQueueProperties()
	q2 := meta.QueueProperties{LockDuration: 45 * time.Second, MaxSizeInMegabytes: 2048, RequiresDuplicateDetection: true,
		RequiresSession: true, DefaultMessageTimeToLive: 2 * time.Hour, DeadLetteringOnMessageExpiration: true,
		DuplicateDetectionHistoryTimeWindow: time.Minute, MaxDeliveryCount: 3, Status: meta.StatusSendDisabled,
		AutoDeleteOnIdle: 10 * time.Minute, PartitionCount: 4, ForwardTo: "q2", ForwardDeadLetteredMessagesTo: "sb://x/dlq",
		UserMetadata: "<m & 'n'>", MaxMessageSizeInKilobytes: 1024, SupportOrdering: true, EnableExpress: true,
		AuthorizationRules: []meta.SASKey{{Name: "k", PrimaryKey: "p", Rights: meta.RightListen, CreatedAt: 1, ModifiedAt: 2}}}
	tp := meta.DefaultTopicProperties()
	tp2 := meta.TopicProperties{DefaultMessageTimeToLive: time.Hour, MaxSizeInMegabytes: 10, RequiresDuplicateDetection: true,
		DuplicateDetectionHistoryTimeWindow: time.Hour, Status: meta.StatusDisabled, UserMetadata: "u", AutoDeleteOnIdle: time.Hour,
		PartitionCount: 2, EnableSubscriptionPartitioning: true, FilteringMessagesBeforePublishing: true, EnableExpress: true,
		MaxMessageSizeInKilobytes: 100}
	sp := meta.DefaultSubscriptionProperties()
	sp2 := meta.SubscriptionProperties{LockDuration: time.Minute, RequiresSession: true, DefaultMessageTimeToLive: time.Minute,
		DeadLetteringOnMessageExpiration: true, DeadLetteringOnFilterEvaluationExceptions: true, MaxDeliveryCount: 7,
		Status: meta.StatusReceiveDisabled, ForwardTo: "t", ForwardDeadLetteredMessagesTo: "q", UserMetadata: "s",
		AutoDeleteOnIdle: meta.Never}
	counts := RuntimeCounts{Active: 3, DeadLetter: 1, SizeBytes: 99}
	var b strings.Builder
	for i, p := range []meta.QueueProperties{q, q2} {
		w := &xmlWriter{}
		writeQueue(w, meta.Queue{Name: "q", Properties: p, CreatedAt: 1000, UpdatedAt: 2000}, counts)
		fmt.Fprintf(&b, "queue %d\n%s\n", i, w)
		for _, base := range []meta.QueueProperties{meta.DefaultQueueProperties(), p} {
			got, err := parseQueue(mustParse(t, w.String()), base, 16)
			fmt.Fprintf(&b, "read back onto partitions=%d: %+v %v\n", base.PartitionCount, got, err)
		}
	}
	for i, p := range []meta.TopicProperties{tp, tp2} {
		w := &xmlWriter{}
		writeTopic(w, meta.Topic{Name: "t", Properties: p, CreatedAt: 1000, UpdatedAt: 2000}, nil, counts)
		fmt.Fprintf(&b, "topic %d\n%s\n", i, w)
		for _, base := range []meta.TopicProperties{meta.DefaultTopicProperties(), p} {
			got, err := parseTopic(mustParse(t, w.String()), base, 16)
			fmt.Fprintf(&b, "read back onto partitions=%d: %+v %v\n", base.PartitionCount, got, err)
		}
	}
	for i, p := range []meta.SubscriptionProperties{sp, sp2} {
		w := &xmlWriter{}
		writeSubscription(w, meta.Subscription{Topic: "t", Name: "s", Properties: p, CreatedAt: 1000, UpdatedAt: 2000}, counts)
		fmt.Fprintf(&b, "subscription %d\n%s\n", i, w)
		got, err := parseSubscription(mustParse(t, w.String()), meta.DefaultSubscriptionProperties())
		fmt.Fprintf(&b, "read back: %+v %v\n", got, err)
	}
	// Bad values: the field named in the error.
	for _, body := range []string{"<LockDuration>soon</LockDuration>", "<MaxDeliveryCount>x</MaxDeliveryCount>",
		"<RequiresSession>maybe</RequiresSession>", "<Status>Sleeping</Status>", "<MaxSizeInMegabytes>99999999999</MaxSizeInMegabytes>",
		"<EnablePartitioning>yes</EnablePartitioning>"} {
		_, err := parseQueue(mustParse(t, "<QueueDescription>"+body+"</QueueDescription>"), meta.DefaultQueueProperties(), 16)
		fmt.Fprintf(&b, "%s: %v\n", body, err)
	}
	golden(t, "testdata/atom-descriptions.golden", b.String())
}

func mustParse(t *testing.T, s string) *node {
	t.Helper()
	n, err := parseXML(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update and review the diff):\n%s", path, got)
	}
}
