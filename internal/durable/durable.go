// Package durable writes small files so that they survive a power loss: the data is
// fsynced before the file takes its name, and the directory after. os.WriteFile alone
// leaves both in the page cache, where a power cut (not a crash of the process) loses
// them: test/lazyfs shows it. Stdlib only, so that any package may use it.
package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path with permissions perm through a temporary file in the
// same directory, fsynced, renamed over path, and the directory fsynced: after it
// returns, path holds data or (on error) what it held before, also after a power loss.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs directory dir, so that the names created, renamed or removed in it
// survive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
