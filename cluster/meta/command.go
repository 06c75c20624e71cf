package meta

import "github.com/quorumbus/quorumbus/fsm/rule"

// Command is one replicated change to the metadata. Apply applies it at the time of the
// Entry that carries it.
type Command interface{ Op() Op }

// Op identifies a command kind on the wire. Append only ("ONLY ADD TO THE END", P3).
type Op uint8

// Command opcodes.
const (
	OpSetNamespace Op = iota + 1
	OpCreateQueue
	OpUpdateQueue
	OpDeleteQueue
	OpCreateTopic
	OpUpdateTopic
	OpDeleteTopic
	OpCreateSubscription
	OpUpdateSubscription
	OpDeleteSubscription
	OpCreateRule
	OpUpdateRule
	OpDeleteRule
	OpPutSASKey
	OpDeleteSASKey
	OpSetPlacement
	OpPutNode
	OpDeleteNode
	opCount
)

var opNames = [...]string{"", "SetNamespace", "CreateQueue", "UpdateQueue", "DeleteQueue",
	"CreateTopic", "UpdateTopic", "DeleteTopic", "CreateSubscription", "UpdateSubscription",
	"DeleteSubscription", "CreateRule", "UpdateRule", "DeleteRule", "PutSASKey",
	"DeleteSASKey", "SetPlacement", "PutNode", "DeleteNode"}

func (o Op) String() string {
	if o > 0 && o < opCount {
		return opNames[o]
	}
	return "Op(?)"
}

// Entry is the unit the metadata Raft group replicates: the proposer's time and one
// command.
type Entry struct {
	Now int64 // proposer's wall clock, Unix ms; State uses max(previous, Now)
	Cmd Command
}

// SetNamespace names the namespace (once at bootstrap; later calls rename it).
type SetNamespace struct {
	Name string
}

// CreateQueue creates a queue and allocates a Raft group per partition. Replicas, when
// given, has one replica list per partition (the proposer's placement); otherwise the
// partitions start unplaced and SetPlacement places them.
type CreateQueue struct {
	Name       string
	Properties QueueProperties
	Replicas   [][]string
}

// UpdateQueue replaces a queue's properties. RequiresSession,
// RequiresDuplicateDetection and PartitionCount cannot change (S-ENT-2).
type UpdateQueue struct {
	Name       string
	Properties QueueProperties
}

// DeleteQueue deletes a queue and its placement.
type DeleteQueue struct {
	Name string
}

// CreateTopic creates a topic (see CreateQueue for Replicas).
type CreateTopic struct {
	Name       string
	Properties TopicProperties
	Replicas   [][]string
}

// UpdateTopic replaces a topic's properties (RequiresDuplicateDetection and
// PartitionCount are fixed).
type UpdateTopic struct {
	Name       string
	Properties TopicProperties
}

// DeleteTopic deletes a topic with all its subscriptions and its placement.
type DeleteTopic struct {
	Name string
}

// CreateSubscription creates a subscription. With no Rules it starts with rule $Default
// = true filter (S-TOP-1); otherwise with exactly Rules (the admin API's
// DefaultRuleDescription, Config.json's Rules).
type CreateSubscription struct {
	Topic      string
	Name       string
	Properties SubscriptionProperties
	Rules      []rule.Spec
}

// UpdateSubscription replaces a subscription's properties (RequiresSession is fixed).
type UpdateSubscription struct {
	Topic      string
	Name       string
	Properties SubscriptionProperties
}

// DeleteSubscription deletes a subscription and its rules.
type DeleteSubscription struct {
	Topic string
	Name  string
}

// CreateRule adds a rule to a subscription.
type CreateRule struct {
	Topic        string
	Subscription string
	Rule         rule.Spec
}

// UpdateRule replaces a rule (found by Rule.Name) keeping its position and creation time.
type UpdateRule struct {
	Topic        string
	Subscription string
	Rule         rule.Spec
}

// DeleteRule removes a rule.
type DeleteRule struct {
	Topic        string
	Subscription string
	Name         string
}

// PutSASKey creates or replaces a namespace SAS key.
type PutSASKey struct {
	Key SASKey
}

