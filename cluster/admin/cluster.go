package admin

import "context"

// Cluster is the operator surface of a multi-node cluster, served as JSON under
// /$cluster/ on every node (qbctl cluster, node and partition commands). Errors: an error
// wrapping meta.ErrNotFound (unknown node or group) is 404, a *meta.ValidationError or
// meta.ErrInvalid 400, ErrUnavailable 503.
type Cluster interface {
	// ClusterStatus describes the members as this node sees them.
	ClusterStatus(ctx context.Context) (ClusterStatus, error)
	// Partitions describes every partition group: replicas, leader, indexes, lag.
	Partitions(ctx context.Context) ([]PartitionStatus, error)
	// DrainNode moves leadership (and, with the node marked draining, new placements)
	// away from a node so it can be stopped without clients seeing more than retriable
	// errors.
	DrainNode(ctx context.Context, id string) error
	// UndrainNode clears a node's draining mark: new replicas may be placed on it again,
	// and leader balancing moves its preferred groups back to it (as its restart does).
	UndrainNode(ctx context.Context, id string) error
	// RemoveNode removes a node from the cluster for good: its replicas are re-placed
	// on the others first, then it leaves every Raft group.
	RemoveNode(ctx context.Context, id string) error
	// TransferLeader moves leadership of one partition group to node to ("" means
	// any other voter).
	TransferLeader(ctx context.Context, groupID uint32, to string) error
}

// ClusterStatus is GET /$cluster/status.
type ClusterStatus struct {
	NodeID         string   `json:"nodeId"`         // the node that answered
	MetadataLeader string   `json:"metadataLeader"` // "" when there is none
	Members        []Member `json:"members"`
}

// Member is one node of the cluster.
type Member struct {
	ID          string `json:"id"`
	ClusterAddr string `json:"clusterAddr"`
	AMQPAddr    string `json:"amqpAddr,omitempty"`
	AdminAddr   string `json:"adminAddr,omitempty"`
	Zone        string `json:"zone,omitempty"`
	// State: "alive", "suspect", "dead" (gossip), "left", or "draining" (alive and
	// draining); a draining node gossip does not see alive is "suspect, draining",
	// "dead, draining" or "left, draining"; "removed" for a node RemoveNode removed that
	// still runs (gossip sees it, the cluster no longer counts it).
	State string `json:"state"`
	// MetadataRole: "leader", "voter" or "nonvoter" in the metadata group; "" if none.
	MetadataRole string `json:"metadataRole"`
	Replicas     int    `json:"replicas"` // partition replicas placed on it
	Leading      int    `json:"leading"`  // partition groups it leads
	// MetadataDigest is the SHA-256 of the member's metadata state (hex) and
	// MetadataApplied the last metadata log index its Raft applied, when asked for with
	// ?digests=true ("" and 0 when the member did not answer): once the cluster is
	// quiet, every member's are equal (metadata replicas converged).
	MetadataDigest  string `json:"metadataDigest,omitempty"`
	MetadataApplied uint64 `json:"metadataApplied,omitempty"`
}

// PartitionStatus is one element of GET /$cluster/partitions.
type PartitionStatus struct {
	Entity   string          `json:"entity"`
	Index    int             `json:"index"`
	GroupID  uint32          `json:"groupId"`
	Leader   string          `json:"leader"` // "" when there is none
	Replicas []ReplicaStatus `json:"replicas"`
	// WantReplicas is how many replicas the group should have: --replicas, capped by
	// the registered nodes. UnderReplicated is set while fewer of its voters are alive
	// (all its placed replicas, when it has no leader to ask).
	WantReplicas    int  `json:"wantReplicas"`
	UnderReplicated bool `json:"underReplicated"`
}

// ReplicaStatus is one replica of a partition group.
type ReplicaStatus struct {
	Node      string `json:"node"`
	Voter     bool   `json:"voter"`
	LastIndex uint64 `json:"lastIndex"` // last log index the replica reports; 0 if unknown
	Lag       uint64 `json:"lag"`       // entries behind the leader
	// Unreachable: the replica's node did not answer (dead, paused, partitioned away), so
	// LastIndex and Lag say nothing about it.
	Unreachable bool `json:"unreachable,omitempty"`
	// Digest is the SHA-256 of the replica's state machine (hex), when asked for with
	// ?digests=true: equal digests, equal states (replicas converged).
	Digest string `json:"digest,omitempty"`
}

type digestsKey struct{}

// WithDigests marks ctx as asking Cluster.Partitions for replica digests and
// Cluster.ClusterStatus for each member's metadata digest.
func WithDigests(ctx context.Context) context.Context {
	return context.WithValue(ctx, digestsKey{}, true)
}

// WantDigests reports whether ctx asks for replica digests.
func WantDigests(ctx context.Context) bool {
	v, _ := ctx.Value(digestsKey{}).(bool)
	return v
}

// Rebalancer is the optional part of Cluster that reports replica rebalancing, served
// as GET /$cluster/rebalance (qbctl cluster rebalance status).
type Rebalancer interface {
	RebalanceStatus(ctx context.Context) (RebalanceStatus, error)
}

// RebalanceStatus is GET /$cluster/rebalance: the replica moves under way and how far
// each node is from an even share of the replicas and of the leaderships.
type RebalanceStatus struct {
	NodeID string `json:"nodeId"` // the node that answered
	// MaxMoves is --rebalance-moves on the node that answered: how many groups the
	// metadata leader moves a replica of at once (0: no automatic moves).
	MaxMoves int `json:"maxMoves"`
	// Moves are the groups whose membership (as their leader reports it) differs from
	// their placement: a replica joining, catching up as a non-voter, or leaving.
	Moves []RebalanceMove `json:"moves"`
	Nodes []RebalanceNode `json:"nodes"`
	// EvenReplicas and EvenLeading are the even shares: the replicas placed on, and the
	// groups led by, the nodes that are up and not draining, over their number.
	EvenReplicas float64 `json:"evenReplicas"`
	EvenLeading  float64 `json:"evenLeading"`
	// Balanced: every node up and not draining holds replicas and leads groups within
	// 20 % (at least one) of the even shares. Done: balanced and no move under way.
	Balanced bool `json:"balanced"`
	Done     bool `json:"done"`
}

// RebalanceMove is a partition group whose membership is changing.
type RebalanceMove struct {
	Entity     string   `json:"entity"`
	Index      int      `json:"index"`
	GroupID    uint32   `json:"groupId"`
	Joining    []string `json:"joining,omitempty"`    // placed, not in the group yet
	CatchingUp []string `json:"catchingUp,omitempty"` // placed, in the group as a non-voter
	Leaving    []string `json:"leaving,omitempty"`    // in the group, no longer placed
}

// RebalanceNode is one registered node's share.
type RebalanceNode struct {
	ID   string `json:"id"`
	Zone string `json:"zone,omitempty"`
	// State: "up", "draining" or "down" (gossip does not see it alive, or it did not
	// answer); only nodes that are up count toward the even shares.
	State    string `json:"state"`
	Replicas int    `json:"replicas"` // partition replicas placed on it
	Leading  int    `json:"leading"`  // partition groups it leads
	// ReplicasEven and LeadingEven: within 20 % (at least one) of the even share; set
	// only for a node that is up.
	ReplicasEven bool `json:"replicasEven"`
	LeadingEven  bool `json:"leadingEven"`
}
