package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/partition"
)

// Backup and restore (admin.Backups; docs/operations.md § Backup and restore).
//
// Backup: the node serving the request reads the metadata, then has the leader of every
// partition group write an image of its state (partition.Backup: a Raft barrier, then the
// fsm's snapshot encoding) to a scratch file under <data>/backup, and reads it back in
// chunks of at most wire.MaxBackupChunk over the cluster RPC (or locally), straight into
// the archive. Restore: the serving node spools the uploaded archive to a scratch file
// under <data>/backup while checking every member's SHA-256 (admin.VerifyArchive), so
// that a damaged or truncated archive is refused before anything changes; then it
// creates the entities and keys through the metadata group, and sends each partition's
// image, in chunks, to its group's new leader, which installs it through Raft
// (partition.RestoreBackup). No side holds a whole partition in memory.

var _ admin.Backups = (*Ops)(nil)

// backupDir is where the scratch files of backups and restores go.
func (n *Node) backupDir() string { return filepath.Join(n.cfg.DataDir, "backup") }

// scratchMaxAge is how old a scratch file left by an interrupted backup or restore gets
// before the next one removes it.
const scratchMaxAge = 6 * time.Hour

// leaderPatience bounds how long a backup or restore waits for a group to have a
// leader that answers (a new group electing, a leader moving, a deleted entity's group).
const leaderPatience = 2 * time.Minute

// backupPart is one partition of an entity being backed up.
type backupPart struct {
	entity   string
	index    int
	group    uint32
	replicas []string
}

// Backup writes an archive of the whole cluster to w (admin.Backups).
func (o *Ops) Backup(ctx context.Context, w io.Writer) error {
	var md admin.Metadata
	var parts []backupPart
	o.n.meta.Read(func(s *meta.State) {
		md.Namespace = s.Namespace().Name
		md.Queues = s.Queues()
		for _, t := range s.Topics() {
			subs, _ := s.Subscriptions(t.Name)
			md.Topics = append(md.Topics, admin.BackupTopic{Topic: t, Subscriptions: subs})
		}
		md.Keys = s.SASKeys()
		for _, pl := range s.Placements() {
			for i, p := range pl.Partitions {
				parts = append(parts, backupPart{entity: pl.Entity, index: i, group: p.GroupID, replicas: p.Replicas})
			}
		}
	})
	man := admin.Manifest{Format: admin.BackupFormat, Version: admin.BackupVersion, CreatedAt: time.Now().UTC(),
		Node: o.n.cfg.NodeID, Queues: len(md.Queues), Topics: len(md.Topics), Partitions: []admin.ManifestPartition{}}
	// Take every image first: the manifest, written first, gives their sizes and sums.
	type opened struct {
		node string
		id   string
	}
	var open []opened
	defer func() {
		for _, op := range open {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = o.backupCall(cctx, op.node, &wire.Backup{Op: wire.BackupClose, ID: op.id})
			cancel()
		}
	}()
	for i, p := range parts {
		node, r, err := o.onLeader(ctx, p.group, p.replicas, &wire.Backup{Op: wire.BackupOpen, Group: p.group})
		if err != nil {
			return fmt.Errorf("backup of partition %d of %q (group %d): %w", p.index, p.entity, p.group, err)
		}
		open = append(open, opened{node, r.ID})
		man.Partitions = append(man.Partitions, admin.ManifestPartition{File: fmt.Sprintf("partitions/%d.qbfs", i),
			Entity: p.entity, Index: p.index, Group: p.group, Size: r.Size, SHA256: r.Sum, TakenAt: time.Now().UTC()})
		man.Bytes += r.Size
	}
	aw := admin.NewArchiveWriter(w, man.CreatedAt)
	if err := aw.JSON(admin.ManifestMember, &man); err != nil {
		return err
	}
	if err := aw.JSON(admin.MetadataMember, &md); err != nil {
		return err
	}
	for i, mp := range man.Partitions {
		rd := &scratchReader{ctx: ctx, o: o, node: open[i].node, id: open[i].id, size: mp.Size}
		if err := aw.Member(mp.File, mp.Size, rd); err != nil {
			return fmt.Errorf("backup of partition %d of %q: %w", mp.Index, mp.Entity, err)
		}
	}
	return aw.Close()
}

