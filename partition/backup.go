package partition

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// Backup writes a snapshot of the replica's state to w (the fsm's snapshot encoding,
// docs/fsm.md), on the leader: it waits for a Barrier, so the image holds every entry
// committed before the call, then freezes the state and encodes it while the group goes
// on applying (the same copy-on-freeze as a raft snapshot: message records are copied,
// bodies shared, so memory grows by a fixed size per message, not by the bodies). The
// image is one consistent point of this partition; it says nothing of other partitions.
// A follower answers *NotLeaderError.
func (p *Partition) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if err := p.raftErr(p.raft.Barrier(timeoutOf(ctx)).Error()); err != nil {
		return 0, err
	}
	var v *fsm.Frozen
	p.m.read(func(f *fsm.FSM) { v = f.Freeze() })
	return v.WriteTo(w)
}

// RestoreBackup replaces the state of an empty group with a snapshot written by Backup,
// through raft: the leader rebases the image onto this partition's configuration
// (fsm.Rebase: its group ID, no locks, no transactions) into a scratch file in the
// replica's directory, checks it, then installs it as a user snapshot (raft.Restore),
// which the followers receive as an InstallSnapshot. The image is streamed from r to
// disk and from disk to raft, never held in memory. Errors: *NotLeaderError on a
// follower; ErrNotEmpty when the group holds messages, sessions or history already;
// fsm.ErrCorruptSnapshot or fsm.ErrBackupMismatch (nothing is changed then).
func (p *Partition) RestoreBackup(ctx context.Context, r io.Reader) error {
	if err := p.raftErr(p.raft.Barrier(timeoutOf(ctx)).Error()); err != nil {
		return err
	}
	var cfg fsm.Config
	var st fsm.Stats
	p.m.read(func(f *fsm.FSM) { cfg, st = f.Config(), f.Stats() })
	if st.LastSeq != 0 || st.Sessions != 0 || st.Bytes != 0 {
		return fmt.Errorf("%w: group %d has sequence numbers up to %d", ErrNotEmpty, cfg.GroupID, st.LastSeq)
	}
	tmp, err := os.CreateTemp(p.cfg.Dir(), "restore-*.snap")
	if err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	n, err := fsm.Rebase(r, tmp, cfg)
	if err != nil {
		return fmt.Errorf("partition: restore of group %d: %w", cfg.GroupID, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: n}
	if err := p.raft.Restore(meta, tmp, timeoutOf(ctx)); err != nil {
		return fmt.Errorf("partition: restore of group %d: %w", cfg.GroupID, p.raftErr(err))
	}
	return nil
}
