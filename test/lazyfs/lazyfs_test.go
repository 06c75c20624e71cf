package lazyfs

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mount mounts a lazy file system over a fresh backing directory for one test.
func mount(t *testing.T) (*FS, string, string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, backing := filepath.Join(root, "mnt"), filepath.Join(root, "backing")
	for _, d := range []string{dir, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Mount(dir, backing, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return l, dir, backing
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, p, s string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A write that was never synced is read back until the crash and gone after it; the
// file itself (metadata) stays, empty.
func TestUnsyncedWriteIsGoneAfterCrash(t *testing.T) {
	l, dir, backing := mount(t)
	p := filepath.Join(dir, "f")
	write(t, p, "hello", false)
	if got := read(t, p); got != "hello" {
		t.Fatalf("before the crash: %q, want hello", got)
	}
	if got := read(t, filepath.Join(backing, "f")); got != "" {
		t.Fatalf("backing file holds %q before any sync", got)
	}
	if d := l.Crash(); len(d) != 1 || d["f"] != pageSize {
		t.Errorf("Crash dropped %v, want one page of f", d)
	}
	if got := read(t, p); got != "" {
		t.Fatalf("after the crash: %q, want the file empty", got)
	}
	if st := l.Stats(); st.Crashes != 1 || st.Dropped != pageSize {
		t.Errorf("stats %+v, want one crash dropping one page", st)
	}
}

// What was synced survives the crash; what was written after the sync does not.
func TestSyncedWriteSurvivesCrash(t *testing.T) {
	l, dir, _ := mount(t)
	p := filepath.Join(dir, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("kept;")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.WriteString("lost")
	if got := read(t, p); got != "kept;lost" {
		t.Fatalf("before the crash: %q", got)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != 9 {
		t.Fatalf("stat before the crash: %v %v, want size 9", fi, err)
	}
	f.Close()
	l.Crash()
	if got := read(t, p); got != "kept;" {
		t.Fatalf("after the crash: %q, want kept;", got)
	}
}

// populate faults a mapping of a file on this process's own mount in with mlock, a
// system call, before Go code reads it. A page fault taken by Go code blocks its thread
// in the kernel until this process's FUSE server answers; if a garbage collection stops
// the world meanwhile, it waits for that thread forever and the server never runs
// again (the test hung so, 6 minutes, until killed). In a system call the thread does
// not hold up the stop.
func populate(t *testing.T, m []byte) {
	t.Helper()
	if err := syscall.Mlock(m); err != nil {
		t.Fatal(err)
	}
}

// bbolt writes pages with pwrite, grows the file with ftruncate, syncs with
// fdatasync and reads through a read-only mmap.
func TestPwriteFdatasyncMmap(t *testing.T) {
	l, dir, _ := mount(t)
	p := filepath.Join(dir, "db")
	fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Close(fd) }()
	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, pageSize) }
	if err := syscall.Ftruncate(fd, 4*pageSize); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Pwrite(fd, page('a'), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Pwrite(fd, page('c'), 2*pageSize); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	// Unsynced: page 0 rewritten, page 1 written half, the file grown.
	syscall.Pwrite(fd, page('x'), 0)
	syscall.Pwrite(fd, page('y')[:100], pageSize+10)
	syscall.Ftruncate(fd, 8*pageSize)
	m, err := syscall.Mmap(fd, 0, 8*pageSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	populate(t, m)
	if m[0] != 'x' || m[pageSize+10] != 'y' || m[pageSize+9] != 0 || m[2*pageSize] != 'c' {
		t.Fatalf("mmap before the crash: %q %q %q %q", m[0], m[pageSize+9], m[pageSize+10], m[2*pageSize])
	}
	syscall.Munmap(m)
	syscall.Close(fd)
	l.Crash()

	fd, err = syscall.Open(p, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Size != 4*pageSize {
		t.Fatalf("after the crash: size %d (%v), want %d", st.Size, err, 4*pageSize)
	}
	m, err = syscall.Mmap(fd, 0, 4*pageSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	populate(t, m)
	defer syscall.Munmap(m)
	want := append(append(append(page('a'), make([]byte, pageSize)...), page('c')...), make([]byte, pageSize)...)
	if !bytes.Equal(m, want) {
		t.Fatalf("after the crash the file is not what was synced (page 0 starts %q, page 1 %q)", m[0], m[pageSize+10])
	}
}

// The write-then-rename pattern: a synced file renamed into place keeps its data; an
// unsynced one renamed over it leaves the name pointing to an empty file.
func TestRenameOfSyncedFile(t *testing.T) {
	l, dir, _ := mount(t)
	final := filepath.Join(dir, "state")
	tmp := final + ".tmp"
	write(t, tmp, "v1", true)
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("directory fsync: %v", err)
	}
	d.Close()
	l.Crash()
	if got := read(t, final); got != "v1" {
		t.Fatalf("synced then renamed: %q after the crash, want v1", got)
	}

	write(t, tmp, "v2", false)
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	if got := read(t, final); got != "v2" {
		t.Fatalf("before the crash: %q", got)
	}
	l.Crash()
	if got := read(t, final); got != "" {
		t.Fatalf("unsynced then renamed: %q after the crash, want an empty file", got)
	}
}

// A truncation is data too: undone by a crash unless synced, and a shrink then grow
// reads zeros where the old data was.
func TestTruncateIsUnsyncedUntilSync(t *testing.T) {
	l, dir, _ := mount(t)
	p := filepath.Join(dir, "f")
	write(t, p, "0123456789", true)
	if err := os.Truncate(p, 3); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 6); err != nil {
		t.Fatal(err)
	}
	if got := read(t, p); got != "012\x00\x00\x00" {
		t.Fatalf("shrunk and grown: %q", got)
	}
	l.Crash()
	if got := read(t, p); got != "0123456789" {
		t.Fatalf("after the crash: %q, want the synced content", got)
	}
	write(t, p, "ab", true) // O_TRUNC, then synced
	l.Crash()
	if got := read(t, p); got != "ab" {
		t.Fatalf("truncated, written and synced: %q after the crash", got)
	}
	if l.Unsynced() != 0 {
		t.Errorf("%d bytes unsynced after a sync", l.Unsynced())
	}
}
