package lazyfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// FS is one mounted lazy file system.
type FS struct {
	dir, backing string
	server       *fuse.Server

	mu    sync.Mutex
	files map[fs.StableAttr]*file // overlays by inode; owner: mu
	stats Stats                   // owner: mu
}

// Stats count what the file system did, for tests and reports.
type Stats struct {
	Syncs   int   // fsync and fdatasync calls of files
	Crashes int   // Crash calls
	Dropped int64 // bytes of unsynced pages thrown away by crashes
}

// file is the unsynced state of one backing file.
type file struct {
	name     string // the path it had when its overlay was made, for reports
	mu       sync.Mutex
	pages    map[int64][]byte // page index -> its logical content (pageSize bytes)
	size     int64            // logical size
	zeroFrom int64            // backing bytes at or past this offset are not part of the file
}

// Available reports why a lazy file system cannot be mounted here (not root, no
// /dev/fuse), or nil. Tests that need one skip when it reports an error.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("lazyfs: needs root (it calls mount(2))")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("lazyfs: no FUSE device here (%v): it needs /dev/fuse (a container needs --device /dev/fuse)", err)
	}
	return nil
}

// Mount mounts a lazy view of backing at dir (both must exist) and serves it until
// Unmount. name tags the mount (its source shows as lazyfs-name in /proc/mounts).
func Mount(dir, backing, name string) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	lfs := &FS{dir: dir, backing: backing, files: map[fs.StableAttr]*file{}}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	lr := &node{LoopbackNode: root.(*fs.LoopbackNode), fs: lfs}
	lr.RootData.RootNode = lr
	zero := time.Duration(0)
	server, err := fs.Mount(dir, lr, &fs.Options{
		// No attribute or entry caching: sizes come from the overlay, and a crash
		// changes them behind the kernel's back.
		AttrTimeout: &zero, EntryTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName: "lazyfs-" + name, Name: "lazyfs", DirectMountStrict: true,
			DisableXAttrs: true, MaxBackground: 64,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", dir, err)
	}
	lfs.server = server
	return lfs, nil
}

// Unmount detaches the file system and stops serving it. A process started in a new
// mount namespace while the file system was mounted (ip netns exec, by this test or
// another) holds a copy of the mount that an unmount here does not reach, and the
// server serves that copy until the connection ends: Unmount then aborts the
// connection through fusectl (/sys/fs/fuse/connections) when it is mounted, and
// otherwise returns an error after a few seconds, leaving the connection to end with
// the test process (which holds /dev/fuse).
func (l *FS) Unmount() error {
	var st syscall.Stat_t
	conn := -1
	if err := syscall.Stat(l.dir, &st); err == nil {
		conn = int(unix.Minor(st.Dev)) // the connection's number in fusectl
	}
	if err := syscall.Unmount(l.dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", l.dir, err)
	}
	done := make(chan struct{})
	go func() { l.server.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(2 * time.Second):
	}
	if conn >= 0 {
		os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", conn), []byte("1"), 0)
	}
	select {
	case <-done:
		return nil
	case <-time.After(3 * time.Second):
		return fmt.Errorf("lazyfs: %s unmounted here but still mounted in another mount namespace (connection %d); it ends with this process", l.dir, conn)
	}
}

// Crash throws away every write not yet synced, as a power loss would, and returns
// how many bytes of pages it dropped from each file (by the path the file had when it
// was first written since its last sync). Callers stop the processes using the file
// system first (kill -9): a crash under a running process is not a crash of that
// process.
func (l *FS) Crash() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	dropped := map[string]int64{}
	for _, f := range l.files {
		f.mu.Lock()
		if n := int64(len(f.pages)) * pageSize; n > 0 {
			dropped[f.name] += n
			l.stats.Dropped += n
		}
		f.mu.Unlock()
	}
	l.files = map[fs.StableAttr]*file{}
	l.stats.Crashes++
	return dropped
}

// Stats returns the counters so far.
func (l *FS) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Unsynced is how many bytes of pages wait for a sync.
func (l *FS) Unsynced() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, f := range l.files {
		f.mu.Lock()
		n += int64(len(f.pages)) * pageSize
		f.mu.Unlock()
	}
	return n
}

// overlay returns the state of the file with inode id, creating it from the backing
// file's size (fd, or path when fd < 0) when create is set; nil when there is none.
func (l *FS) overlay(id fs.StableAttr, fd int, path, name string, create bool) (*file, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.files[id]; f != nil || !create {
		return f, nil
	}
	var st syscall.Stat_t
	var err error
	if fd >= 0 {
		err = syscall.Fstat(fd, &st)
	} else {
		err = syscall.Stat(path, &st)
	}
	if err != nil {
		return nil, err
	}
	f := &file{name: name, pages: map[int64][]byte{}, size: st.Size, zeroFrom: st.Size}
	l.files[id] = f
	return f, nil
}

