package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile is the data directory's lock: held (flock, exclusive) by the node that uses
// the directory, for as long as its process lives, and holding that process's ID.
const lockFile = "quorumbus.lock"

// lockData takes the data directory's lock before anything in it is opened, so that a
// second node started on a directory in use says so and exits at once, instead of
// waiting without end on a store's own lock (the Raft log's), deaf to signals, as it
// did. The kernel drops the lock when the process ends, however it ends, so a killed
// node leaves nothing to clean up. unlock releases it (run's end; exit does as well).
func lockData(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--data %s: %v", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("--data %s: locking %s: %v", dir, path, err)
		}
		holder := "another process"
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		return nil, fmt.Errorf("--data %s: data directory in use by %s (it holds %s); stop that node first, "+
			"or give this one another --data", dir, holder, path)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--data %s: writing %s: %v", dir, path, err)
	}
	return func() { f.Close() }, nil // closing the descriptor drops the lock
}
