package partition

import (
	"context"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// What the cluster's reconciler needs to grow, shrink and watch a group.

// AddNonvoter adds a replica that receives the log but does not vote, so it can catch
// up before it is promoted with AddVoter (on the leader).
func (p *Partition) AddNonvoter(ctx context.Context, id, addr string) error {
	return p.raftErr(p.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeoutOf(ctx)).Error())
}

// EntityConfig is the entity configuration this replica's fsm has applied.
func (p *Partition) EntityConfig() fsm.Config {
	var c fsm.Config
	p.m.read(func(f *fsm.FSM) { c = f.Config() })
	return c
}

// LastIndex is the last index in this replica's log.
func (p *Partition) LastIndex() uint64 { return p.raft.LastIndex() }

// TransferLeadershipTo hands leadership to the voter id (at addr); with an empty id, to
// any voter raft picks.
func (p *Partition) TransferLeadershipTo(id, addr string) error {
	if id == "" {
		return p.TransferLeadership()
	}
	return p.raftErr(p.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error())
}

// NotLeader is the error a follower answers a leader-only request with (naming the
// leader when this replica knows it).
func (p *Partition) NotLeader() error { return p.notLeader(false) }

// LockedWithSalt returns the lock tokens of t's messages locked by a receive that
// carried salt (leader read; see fsm.FSM.LockedWithSalt).
func (p *Partition) LockedWithSalt(ctx context.Context, t fsm.Target, salt uint32) ([]fsm.LockToken, error) {
	var out []fsm.LockToken
	err := p.leaderRead(ctx, func(f *fsm.FSM) { out = f.LockedWithSalt(t, salt) })
	return out, err
}