// forget drops the state of inode id (a file created anew).
func (l *FS) forget(id fs.StableAttr) {
	l.mu.Lock()
	delete(l.files, id)
	l.mu.Unlock()
}

// page returns page i of f for writing, filled from the backing file (rfd) on first use.
// f.mu is held.
func (f *file) page(rfd int, i int64) ([]byte, error) {
	if p := f.pages[i]; p != nil {
		return p, nil
	}
	p := make([]byte, pageSize)
	start := i * pageSize
	if n := min(int64(pageSize), f.zeroFrom-start, f.size-start); n > 0 {
		if _, err := syscall.Pread(rfd, p[:n], start); err != nil {
			return nil, err
		}
	}
	f.pages[i] = p
	return p, nil
}

func (f *file) write(rfd int, data []byte, off int64) error {
	for done := 0; done < len(data); {
		o := off + int64(done)
		p, err := f.page(rfd, o/pageSize)
		if err != nil {
			return err
		}
		done += copy(p[o%pageSize:], data[done:])
	}
	f.size = max(f.size, off+int64(len(data)))
	return nil
}

func (f *file) truncate(size int64) {
	for i, p := range f.pages {
		switch start := i * pageSize; {
		case start >= size:
			delete(f.pages, i)
		case start+pageSize > size:
			clear(p[size-start:])
		}
	}
	f.size = size
	f.zeroFrom = min(f.zeroFrom, size)
}

// read fills buf from offset off of the file's logical content and returns how many
// bytes it has (fewer at the end of the file).
func (f *file) read(rfd int, buf []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, nil
	}
	buf = buf[:min(int64(len(buf)), f.size-off)]
	clear(buf)
	if n := min(int64(len(buf)), f.zeroFrom-off); n > 0 {
		if _, err := syscall.Pread(rfd, buf[:n], off); err != nil {
			return 0, err
		}
	}
	for i := off / pageSize; i*pageSize < off+int64(len(buf)); i++ {
		if p := f.pages[i]; p != nil {
			start := i * pageSize
			if start >= off {
				copy(buf[start-off:], p)
			} else {
				copy(buf, p[off-start:])
			}
		}
	}
	return len(buf), nil
}

// sync writes the overlay through to the backing file (wfd, open for writing) and
// fsyncs it. f.mu is held.
func (f *file) sync(wfd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(wfd, &st); err != nil {
		return err
	}
	if f.zeroFrom < st.Size {
		if err := syscall.Ftruncate(wfd, f.zeroFrom); err != nil {
			return err
		}
	}
	for i, p := range f.pages {
		start := i * pageSize
		if n := min(int64(pageSize), f.size-start); n > 0 {
			if _, err := syscall.Pwrite(wfd, p[:n], start); err != nil {
				return err
			}
		}
	}
	if err := syscall.Ftruncate(wfd, f.size); err != nil {
		return err
	}
	if err := syscall.Fsync(wfd); err != nil {
		return err
	}
	clear(f.pages)
	f.zeroFrom = f.size
	return nil
}

// node is a loopback node whose regular files keep unsynced writes in the overlay.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node of the tree a lazy one.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) path() string { return n.Path(nil) }

func (n *node) realPath() string { return n.RootData.Path + "/" + n.path() }

func (n *node) id() fs.StableAttr { return n.EmbeddedInode().StableAttr() }

// Open opens the backing file without O_TRUNC (a truncation is unsynced data) and
// O_APPEND (the kernel gives appends their offset).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	trunc := flags&syscall.O_TRUNC != 0
	fh, ff, errno := n.LoopbackNode.Open(ctx, readable(flags)&^(syscall.O_TRUNC|syscall.O_APPEND))
	if errno != 0 {
		return nil, 0, errno
	}
	lf := &handle{inner: fh.(*fs.LoopbackFile), fs: n.fs, id: n.id(), fd: fdOf(fh), name: n.path()}
	if trunc {
		f, err := n.fs.overlay(lf.id, lf.fd, "", n.path(), true)
		if err != nil {
			lf.inner.Release(ctx)
			return nil, 0, fs.ToErrno(err)
		}
		f.mu.Lock()
		f.truncate(0)
		f.mu.Unlock()
	}
	return lf, ff, 0
}

