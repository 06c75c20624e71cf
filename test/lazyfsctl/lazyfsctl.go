package lazyfsctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds of the waits on the command (a busy 2-core machine is the yardstick).
const (
	buildTimeout   = 5 * time.Minute  // go build of test/lazyfs (the module cache warm)
	mountTimeout   = 30 * time.Second // the first answer: mounted or not
	replyTimeout   = 30 * time.Second // crash, stats, unsynced
	unmountTimeout = 20 * time.Second // the command's own unmount waits up to 5 s
)

// FS is one mounted lazy file system, served by a lazyfs process of its own.
type FS struct {
	dir string

	mu   sync.Mutex // serializes commands; guards the fields below
	cmd  *exec.Cmd
	in   *os.File      // the command's standard input
	out  *os.File      // its standard output
	rd   *bufio.Reader // over out
	done bool          // unmounted, or the process is gone
	ok   bool          // done by a successful Unmount
}

// Stats count what the file system did, for tests and reports.
type Stats struct {
	Syncs   int   // fsync and fdatasync calls of files
	Crashes int   // Crash calls
	Dropped int64 // bytes of unsynced pages thrown away by crashes
}

// reply is one answer line of the lazyfs command.
type reply struct {
	Error    string           `json:"error"`
	Dropped  map[string]int64 `json:"dropped"`
	Stats    *Stats           `json:"stats"`
	Unsynced *int64           `json:"unsynced"`
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
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(bin, "-name", name, dir, backing)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close() // the child's ends: its exit closes the pipes
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("lazyfs: start %s: %w", bin, err)
	}
	l := &FS{dir: dir, cmd: cmd, in: inW, out: outR, rd: bufio.NewReader(outR)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.read(mountTimeout); err != nil {
		l.stop() // it exits when it cannot mount
		return nil, fmt.Errorf("lazyfs: mount %s: %w", dir, err)
	}
	return l, nil
}

// call sends one command and returns its answer; l.mu is held. An error that leaves
// the protocol in doubt (no answer in time, the process gone) kills the process: the
// mount then fails every access, rather than keep what a crash should have dropped.
func (l *FS) call(command string, timeout time.Duration) (reply, error) {
	if l.done {
		return reply{}, fmt.Errorf("lazyfs: %s: %s is unmounted", command, l.dir)
	}
	if _, err := l.in.WriteString(command + "\n"); err != nil {
		l.stop()
		return reply{}, fmt.Errorf("lazyfs: %s of %s: %w", command, l.dir, err)
	}
	r, err := l.read(timeout)
	if err != nil {
		return reply{}, fmt.Errorf("lazyfs: %s of %s: %w", command, l.dir, err)
	}
	return r, nil
}

// read reads one answer line within timeout; l.mu is held. A failure kills the process.
func (l *FS) read(timeout time.Duration) (reply, error) {
	l.out.SetReadDeadline(time.Now().Add(timeout))
	line, err := l.rd.ReadBytes('\n')
	if err != nil {
		l.stop()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return reply{}, fmt.Errorf("no answer in %v", timeout)
		}
		return reply{}, fmt.Errorf("the lazyfs process ended (%v): %w", l.cmd.ProcessState, err)
	}
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		l.stop()
		return reply{}, fmt.Errorf("answer %q: %w", line, err)
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	return r, nil
}

// stop kills the process and releases its pipes; l.mu is held.
func (l *FS) stop() {
	if l.done {
		return
	}
	l.done = true
	l.cmd.Process.Kill()
	l.wait()
}

// wait reaps the process and closes this side's pipes; l.mu is held.
func (l *FS) wait() {
	l.in.Close()
	l.cmd.Wait()
	l.out.Close()
}

// Unmount detaches the file system and stops its process; once it succeeded, later
// calls do nothing. A process started in a new mount namespace while the file system
// was mounted (ip netns exec) holds a copy of the mount that an unmount here does not
// reach: the lazyfs process then aborts the connection through fusectl
// (/sys/fs/fuse/connections) or, failing that, reports an error after a few seconds and
// exits, which ends the connection.
func (l *FS) Unmount() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok {
		return nil
	}
	if l.done {
		return fmt.Errorf("lazyfs: unmount %s: its process is gone", l.dir)
	}
	_, err := l.call("unmount", unmountTimeout)
	if !l.done {
		l.done = true
		l.wait() // it exits after answering
	}
	l.ok = err == nil
	return err
}