// scratchReader reads a backup's scratch file on node in chunks.
type scratchReader struct {
	ctx  context.Context
	o    *Ops
	node string
	id   string
	off  int64
	size int64
}

func (s *scratchReader) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	r, err := s.o.backupCall(s.ctx, s.node, &wire.Backup{Op: wire.BackupRead, ID: s.id, Offset: s.off})
	if err != nil {
		return 0, err
	}
	if len(r.Data) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.Data)
	s.off += int64(n)
	return n, nil
}

// Restore checks an archive and restores it into this cluster, which must have no
// entity (admin.Backups).
func (o *Ops) Restore(ctx context.Context, r io.Reader) (admin.RestoreResult, error) {
	var res admin.RestoreResult
	if err := o.checkEmpty(); err != nil {
		return res, err
	}
	dir := o.n.backupDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return res, err
	}
	sweepScratch(dir)
	spool, err := os.CreateTemp(dir, "restore-*.tar")
	if err != nil {
		return res, err
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	man, md, err := admin.VerifyArchive(io.TeeReader(r, spool))
	if err != nil {
		return res, err
	}
	if err := o.checkEmpty(); err != nil {
		return res, err
	}
	if err := o.restoreMetadata(ctx, md, &res); err != nil {
		return res, fmt.Errorf("restoring the entities: %w", err)
	}
	byFile := map[string]admin.ManifestPartition{}
	for _, p := range man.Partitions {
		byFile[p.File] = p
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return res, err
	}
	err = admin.WalkArchive(spool, func(name string, size int64, body io.Reader) error {
		mp, ok := byFile[name]
		if !ok {
			return nil
		}
		if err := o.restorePartition(ctx, mp, body); err != nil {
			return fmt.Errorf("partition %d of %q: %w", mp.Index, mp.Entity, err)
		}
		res.Partitions++
		res.Bytes += size
		return nil
	})
	return res, err
}

func (o *Ops) checkEmpty() error {
	var n int
	o.n.meta.Read(func(s *meta.State) { n = len(s.Queues()) + len(s.Topics()) })
	if n > 0 {
		return fmt.Errorf("%w: it has %d queues and topics; restore into a new cluster that has none", admin.ErrNotEmpty, n)
	}
	return nil
}

// restoreMetadata creates the archive's entities and keys. Forwarding is set once every
// entity exists, as an entity may forward to one created after it.
func (o *Ops) restoreMetadata(ctx context.Context, md *admin.Metadata, res *admin.RestoreResult) error {
	st := o.n.store
	var later []meta.Command
	for _, q := range md.Queues {
		p := q.Properties
		if p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "" {
			later = append(later, &meta.UpdateQueue{Name: q.Name, Properties: p})
			p.ForwardTo, p.ForwardDeadLetteredMessagesTo = "", ""
		}
		if err := st.Apply(ctx, &meta.CreateQueue{Name: q.Name, Properties: p}); err != nil {
			return fmt.Errorf("queue %q: %w", q.Name, err)
		}
		res.Queues++
	}
	for _, t := range md.Topics {
		if err := st.Apply(ctx, &meta.CreateTopic{Name: t.Name, Properties: t.Properties}); err != nil {
			return fmt.Errorf("topic %q: %w", t.Name, err)
		}
		res.Topics++
		for _, sub := range t.Subscriptions {
			p := sub.Properties
			if p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "" {
				later = append(later, &meta.UpdateSubscription{Topic: t.Name, Name: sub.Name, Properties: p})
				p.ForwardTo, p.ForwardDeadLetteredMessagesTo = "", ""
			}
			c := &meta.CreateSubscription{Topic: t.Name, Name: sub.Name, Properties: p}
			for _, r := range sub.Rules {
				c.Rules = append(c.Rules, r.Spec)
			}
			if err := st.Apply(ctx, c); err != nil {
				return fmt.Errorf("subscription %q of topic %q: %w", sub.Name, t.Name, err)
			}
			res.Subscriptions++
		}
	}
	for _, c := range later {
		if err := st.Apply(ctx, c); err != nil {
			return fmt.Errorf("forwarding: %w", err)
		}
	}
	// A key the new cluster has already (its default key, which its operator's
	// connection string uses) keeps the new cluster's secret.
	have := map[string]bool{}
	o.n.meta.Read(func(s *meta.State) {
		for _, k := range s.SASKeys() {
			have[strings.ToLower(k.Name)] = true
		}
	})
	for _, k := range md.Keys {
		if have[strings.ToLower(k.Name)] {
			continue
		}
		if err := st.Apply(ctx, &meta.PutSASKey{Key: k}); err != nil {
			return fmt.Errorf("key %q: %w", k.Name, err)
		}
		res.Keys++
	}
	return nil
}

