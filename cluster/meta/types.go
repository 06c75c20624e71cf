package meta

import (
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/fsm/rule"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// Status is an entity's status (S-ENT-2). The zero value is Active.
type Status uint8

// Statuses. Append only: snapshots store them.
const (
	StatusActive Status = iota
	StatusDisabled
	StatusSendDisabled
	StatusReceiveDisabled
	statusCount
)

var statusNames = [...]string{"Active", "Disabled", "SendDisabled", "ReceiveDisabled"}

func (s Status) String() string {
	if s < statusCount {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// ParseStatus parses a status name case-insensitively.
func ParseStatus(s string) (Status, error) {
	for i, n := range statusNames {
		if strings.EqualFold(s, n) {
			return Status(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", s)
}

// Right is a SAS access right.
type Right uint8

// Rights, as a bit set.
const (
	RightSend Right = 1 << iota
	RightListen
	RightManage
)

// Has reports whether r includes every right in want.
func (r Right) Has(want Right) bool { return r&want == want }

// SAS is r as the claims a token of this rule grants (internal/sas, which both the admin
// API and the AMQP layer check tokens with).
func (r Right) SAS() sas.Rights {
	var out sas.Rights
	if r.Has(RightSend) {
		out |= sas.Send
	}
	if r.Has(RightListen) {
		out |= sas.Listen
	}
	if r.Has(RightManage) {
		out |= sas.Manage
	}
	return out
}

func (r Right) String() string {
	var parts []string
	for _, x := range []struct {
		r Right
		n string
	}{{RightManage, "Manage"}, {RightSend, "Send"}, {RightListen, "Listen"}} {
		if r&x.r != 0 {
			parts = append(parts, x.n)
		}
	}
	return strings.Join(parts, ",")
}

// Names returns the rights as Service Bus names them, Manage first.
func (r Right) Names() []string {
	if r == 0 {
		return nil
	}
	return strings.Split(r.String(), ",")
}

// ParseRight parses one access right name (Manage, Send, Listen), case-insensitively.
func ParseRight(s string) (Right, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "manage":
		return RightManage, nil
	case "send":
		return RightSend, nil
	case "listen":
		return RightListen, nil
	}
	return 0, fmt.Errorf("%q is not one of Manage, Send, Listen", s)
}

// SASKey is a shared access authorization rule: a named pair of keys and the rights they
// grant. Namespace keys live in State; entity keys in the entity's AuthorizationRules.
// Keys are used as raw UTF-8 bytes for HMAC-SHA256 (protocol.md §3).
type SASKey struct {
	Name         string
	PrimaryKey   string
	SecondaryKey string
	Rights       Right
	CreatedAt    int64 // Unix ms; 0 when not known
	ModifiedAt   int64
}

// QueueProperties is every property of a queue (S-ENT-2 and the admin API's
// QueueDescription). Durations use Never for "no limit".
type QueueProperties struct {
	LockDuration                        time.Duration
	MaxSizeInMegabytes                  int64
	RequiresDuplicateDetection          bool // fixed at creation
	RequiresSession                     bool // fixed at creation
	DefaultMessageTimeToLive            time.Duration
	DeadLetteringOnMessageExpiration    bool
	DuplicateDetectionHistoryTimeWindow time.Duration
	MaxDeliveryCount                    int32
	EnableBatchedOperations             bool
	Status                              Status
	AutoDeleteOnIdle                    time.Duration
	PartitionCount                      int32  // 1 = not partitioned (EnablePartitioning=false); fixed at creation
	ForwardTo                           string // as given (a name or sb://host/name); "" = none
	ForwardDeadLetteredMessagesTo       string
	UserMetadata                        string
	MaxMessageSizeInKilobytes           int64
	SupportOrdering                     bool
	EnableExpress                       bool
	AuthorizationRules                  []SASKey
}

// TopicProperties is every property of a topic.
type TopicProperties struct {
	DefaultMessageTimeToLive            time.Duration
	MaxSizeInMegabytes                  int64
	RequiresDuplicateDetection          bool // fixed at creation
	DuplicateDetectionHistoryTimeWindow time.Duration
	EnableBatchedOperations             bool
	Status                              Status
	UserMetadata                        string
	SupportOrdering                     bool
	AutoDeleteOnIdle                    time.Duration
	PartitionCount                      int32 // fixed at creation
	EnableSubscriptionPartitioning      bool
	FilteringMessagesBeforePublishing   bool
	EnableExpress                       bool
	MaxMessageSizeInKilobytes           int64
	AuthorizationRules                  []SASKey
}

// SubscriptionProperties is every property of a subscription.
type SubscriptionProperties struct {
	LockDuration                              time.Duration
	RequiresSession                           bool // fixed at creation
	DefaultMessageTimeToLive                  time.Duration
	DeadLetteringOnMessageExpiration          bool
	DeadLetteringOnFilterEvaluationExceptions bool
	MaxDeliveryCount                          int32
	EnableBatchedOperations                   bool
	Status                                    Status
	ForwardTo                                 string
	ForwardDeadLetteredMessagesTo             string
	UserMetadata                              string
	AutoDeleteOnIdle                          time.Duration
}

// S-ENT-2 defaults and bounds.
const (
	DefaultLockDuration       = 60 * time.Second
	MinLockDuration           = 5 * time.Second
	MaxLockDuration           = 5 * time.Minute
	DefaultMaxDeliveryCount   = 10
	DefaultDuplicateWindow    = 10 * time.Minute
	MinDuplicateWindow        = 20 * time.Second
	MaxDuplicateWindow        = 7 * 24 * time.Hour
	DefaultMaxSizeInMegabytes = 1024
	MaxMaxSizeInMegabytes     = 1 << 20 // 1 TiB per partition: a sanity cap, not a Service Bus limit
	DefaultMaxMessageSizeKB   = 256
	MaxMaxMessageSizeKB       = 102400
	MinAutoDeleteOnIdle       = 5 * time.Minute
	MaxPartitionCount         = 32
	// DefaultPartitionCount is how many partitions an entity created with
	// EnablePartitioning gets unless the node is told otherwise (--partition-count), as on
	// Service Bus Standard; such an entity reports that many times its
	// MaxSizeInMegabytes.
	DefaultPartitionCount     = 16
	MaxNameLength             = 260
	MaxSubscriptionNameLength = 50
	MaxRuleNameLength         = 50
	MaxUserMetadataLength     = 1024
	MaxRulesPerSubscription   = 2000
	MaxSubscriptionsPerTopic  = 2000
	MaxAuthorizationRules     = 12
	MaxSASKeyLength           = 256
)

// DefaultQueueProperties returns a queue's properties when nothing is specified: the
// Defaults of Properties.
func DefaultQueueProperties() QueueProperties {
	var p QueueProperties
	setDefaults(&p)
	return p
}

// DefaultTopicProperties returns a topic's properties when nothing is specified.
func DefaultTopicProperties() TopicProperties {
	var p TopicProperties
	setDefaults(&p)
	return p
}

// DefaultSubscriptionProperties returns a subscription's properties when nothing is
// specified.
func DefaultSubscriptionProperties() SubscriptionProperties {
	var p SubscriptionProperties
	setDefaults(&p)
	return p
}

// Namespace is the one namespace a Quorumbus cluster serves.
type Namespace struct {
	Name      string
	CreatedAt int64 // Unix ms
	UpdatedAt int64
}

// Queue is a queue as stored. Name keeps the case it was created with.
type Queue struct {
	Name       string
	Properties QueueProperties
	CreatedAt  int64 // Unix ms
	UpdatedAt  int64
}

// Topic is a topic as stored (its subscriptions are read with State.Subscriptions).
type Topic struct {
	Name       string
	Properties TopicProperties
	CreatedAt  int64
	UpdatedAt  int64
}

// Subscription is a subscription of a topic, with its rules in creation order.
type Subscription struct {
	Topic      string // the topic's display name
	Name       string
	Properties SubscriptionProperties
	CreatedAt  int64
	UpdatedAt  int64
	Rules      []Rule
}

// Rule is a subscription rule as declared (rule.Spec) and when it was created.
type Rule struct {
	Spec      rule.Spec
	CreatedAt int64
}

// Partition is where one partition of an entity runs: its Raft group ID (unique
// cluster-wide, never reused, allocated by State) and its replica node IDs.
type Partition struct {
	GroupID  uint32
	Replicas []string
	// Bootstrap is the voter set the group was created with (the first Replicas). Only
	// these nodes bootstrap the group when they have no state for it; a replica placed
	// later starts empty and is added to the group by its leader. Never changes.
	Bootstrap []string `json:",omitempty"`
	// Base is the fsm configuration the group was created with, encoded as a one-command
	// fsm entry (fsm.UpdateEntity). Every replica, including one added much later,
	// replays the group's log from it, so all replicas rebuild the same state. Empty for
	// groups created before it was recorded (their replicas keep a local copy).
	Base []byte `json:",omitempty"`
}

// Node is a member of the cluster as the metadata records it: placement only puts
// replicas on registered nodes that are not draining.
type Node struct {
	ID       string
	Addr     string // advertised cluster address (HOST:PORT, a DNS name where there is one)
	Zone     string `json:",omitempty"`
	Draining bool   `json:",omitempty"`
	// Incarnation changes when the node starts on an empty data directory: its old
	// replicas are gone and must be rebuilt, not trusted.
	Incarnation string `json:",omitempty"`
}

// Placement is the partitions of one queue or topic, indexed by partition number.
type Placement struct {
	Entity     string // display name
	Partitions []Partition
}

// EntityKind says what a name refers to.
type EntityKind uint8

// Entity kinds.
const (
	KindNone EntityKind = iota
	KindQueue
	KindTopic
)

func (k EntityKind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindTopic:
		return "topic"
	}
	return "none"
}
