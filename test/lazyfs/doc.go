// Package lazyfs is a test file system that loses what was not fsynced: a FUSE
// passthrough to a real directory that keeps every file's writes since its last
// fsync (or fdatasync) in memory, and on Crash throws them away, as a power loss does
// to a disk's volatile cache and the kernel's dirty pages. kill -9 alone keeps the
// page cache, so it proves nothing about fsync; Crash after kill -9 does. Jepsen's
// LazyFS (github.com/dsrhaslab/lazyfs) is the model; this one is written with
// github.com/hanwen/go-fuse/v2 so that the suite needs nothing but Go and /dev/fuse.
//
// # What is simulated
//
//   - File data: write, pwrite, truncate (ftruncate, O_TRUNC) go to an in-memory
//     overlay of 4 KiB pages and a logical size; reads, stat and mmap see the overlay
//     over the backing file. fsync or fdatasync of any handle of a file writes that
//     file's overlay through (truncations first, then pages, then the final size) and
//     fsyncs the backing file. close does not sync.
//   - Crash drops the overlay of every file: what was not synced is gone, what was
//     synced stays. A file's data is all-or-nothing per sync; torn pages within one
//     unsynced range are not simulated.
//   - Metadata operations (create, mkdir, rename, link, unlink, rmdir, chmod, utimes)
//     are applied to the backing directory at once and survive a crash whether or not
//     the directory was fsynced. A file created and written but not synced survives a
//     crash empty; one renamed over another after an unsynced write is empty after a
//     crash (ext4 without auto_da_alloc, XFS). Directory fsync is passed through and
//     changes nothing the simulation keeps. The simulation is therefore strict about
//     data and lenient about names: it finds a missing fsync of a file, not a
//     missing fsync of a directory.
//
// Mount needs root and /dev/fuse (it calls mount(2) itself; no fusermount). Every
// mount is named lazyfs-NAME (see Mount), so a sweep can find what a killed process
// left behind.
//
// # A module of its own
//
// This directory is a Go module of its own (go.mod here, no dependency on the product
// module), so that go-fuse stays out of the product's go.mod, as hashicorp/raft keeps
// fuzzy/ apart. The product's tests do not import it: test/lazyfsctl builds
// cmd/lazyfs, which mounts one file system and serves a line protocol on its standard
// input and output (crash, stats, unsynced, unmount), and drives one such process per
// mount. The process unmounts and exits when its standard input ends, so a mount does
// not outlive the test that made it. This package's own tests mount in process.
//
// Goroutines: go-fuse serves each mount with goroutines of its own; FS.mu guards the
// overlays and counters they share with Crash, Stats and Unsynced.
package lazyfs
