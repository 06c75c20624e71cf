package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/quorumbus/quorumbus/fsm"
)

// Bodies keeps the message bodies of a node's partitions on disk once those held in
// memory reach a budget, so a node can hold a backlog larger than its memory. One Bodies
// serves every partition of a node (Config.Bodies); each partition writes its own
// segment files into its directory.
//
// The files are scratch, not durable state: the Raft log and snapshots hold every body,
// and a replica rebuilds its fsm from them on start, so the directory is emptied when
// Bodies opens and nothing in it is ever fsynced.
//
// A spilled body is read back with one pread when it is delivered, peeked or written into
// a snapshot. Segment files are append-only; one is deleted once every body in it is
// gone. Bodies are freed by the garbage collector's cleanups (a spilled body can be
// shared by a topic's copies, a snapshot being written and a delivery on its way, so
// nothing else knows when the last of them lets go), so disk space comes back after a
// collection, and a node whose disk budget is full asks for one.
type Bodies struct {
	dir        string
	memBudget  int64 // bytes of bodies held in memory beyond which new ones are spilled; 0: no spilling
	diskBudget int64 // bytes of spilled bodies beyond which sends are refused; 0: no limit
	segBytes   int64
	logger     hclog.Logger

	mem     atomic.Int64   // bytes of bodies the node's fsms hold in memory (fsm.MemoryBodyBytes)
	disk    atomic.Int64   // bytes in segment files not yet deleted
	live    atomic.Int64   // bytes of spilled bodies still referenced
	segs    atomic.Int64   // segment files not yet deleted
	spills  atomic.Int64   // bodies written, ever
	reads   atomic.Int64   // bodies read back, ever
	refused atomic.Int64   // sends refused because both budgets were full
	next    atomic.Uint64  // the last segment number handed out
	gcAt    atomic.Int64   // UnixNano of the last collection asked for to reclaim disk
	miss    atomic.Int64   // the size of the last body that did not fit in the memory budget
	warned  atomic.Bool    // a write error was logged
	gcs     sync.WaitGroup // the collections reclaim asked for; Close waits for them
}

// BodiesConfig configures a node's Bodies.
type BodiesConfig struct {
	Dir          string // emptied on open
	MemoryBudget int64  // bytes; > 0
	DiskBudget   int64  // bytes of spilled bodies still referenced; 0: no limit
	SegmentBytes int64  // 0: 64 MiB
	Logger       hclog.Logger
}

// OpenBodies empties cfg.Dir and returns a store that spills bodies into it.
func OpenBodies(cfg BodiesConfig) (*Bodies, error) {
	if cfg.MemoryBudget <= 0 {
		return nil, fmt.Errorf("partition: bodies: memory budget must be > 0, got %d", cfg.MemoryBudget)
	}
	if cfg.DiskBudget < 0 {
		return nil, fmt.Errorf("partition: bodies: disk budget must be >= 0, got %d", cfg.DiskBudget)
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "bodies", Level: hclog.Warn})
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("partition: bodies: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("partition: bodies: %w", err)
	}
	return &Bodies{dir: cfg.Dir, memBudget: cfg.MemoryBudget, diskBudget: cfg.DiskBudget,
		segBytes: cfg.SegmentBytes, logger: cfg.Logger}, nil
}

// BodiesStats is what Stats reports.
type BodiesStats struct {
	MemoryBudget, DiskBudget int64 // as configured (0: no limit on disk)
	MemoryBytes              int64 // bodies held in memory by the node's fsms, a topic's copies each counted
	LiveBytes                int64 // spilled bodies still referenced: what the disk budget bounds
	DiskBytes                int64 // segment files, also the space of bodies gone from a file still in use
	Segments                 int64
	Spilled, Read, Refused   int64 // counters since start
}

// Stats reports the store's counters.
func (b *Bodies) Stats() BodiesStats {
	return BodiesStats{MemoryBudget: b.memBudget, DiskBudget: b.diskBudget, MemoryBytes: b.mem.Load(),
		DiskBytes: b.disk.Load(), LiveBytes: b.live.Load(), Segments: b.segs.Load(),
		Spilled: b.spills.Load(), Read: b.reads.Load(), Refused: b.refused.Load()}
}

