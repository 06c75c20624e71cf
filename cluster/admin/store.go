package admin

import (
	"context"
	"errors"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// Store is what the admin API needs from the node: metadata changes and reads, and the
// runtime counts of entities.
type Store interface {
	// Apply proposes cmd to the metadata state machine and returns its outcome: nil, or
	// an error wrapping meta.ErrExists, meta.ErrNotFound or meta.ErrInvalid (a
	// *meta.ValidationError for a bad property), or ErrUnavailable when the change could
	// not be committed (no leader, shutting down). The store stamps the entry's time.
	Apply(ctx context.Context, cmd meta.Command) error
	// Read calls fn with a consistent view of the metadata. fn must not keep s, modify
	// it, or call back into the Store.
	Read(ctx context.Context, fn func(s *meta.State)) error
	// Runtime returns the message counts of a queue or topic (Subscription == ""), or of
	// a subscription.
	Runtime(ctx context.Context, e Entity) (RuntimeCounts, error)
}

// Purger is the optional Store capability behind POST .../$purge: remove every message
// of a queue (dead-letter sub-queue included), of a subscription, or of every
// subscription of a topic (Subscription == ""), and say how many.
type Purger interface {
	Purge(ctx context.Context, e Entity) (int64, error)
}

// Entity names a queue or topic, or (with Subscription) a subscription of a topic.
type Entity struct {
	Name         string
	Subscription string
}

// RuntimeCounts are an entity's runtime properties, summed over its partitions.
type RuntimeCounts struct {
	Active             int64
	DeadLetter         int64
	Scheduled          int64
	Transfer           int64
	TransferDeadLetter int64
	Total              int64 // every message, deferred included; 0 means the sum of the above
	SizeBytes          int64
	AccessedAt         time.Time // last send or receive; zero when never
}

// ErrUnavailable marks Store errors that mean "try again later" (503).
var ErrUnavailable = errors.New("admin: metadata store unavailable")