// DeleteSASKey removes a namespace SAS key.
type DeleteSASKey struct {
	Name string
}

// SetPlacement sets the replica nodes of every partition of an entity (one list per
// partition, in partition order). Group IDs are allocated by State and never change.
type SetPlacement struct {
	Entity   string
	Replicas [][]string
}

// PutNode registers a node or changes its record.
type PutNode struct {
	Node Node
}

// DeleteNode removes a node's record (after its replicas were moved away).
type DeleteNode struct {
	ID string
}

// Op implementations.
func (*SetNamespace) Op() Op       { return OpSetNamespace }
func (*CreateQueue) Op() Op        { return OpCreateQueue }
func (*UpdateQueue) Op() Op        { return OpUpdateQueue }
func (*DeleteQueue) Op() Op        { return OpDeleteQueue }
func (*CreateTopic) Op() Op        { return OpCreateTopic }
func (*UpdateTopic) Op() Op        { return OpUpdateTopic }
func (*DeleteTopic) Op() Op        { return OpDeleteTopic }
func (*CreateSubscription) Op() Op { return OpCreateSubscription }
func (*UpdateSubscription) Op() Op { return OpUpdateSubscription }
func (*DeleteSubscription) Op() Op { return OpDeleteSubscription }
func (*CreateRule) Op() Op         { return OpCreateRule }
func (*UpdateRule) Op() Op         { return OpUpdateRule }
func (*DeleteRule) Op() Op         { return OpDeleteRule }
func (*PutSASKey) Op() Op          { return OpPutSASKey }
func (*DeleteSASKey) Op() Op       { return OpDeleteSASKey }
func (*SetPlacement) Op() Op       { return OpSetPlacement }
func (*PutNode) Op() Op            { return OpPutNode }
func (*DeleteNode) Op() Op         { return OpDeleteNode }

// PartitionsChanged names the queue or topic whose partitions c concerns: the entity c
// creates (creates true; its partitions must start), or the one whose partitions'
// configuration c changes (a queue's or topic's properties, a subscription or a rule
// of a topic). "" for the other commands: keys, nodes, placement, the namespace and
// deletions.
func PartitionsChanged(c Command) (entity string, creates bool) {
	switch x := c.(type) {
	case *CreateQueue:
		return x.Name, true
	case *CreateTopic:
		return x.Name, true
	case *UpdateQueue:
		return x.Name, false
	case *UpdateTopic:
		return x.Name, false
	case *CreateSubscription:
		return x.Topic, false
	case *UpdateSubscription:
		return x.Topic, false
	case *DeleteSubscription:
		return x.Topic, false
	case *CreateRule:
		return x.Topic, false
	case *UpdateRule:
		return x.Topic, false
	case *DeleteRule:
		return x.Topic, false
	}
	return "", false
}

// newCommand returns an empty command for op, for decoding.
func newCommand(op Op) Command {
	switch op {
	case OpSetNamespace:
		return &SetNamespace{}
	case OpCreateQueue:
		return &CreateQueue{}
	case OpUpdateQueue:
		return &UpdateQueue{}
	case OpDeleteQueue:
		return &DeleteQueue{}
	case OpCreateTopic:
		return &CreateTopic{}
	case OpUpdateTopic:
		return &UpdateTopic{}
	case OpDeleteTopic:
		return &DeleteTopic{}
	case OpCreateSubscription:
		return &CreateSubscription{}
	case OpUpdateSubscription:
		return &UpdateSubscription{}
	case OpDeleteSubscription:
		return &DeleteSubscription{}
	case OpCreateRule:
		return &CreateRule{}
	case OpUpdateRule:
		return &UpdateRule{}
	case OpDeleteRule:
		return &DeleteRule{}
	case OpPutSASKey:
		return &PutSASKey{}
	case OpDeleteSASKey:
		return &DeleteSASKey{}
	case OpSetPlacement:
		return &SetPlacement{}
	case OpPutNode:
		return &PutNode{}
	case OpDeleteNode:
		return &DeleteNode{}
	}
	return nil
}
