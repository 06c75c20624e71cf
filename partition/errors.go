package partition

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Sentinel errors. The fsm's own conditions (fsm.ErrLockLost, ...) pass through wrapped;
// test them with errors.Is too.
var (
	// ErrNotLeader: this replica does not lead the group. The error is a *NotLeaderError
	// carrying the leader's identity when known; retry there.
	ErrNotLeader = errors.New("partition: not leader")
	// ErrTimeout: the caller's context expired before the outcome was known.
	ErrTimeout = errors.New("partition: timeout")
	// ErrOutcomeUnknown marks an error after which the command may or may not have been
	// committed (leadership lost, or the caller gave up after submission). Retrying a send
	// may then store it twice (at-least-once), unless duplicate detection is on.
	ErrOutcomeUnknown = errors.New("partition: outcome unknown")
	// ErrClosed: the partition is shut down.
	ErrClosed = errors.New("partition: closed")
	// ErrNotEmpty: RestoreBackup refuses a partition that already holds state.
	ErrNotEmpty = errors.New("partition: not empty")
)

// NotLeaderError says which replica leads the group, when this one knows.
type NotLeaderError struct {
	LeaderID   string // raft ServerID of the leader; "" when unknown
	LeaderAddr string // its cluster address; "" when unknown
	Unknown    bool   // the command was submitted before leadership was lost: it may commit
}

func (e *NotLeaderError) Error() string {
	s := "partition: not leader"
	if e.LeaderID != "" || e.LeaderAddr != "" {
		s += fmt.Sprintf(" (leader %s at %s)", e.LeaderID, e.LeaderAddr)
	} else {
		s += " (leader unknown)"
	}
	if e.Unknown {
		s += "; outcome unknown"
	}
	return s
}

// Unwrap lets errors.Is match ErrNotLeader, and ErrOutcomeUnknown when Unknown is set.
func (e *NotLeaderError) Unwrap() []error {
	if e.Unknown {
		return []error{ErrNotLeader, ErrOutcomeUnknown}
	}
	return []error{ErrNotLeader}
}

func (p *Partition) notLeader(unknown bool) error {
	addr, id := p.raft.LeaderWithID()
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr), Unknown: unknown}
}

// raftErr maps a raft future error to this package's errors.
func (p *Partition) raftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return p.notLeader(false)
	case errors.Is(err, raft.ErrLeadershipLost):
		return p.notLeader(true)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("partition: raft: %w", err)
}

// ctxErr turns an expired context into ErrTimeout (wrapping the context's error too).
// submitted says whether the command may already be in the log.
func ctxErr(ctx context.Context, submitted bool) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if submitted {
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}
