// Package lazyfsctl runs test/lazyfs, the test file system that loses what was not
// fsynced, for the product module's power-loss tests: a FUSE passthrough that keeps
// every file's writes since its last fsync in memory and throws them away on Crash, as
// a power cut does to a disk's cache and the kernel's dirty pages (see test/lazyfs's
// doc.go for what it simulates).
//
// test/lazyfs is a Go module of its own, so that its FUSE library stays out of the
// product's go.mod; this package, standard library only, builds its command once per
// test binary (go build in test/lazyfs, into a directory of the system's temporary
// directory named after this process, removed by the next build once this process is
// gone) and runs one process of it per mount, driven over its standard input and
// output. That process unmounts and exits when told to (Unmount), when its standard
// input ends (this process died, a test timed out) or on SIGINT or SIGTERM, so no
// mount outlives its test. A mount whose process was killed (-9) answers "transport
// endpoint is not connected" until Sweep detaches it.
//
// Mount needs root and /dev/fuse (the command calls mount(2) itself; no fusermount),
// and the go command with test/lazyfs's modules (the module cache, or the module
// proxy). Every mount is named lazyfs-NAME, so that a sweep finds what a killed process
// left behind.
//
// Goroutines: none. Each call writes one command and reads its answer, with a deadline,
// under the FS's lock.
//
// Imports: the standard library only (test/deps_test.go): it runs test/lazyfs, a module
// of its own, as a process, so that go-fuse stays out of the product's go.mod.
package lazyfsctl