// ErrStorageFull is wrapped (with fsm.ErrQuotaExceeded) by a send refused because the
// node holds as many bodies in memory and on disk as its budgets allow.
var ErrStorageFull = errors.New("node message storage is full")

// admit refuses a send when neither budget has room for a body of the size that last
// found none in memory. The leader checks before it proposes;
// followers apply whatever was committed (keeping bodies in memory when their own disk
// is full).
func (b *Bodies) admit() error {
	if b == nil || b.diskBudget == 0 {
		return nil
	}
	if n := max(b.miss.Load(), 1); b.live.Load()+n <= b.diskBudget || b.mem.Load()+n <= b.memBudget {
		return nil
	}
	b.reclaim()
	b.refused.Add(1)
	return fmt.Errorf("%w: %w: %d KiB of message bodies in memory and %d KiB on disk; its budgets are %d and %d KiB "+
		"(--body-memory-budget-mb, --body-disk-budget-mb): receive messages to make room",
		fsm.ErrQuotaExceeded, ErrStorageFull, b.mem.Load()>>10, b.live.Load()>>10, b.memBudget>>10, b.diskBudget>>10)
}

// reclaim asks for a garbage collection, at most once every 5 s, so that bodies no
// longer referenced release their segments.
func (b *Bodies) reclaim() {
	now := time.Now().UnixNano()
	last := b.gcAt.Load()
	if now-last < int64(5*time.Second) || !b.gcAt.CompareAndSwap(last, now) {
		return
	}
	b.gcs.Go(runtime.GC)
}

// Close waits for the garbage collections the store asked for. The partitions using it
// close first; the files stay (the next OpenBodies empties the directory).
func (b *Bodies) Close() {
	b.gcs.Wait()
}

// spiller is one partition's side of Bodies: fsm.Bodies for its fsm. Spill runs on
// raft's FSM goroutine under the machine's lock.
type spiller struct {
	b   *Bodies
	seg *bodySeg
	blk *block
	// kept is the bytes this partition's fsm kept in memory since the machine last
	// added its fsm's count to b.mem (after every batch).
	kept int64
}

var _ fsm.Bodies = (*spiller)(nil)

// Spill writes p to the partition's current segment when the node's bodies in memory
// have reached the budget, unless the disk budget is full too (then p stays in memory:
// the entry is committed and must be applied; the leader refuses further sends).
func (s *spiller) Spill(p []byte) fsm.Spilled {
	b := s.b
	n := int64(len(p))
	if b.mem.Load()+s.kept+n <= b.memBudget {
		s.kept += n
		return nil
	}
	b.miss.Store(n)
	if b.diskBudget > 0 && b.live.Load()+n > b.diskBudget {
		b.reclaim()
		s.kept += n
		return nil
	}
	if s.seg == nil || s.seg.size+n > b.segBytes {
		if err := s.rotate(); err != nil {
			s.failed(err)
			s.kept += n
			return nil
		}
	}
	if _, err := s.seg.f.WriteAt(p, s.seg.size); err != nil {
		s.failed(err)
		s.kept += n
		return nil
	}
	if s.blk == nil || len(s.blk.refs) == cap(s.blk.refs) {
		s.blk = newBlock(s.seg)
	}
	r := s.blk.add(s.seg.size, len(p))
	s.seg.size += n
	s.seg.live.Add(n)
	b.disk.Add(n)
	b.live.Add(n)
	b.spills.Add(1)
	return r
}

func (s *spiller) failed(err error) {
	if s.b.warned.CompareAndSwap(false, true) {
		s.b.logger.Error("cannot spill message bodies to disk; keeping them in memory", "error", err)
	}
}

// rotate seals the current segment and opens the next.
func (s *spiller) rotate() error {
	s.seal()
	if err := os.MkdirAll(s.b.dir, 0o750); err != nil {
		return err
	}
	path := filepath.Join(s.b.dir, strconv.FormatUint(s.b.next.Add(1), 10)+".seg")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	s.seg = &bodySeg{b: s.b, f: f, path: path}
	s.b.segs.Add(1)
	return nil
}