// Crash throws away every write not yet synced, as a power loss would, and returns
// how many bytes of pages it dropped from each file (by the path the file had when it
// was first written since its last sync). Callers stop the processes using the file
// system first (kill -9): a crash under a running process is not a crash of that
// process. An error means the crash may not have happened; the mount is then dead.
func (l *FS) Crash() (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.call("crash", replyTimeout)
	if err != nil {
		return nil, err
	}
	if r.Dropped == nil {
		r.Dropped = map[string]int64{}
	}
	return r.Dropped, nil
}

// Stats returns the counters so far.
func (l *FS) Stats() (Stats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.call("stats", replyTimeout)
	if err != nil {
		return Stats{}, err
	}
	if r.Stats == nil {
		return Stats{}, fmt.Errorf("lazyfs: stats of %s: an answer without stats", l.dir)
	}
	return *r.Stats, nil
}

// Unsynced is how many bytes of pages wait for a sync.
func (l *FS) Unsynced() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.call("unsynced", replyTimeout)
	if err != nil {
		return 0, err
	}
	if r.Unsynced == nil {
		return 0, fmt.Errorf("lazyfs: unsynced of %s: an answer without a count", l.dir)
	}
	return *r.Unsynced, nil
}

// MountTemp mounts a lazy file system on a new directory of t's (its backing directory
// beside it), unmounted when t ends, and returns it with the directory to use; it skips
// t when lazyfs cannot run here. name tags the mount as in Mount.
func MountTemp(t testing.TB, name string) (*FS, string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, disk := filepath.Join(root, "data"), filepath.Join(root, "disk")
	for _, d := range []string{dir, disk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Mount(dir, disk, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Logf("%v", err)
		}
	})
	return l, dir
}

// Sweep detaches every lazyfs mount whose tag starts with prefix: what a killed lazyfs
// process left behind (its mounts answer "transport endpoint is not connected").
func Sweep(prefix string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if ok && len(a) >= 5 && len(b) >= 2 && b[0] == "fuse.lazyfs" && strings.HasPrefix(b[1], "lazyfs-"+prefix) {
			dirs = append(dirs, strings.ReplaceAll(a[4], `\040`, " "))
		}
	}
	for _, d := range dirs {
		syscall.Unmount(d, syscall.MNT_DETACH)
	}
}

// build is the lazyfs command built for this process.
var build struct {
	once sync.Once
	path string
	err  error
}

// binary builds the lazyfs command once per process and returns its path.
func binary() (string, error) {
	build.once.Do(func() { build.path, build.err = buildBinary() })
	return build.path, build.err
}

// buildPrefix names the build directories in os.TempDir(), one per process (its pid).
const buildPrefix = "quorumbus-lazyfs-"

func buildBinary() (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	sweepBuilds()
	dir := filepath.Join(os.TempDir(), buildPrefix+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "lazyfs")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	// Its own go.mod and go.sum as they are, whatever workspace the caller has; no VCS
	// stamp (a test's build has no use for it, and git may refuse a clone it does not own).
	cmd := exec.CommandContext(ctx, goTool(), "build", "-mod=readonly", "-buildvcs=false", "-o", bin, "./cmd/lazyfs")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lazyfs: go build in %s: %v\n%s", src, err, out)
	}
	return bin, nil
}

// sourceDir finds test/lazyfs: beside this package in the product module, whose go.mod
// the go command finds from the working directory (a test's is its package's).
func sourceDir() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("lazyfs: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("lazyfs: not inside the quorumbus module (go env GOMOD is %q)", gomod)
	}
	src := filepath.Join(filepath.Dir(gomod), "test", "lazyfs")
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		return "", fmt.Errorf("lazyfs: its module is not at %s: %w", src, err)
	}
	return src, nil
}

// goTool is the go command: the one in GOROOT (the toolchain that built this test),
// else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// sweepBuilds removes the build directories of processes that are gone.
func sweepBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), buildPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), buildPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}
