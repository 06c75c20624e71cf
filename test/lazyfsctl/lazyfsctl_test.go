package lazyfsctl

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A write that was never synced is gone after Crash, which reports it; a synced one
// stays; after Unmount the file system answers no more commands.
func TestCrashDropsUnsyncedThroughTheProcess(t *testing.T) {
	l, dir := MountTemp(t, "lazyfsctl-test")
	kept, lost := filepath.Join(dir, "kept"), filepath.Join(dir, "lost")
	f, err := os.Create(kept)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("kept")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(lost, []byte("lost"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Unsynced(); err != nil || n != 4096 {
		t.Fatalf("unsynced %d, %v; want one page", n, err)
	}
	dropped, err := l.Crash()
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || dropped["lost"] != 4096 {
		t.Errorf("Crash dropped %v, want one page of lost", dropped)
	}
	for name, want := range map[string]string{kept: "kept", lost: ""} {
		if b, err := os.ReadFile(name); err != nil || string(b) != want {
			t.Errorf("%s after the crash: %q, %v; want %q", filepath.Base(name), b, err, want)
		}
	}
	if st, err := l.Stats(); err != nil || st.Crashes != 1 || st.Syncs != 1 || st.Dropped != 4096 {
		t.Errorf("stats %+v, %v; want one sync, one crash dropping one page", st, err)
	}
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted after Unmount", dir)
	}
	if _, err := l.Crash(); err == nil {
		t.Error("Crash after Unmount reported no error")
	}
}

// A mount that cannot be made is an error, and its process is gone.
func TestMountErrorIsReported(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if l, err := Mount(missing, missing, "lazyfsctl-test"); err == nil {
		l.Unmount()
		t.Fatal("mounting a directory that does not exist succeeded")
	}
}

// The lazyfs process unmounts and exits when the process that started it dies (its
// standard input ends): a test binary killed by a timeout leaves no mount behind.
func TestMountEndsWhenItsUserDies(t *testing.T) {
	if dir := os.Getenv("QB_LAZYFSCTL_CHILD"); dir != "" {
		mountUntilStdinEnds(dir)
		return
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	dir, backing := filepath.Join(root, "data"), filepath.Join(root, "disk")
	for _, d := range []string{dir, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name := "lazyfsctl-orphan-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { Sweep(name) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestMountEndsWhenItsUserDies$")
	cmd.Env = append(os.Environ(), "QB_LAZYFSCTL_CHILD="+dir, "QB_LAZYFSCTL_NAME="+name)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the child lives until this ends, at the latest
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "mounted" {
				ready <- nil
				io.Copy(io.Discard, out)
				return
			}
		}
		ready <- fmt.Errorf("the child ended before mounting: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(buildTimeout + mountTimeout):
		t.Fatal("the child did not mount in time")
	}
	if !mounted(t, dir) {
		t.Fatalf("%s is not mounted though the child says so", dir)
	}
	cmd.Process.Kill() // -9: the child unmounts nothing itself
	cmd.Wait()
	killed = true
	deadline := time.Now().Add(unmountTimeout)
	for mounted(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still mounted %v after the process that mounted it died", dir, unmountTimeout)
		}
		time.Sleep(50 * time.Millisecond) // polling /proc/self/mountinfo; nothing to wait on
	}
}

// mountUntilStdinEnds is the child of TestMountEndsWhenItsUserDies: it mounts dir over
// a backing directory beside it, says so, and waits for its standard input to end.
func mountUntilStdinEnds(dir string) {
	if _, err := Mount(dir, filepath.Join(filepath.Dir(dir), "disk"), os.Getenv("QB_LAZYFSCTL_NAME")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("mounted")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// mounted reports whether a lazyfs file system is mounted at dir here.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		a := strings.Fields(pre)
		if ok && len(a) >= 5 && strings.ReplaceAll(a[4], `\040`, " ") == dir && strings.HasPrefix(post, "fuse.lazyfs ") {
			return true
		}
	}
	return false
}