// seal stops writing to the current segment (rotation, or the partition closing); it is
// deleted once its last body is gone.
func (s *spiller) seal() {
	if s.seg == nil {
		return
	}
	seg := s.seg
	s.seg, s.blk = nil, nil
	seg.sealed.Store(true)
	if seg.live.Load() == 0 {
		seg.remove()
	}
}

// bodySeg is one append-only file of spilled bodies.
type bodySeg struct {
	b    *Bodies
	f    *os.File
	path string
	size int64 // bytes written (owner: the spiller until sealed, then read-only)

	live    atomic.Int64 // bytes of bodies in it still referenced
	sealed  atomic.Bool
	removed atomic.Bool
}

func (g *bodySeg) release(n int64) {
	g.b.live.Add(-n)
	if g.live.Add(-n) == 0 && g.sealed.Load() {
		g.remove()
	}
}

func (g *bodySeg) remove() {
	if !g.removed.CompareAndSwap(false, true) {
		return
	}
	g.f.Close()
	if err := os.Remove(g.path); err != nil && !os.IsNotExist(err) {
		g.b.logger.Warn("cannot delete a spilled-body segment", "path", g.path, "error", err)
	}
	g.b.disk.Add(-g.size) // size is final: sealed is set after the last write
	g.b.segs.Add(-1)
}

// block is an array of body references written to one segment in a row. A message's
// fsm.Spilled points into it, so the array lives while any of them does; one cleanup per
// block (not per body) then releases their bytes.
type block struct {
	refs []bodyRef
	acct *blockAcct
}

type blockAcct struct {
	seg   *bodySeg
	bytes atomic.Int64
}

const blockRefs = 256

func newBlock(seg *bodySeg) *block {
	k := &block{refs: make([]bodyRef, 0, blockRefs), acct: &blockAcct{seg: seg}}
	runtime.AddCleanup(&k.refs[:1][0], func(a *blockAcct) { a.seg.release(a.bytes.Load()) }, k.acct)
	return k
}

func (k *block) add(off int64, n int) *bodyRef {
	k.refs = append(k.refs, bodyRef{seg: k.acct.seg, off: off, n: int32(n)})
	k.acct.bytes.Add(int64(n))
	return &k.refs[len(k.refs)-1]
}

// bodyRef is a spilled body: fsm.Spilled.
type bodyRef struct {
	seg *bodySeg
	off int64
	n   int32
}

func (r *bodyRef) Len() int { return int(r.n) }

func (r *bodyRef) Read() ([]byte, error) {
	p := make([]byte, r.n)
	_, err := r.seg.f.ReadAt(p, r.off)
	runtime.KeepAlive(r) // the segment may not be deleted while r is being read
	if err != nil {
		return nil, fmt.Errorf("partition: reading a spilled body from %s: %w", r.seg.path, err)
	}
	r.seg.b.reads.Add(1)
	return p, nil
}

// loadBodies replaces the spilled bodies of ms by their bytes, for callers outside the
// partition. ms are the caller's (fsm results are copies).
func loadBodies(ms []*fsm.Message) error {
	for _, m := range ms {
		if m == nil || m.Spilled == nil {
			continue
		}
		p, err := m.Spilled.Read()
		if err != nil {
			return err
		}
		m.Payload, m.Spilled = p, nil
	}
	return nil
}

// useBodies makes the machine's fsm spill through b (nil: keep every body in memory).
// Called once, before raft starts.
func (m *machine) useBodies(b *Bodies) {
	if b == nil {
		return
	}
	m.sp = &spiller{b: b}
	m.f.SetBodies(m.sp)
}

// syncBodies adds what the fsm's bodies in memory changed by to the node's count. Under
// mu, after every batch and restore.
func (m *machine) syncBodies() {
	if m.sp == nil {
		return
	}
	now := m.f.MemoryBodyBytes()
	m.sp.b.mem.Add(now - m.memBytes)
	m.memBytes, m.sp.kept = now, 0
	m.sp.blk = nil // the next batch starts a block: a spiller holding one would keep it alive
}

// closeBodies takes the fsm's bodies out of the node's count and seals its segment.
func (m *machine) closeBodies() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sp == nil {
		return
	}
	m.sp.b.mem.Add(-m.memBytes)
	m.memBytes = 0
	m.sp.seal()
}