// Create creates the backing file at once (metadata is not simulated); its data is
// unsynced like any other.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, ff, errno := n.LoopbackNode.Create(ctx, name, readable(flags)&^syscall.O_TRUNC, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	id := ch.StableAttr()
	n.fs.forget(id) // a new file, perhaps on a reused inode number
	name = filepath.Join(n.path(), name)
	return ch, &handle{inner: fh.(*fs.LoopbackFile), fs: n.fs, id: id, fd: fdOf(fh), name: name}, ff, 0
}

// readable turns write-only into read-write: a partial page write reads the rest of
// the page from the backing file.
func readable(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// Lookup reports a file's logical size, as Getattr does.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, errno
	}
	if of, _ := n.fs.overlay(ch.StableAttr(), -1, "", "", false); of != nil {
		of.mu.Lock()
		out.Size, out.Blocks = uint64(of.size), uint64((of.size+511)/512)
		of.mu.Unlock()
	}
	return ch, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, inner(f), out); errno != 0 {
		return errno
	}
	if of, _ := n.fs.overlay(n.id(), -1, "", "", false); of != nil {
		of.mu.Lock()
		out.Size, out.Blocks = uint64(of.size), uint64((of.size+511)/512)
		of.mu.Unlock()
	}
	return 0
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, inner(f), flags, mask, out); errno != 0 {
		return errno
	}
	if of, _ := n.fs.overlay(n.id(), -1, "", "", false); of != nil {
		of.mu.Lock()
		out.Size, out.Blocks = uint64(of.size), uint64((of.size+511)/512)
		of.mu.Unlock()
	}
	return 0
}

// Setattr keeps a size change in the overlay and applies the rest at once.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		fd := -1
		if h, ok := f.(*handle); ok {
			fd = h.fd
		}
		of, err := n.fs.overlay(n.id(), fd, n.realPath(), n.path(), true)
		if err != nil {
			return fs.ToErrno(err)
		}
		of.mu.Lock()
		of.truncate(int64(sz))
		of.mu.Unlock()
		in.Valid &^= fuse.FATTR_SIZE
	}
	if errno := n.LoopbackNode.Setattr(ctx, inner(f), in, out); errno != 0 {
		return errno
	}
	return n.Getattr(ctx, f, out)
}

// Fsync writes a file's overlay through (fsync and fdatasync alike) and passes a
// directory's fsync through.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.sync()
	}
	fd, err := syscall.Open(n.realPath(), syscall.O_RDONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	if n.EmbeddedInode().IsDir() {
		return fs.ToErrno(syscall.Fsync(fd))
	}
	h := &handle{fs: n.fs, id: n.id(), fd: fd, name: n.path()}
	return h.sync()
}

// CopyFileRange is refused: the kernel then copies through Read and Write.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func inner(f fs.FileHandle) fs.FileHandle {
	if h, ok := f.(*handle); ok {
		return h.inner
	}
	return f
}

func fdOf(fh fs.FileHandle) int {
	fd, _ := fh.(*fs.LoopbackFile).PassthroughFd()
	return fd
}

// handle is an open file: reads and writes go through the overlay. It implements no
// passthrough, so the kernel never bypasses it.
type handle struct {
	inner *fs.LoopbackFile
	fs    *FS
	id    fs.StableAttr
	fd    int    // the backing file, owned by inner
	name  string // its path when opened
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
	_ fs.FileGetlker  = (*handle)(nil)
	_ fs.FileSetlker  = (*handle)(nil)
	_ fs.FileSetlkwer = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f, _ := h.fs.overlay(h.id, -1, "", "", false)
	if f == nil {
		n, err := syscall.Pread(h.fd, buf, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return fuse.ReadResultData(buf[:n]), 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.read(h.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f, err := h.fs.overlay(h.id, h.fd, "", h.name, true)
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.write(h.fd, data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	return uint32(len(data)), 0
}

// sync writes the file's overlay through, through a descriptor of its own (h's may be
// read-only), and fsyncs it.
func (h *handle) sync() syscall.Errno {
	h.fs.mu.Lock()
	h.fs.stats.Syncs++
	h.fs.mu.Unlock()
	f, _ := h.fs.overlay(h.id, -1, "", "", false)
	if f == nil {
		return fs.ToErrno(syscall.Fsync(h.fd))
	}
	wfd, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", h.fd), syscall.O_WRONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(wfd)
	f.mu.Lock()
	defer f.mu.Unlock()
	return fs.ToErrno(f.sync(wfd))
}

func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.inner.Flush(ctx) }
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.inner.Release(ctx) }

func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.inner.Getlk(ctx, owner, lk, flags, out)
}

func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.inner.Setlk(ctx, owner, lk, flags)
}

func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.inner.Setlkw(ctx, owner, lk, flags)
}