// restorePartition sends one partition's image to its group's leader and installs it.
func (o *Ops) restorePartition(ctx context.Context, mp admin.ManifestPartition, body io.Reader) error {
	var group uint32
	var replicas []string
	var found bool
	o.n.meta.Read(func(s *meta.State) {
		pl, ok := s.Placement(mp.Entity)
		if ok && mp.Index < len(pl.Partitions) {
			group, replicas, found = pl.Partitions[mp.Index].GroupID, pl.Partitions[mp.Index].Replicas, true
		}
	})
	if !found {
		return fmt.Errorf("%w: it was not created", meta.ErrNotFound)
	}
	// The image goes to the node that leads the group when the upload starts; a leader
	// change midway makes the commit fail (not leader), and the restore must be run
	// again into a new cluster (the archive is read once, in order).
	node, _, err := o.onLeader(ctx, group, replicas, &wire.Backup{Op: wire.RestoreAbort, Group: group, ID: "probe"})
	if err != nil {
		return err
	}
	return o.upload(ctx, node, group, fmt.Sprintf("restore-%d-%s.qbfs", group, randomHex()), body, mp)
}

func (o *Ops) upload(ctx context.Context, node string, group uint32, id string, body io.Reader, mp admin.ManifestPartition) error {
	buf := make([]byte, wire.MaxBackupChunk)
	var off int64
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = o.backupCall(cctx, node, &wire.Backup{Op: wire.RestoreAbort, ID: id})
		cancel()
	}()
	for {
		n, err := io.ReadFull(body, buf)
		if n > 0 {
			if _, err := o.backupCall(ctx, node, &wire.Backup{Op: wire.RestoreWrite, Group: group, ID: id, Offset: off, Data: buf[:n]}); err != nil {
				return err
			}
			off += int64(n)
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	_, err := o.backupCall(ctx, node, &wire.Backup{Op: wire.RestoreCommit, Group: group, ID: id, Size: mp.Size, Sum: mp.SHA256,
		Timeout: deadlineLeft(ctx)})
	return err
}

// deadlineLeft is what is left of ctx's deadline; 0 when it has none.
func deadlineLeft(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// onLeader runs c on the leader of group, trying its replicas (and the leader they name)
// until one leads it, for as long as ctx allows: a new group elects its first leader.
func (o *Ops) onLeader(ctx context.Context, group uint32, replicas []string, c *wire.Backup) (string, *wire.BackupReply, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderPatience)
	defer cancel()
	var last error
	for {
		hint := ""
		for _, id := range replicas {
			if hint != "" {
				id, hint = hint, ""
			}
			r, err := o.backupCall(ctx, id, c)
			if err == nil {
				return id, r, nil
			}
			last = err
			var nl *partition.NotLeaderError
			if !errors.As(err, &nl) && !errors.Is(err, ErrUnavailable) {
				return "", nil, err
			}
			if nl != nil {
				hint = nl.LeaderID
			}
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("%w: group %d has no leader that answers: %v", admin.ErrUnavailable, group, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// backupCall runs c on node: here, or over the cluster RPC.
func (o *Ops) backupCall(ctx context.Context, node string, c *wire.Backup) (*wire.BackupReply, error) {
	if node == o.n.cfg.NodeID {
		r := o.n.serveBackup(ctx, c)
		return &r, r.Err
	}
	addr := o.n.addrOf(node)
	if addr == "" {
		return nil, fmt.Errorf("%w: node %q has no known address", ErrUnavailable, node)
	}
	r := &wire.BackupReply{}
	if err := o.n.rpc.invoke(ctx, addr, wire.MethodBackup, c, r, nil); err != nil {
		return nil, err
	}
	return r, r.Err
}

// serveBackup runs one step of a backup or restore on this node (wire.BackupOp).
func (n *Node) serveBackup(ctx context.Context, c *wire.Backup) wire.BackupReply {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	r, err := n.backupStep(ctx, c)
	r.Err = err
	return r
}

func (n *Node) backupStep(ctx context.Context, c *wire.Backup) (wire.BackupReply, error) {
	dir := n.backupDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return wire.BackupReply{}, err
	}
	path := filepath.Join(dir, c.ID)
	if c.Op != wire.BackupOpen && (c.ID == "" || filepath.Base(c.ID) != c.ID || strings.HasPrefix(c.ID, ".")) {
		return wire.BackupReply{}, fmt.Errorf("%w: bad scratch file name %q", meta.ErrInvalid, c.ID)
	}
	switch c.Op {
	case wire.BackupOpen:
		sweepScratch(dir)
		p, err := n.leading(c.Group)
		if err != nil {
			return wire.BackupReply{}, err
		}
		f, err := os.CreateTemp(dir, fmt.Sprintf("backup-%d-*.qbfs", c.Group))
		if err != nil {
			return wire.BackupReply{}, err
		}
		h := sha256.New()
		size, err := p.Backup(ctx, io.MultiWriter(f, h))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			return wire.BackupReply{}, err
		}
		return wire.BackupReply{ID: filepath.Base(f.Name()), Size: size, Sum: hex.EncodeToString(h.Sum(nil))}, nil
	case wire.BackupRead:
		f, err := os.Open(path)
		if err != nil {
			return wire.BackupReply{}, err
		}
		defer f.Close()
		buf := make([]byte, wire.MaxBackupChunk)
		k, err := f.ReadAt(buf, c.Offset)
		if err != nil && err != io.EOF {
			return wire.BackupReply{}, err
		}
		return wire.BackupReply{Data: buf[:k]}, nil
	case wire.BackupClose, wire.RestoreAbort:
		if c.Op == wire.RestoreAbort && c.ID == "probe" {
			// onLeader's question before a restore: does this node lead the group?
			_, err := n.leading(c.Group)
			return wire.BackupReply{}, err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return wire.BackupReply{}, err
		}
		return wire.BackupReply{}, nil
	case wire.RestoreWrite:
		flag := os.O_WRONLY | os.O_APPEND
		if c.Offset == 0 {
			sweepScratch(dir)
			flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		}
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return wire.BackupReply{}, err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() != c.Offset {
			return wire.BackupReply{}, fmt.Errorf("%w: restore chunk at offset %d of a scratch file of another size", meta.ErrInvalid, c.Offset)
		}
		if _, err := f.Write(c.Data); err != nil {
			return wire.BackupReply{}, err
		}
		return wire.BackupReply{}, f.Close()
	case wire.RestoreCommit:
		p, err := n.leading(c.Group)
		if err != nil {
			return wire.BackupReply{}, err
		}
		f, err := os.Open(path)
		if err != nil {
			return wire.BackupReply{}, err
		}
		defer func() {
			f.Close()
			os.Remove(path)
		}()
		h := sha256.New()
		size, err := io.Copy(h, f)
		if err != nil {
			return wire.BackupReply{}, err
		}
		if sum := hex.EncodeToString(h.Sum(nil)); size != c.Size || sum != c.Sum {
			return wire.BackupReply{}, fmt.Errorf("%w: the image of group %d arrived with %d bytes and SHA-256 %s, want %d and %s",
				admin.ErrBadArchive, c.Group, size, sum, c.Size, c.Sum)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return wire.BackupReply{}, err
		}
		return wire.BackupReply{}, p.RestoreBackup(ctx, f)
	}
	return wire.BackupReply{}, fmt.Errorf("%w: backup step %d", meta.ErrInvalid, c.Op)
}

// leading returns the replica of group hosted here, or a *partition.NotLeaderError when
// there is none (the caller tries another node); the partition itself answers not
// leader when it does not lead.
func (n *Node) leading(group uint32) (*partition.Partition, error) {
	n.mu.RLock()
	r := n.parts[group]
	n.mu.RUnlock()
	if r == nil {
		return nil, &partition.NotLeaderError{}
	}
	if !r.p.IsLeader() {
		id, addr := r.p.Leader()
		return nil, &partition.NotLeaderError{LeaderID: id, LeaderAddr: addr}
	}
	return r.p, nil
}

// sweepScratch removes scratch files older than scratchMaxAge.
func sweepScratch(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > scratchMaxAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
