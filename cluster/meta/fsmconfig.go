package meta

import (
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
)

// PartitionConfig returns the fsm.Config that partition p of a queue or topic runs with:
// a queue becomes KindQueue; a topic becomes KindTopic with one SubscriptionConfig per
// subscription (creation order) carrying its rules (creation order). Durations become
// milliseconds with Never as fsm.NeverMs; MaxSizeInMegabytes becomes MaxSizeBytes and is
// the quota of each partition (as Service Bus gives each partition of a partitioned
// entity the full size); MaxMessageSizeInKilobytes becomes bytes.
func (s *State) PartitionConfig(entity string, p int) (fsm.Config, error) {
	e, err := s.lookup(entity, KindNone)
	if err != nil {
		return fsm.Config{}, err
	}
	if p < 0 || p >= len(e.placement) {
		return fsm.Config{}, fmt.Errorf("%s %q has %d partitions, no partition %d: %w", e.kind, e.name(), len(e.placement), p, ErrNotFound)
	}
	cfg := fsm.Config{GroupID: e.placement[p].GroupID}
	if e.kind == KindQueue {
		q := e.queue.Properties
		cfg.Kind = fsm.KindQueue
		cfg.Queue = fsm.QueueConfig{
			LockDurationMs:         ms(q.LockDuration),
			MaxDeliveryCount:       q.MaxDeliveryCount,
			DefaultTTLMs:           ms(q.DefaultMessageTimeToLive),
			DeadLetterOnExpiration: q.DeadLetteringOnMessageExpiration,
			RequiresSession:        q.RequiresSession,
			Status:                 fsm.Status(q.Status),
		}
		cfg.RequiresDuplicateDetection = q.RequiresDuplicateDetection
		cfg.DuplicateWindowMs = ms(q.DuplicateDetectionHistoryTimeWindow)
		cfg.MaxSizeBytes = q.MaxSizeInMegabytes << 20
		cfg.MaxMessageSizeBytes = q.MaxMessageSizeInKilobytes << 10
		return cfg, nil
	}
	t := e.topic.Properties
	cfg.Kind = fsm.KindTopic
	cfg.Queue = fsm.QueueConfig{DefaultTTLMs: ms(t.DefaultMessageTimeToLive), Status: fsm.Status(t.Status)}
	cfg.RequiresDuplicateDetection = t.RequiresDuplicateDetection
	cfg.DuplicateWindowMs = ms(t.DuplicateDetectionHistoryTimeWindow)
	cfg.MaxSizeBytes = t.MaxSizeInMegabytes << 20
	cfg.MaxMessageSizeBytes = t.MaxMessageSizeInKilobytes << 10
	for _, sub := range e.subs {
		sp := sub.Properties
		sc := fsm.SubscriptionConfig{
			Name: sub.Name,
			Queue: fsm.QueueConfig{
				LockDurationMs:           ms(sp.LockDuration),
				MaxDeliveryCount:         sp.MaxDeliveryCount,
				DefaultTTLMs:             ms(sp.DefaultMessageTimeToLive),
				DeadLetterOnExpiration:   sp.DeadLetteringOnMessageExpiration,
				DeadLetterOnFilterErrors: sp.DeadLetteringOnFilterEvaluationExceptions,
				RequiresSession:          sp.RequiresSession,
				Status:                   fsm.Status(sp.Status),
			},
		}
		for _, r := range sub.Rules {
			sc.Rules = append(sc.Rules, cloneSpec(r.Spec))
		}
		cfg.Subscriptions = append(cfg.Subscriptions, sc)
	}
	return cfg, nil
}

// ms converts a duration to milliseconds, Never to fsm.NeverMs.
func ms(d time.Duration) int64 {
	if d >= Never {
		return fsm.NeverMs
	}
	return int64(d / time.Millisecond)
}
