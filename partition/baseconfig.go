package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/quorumbus/quorumbus/fsm"
)

// baseFile holds the fsm configuration a replica was created with. The raft log replays
// from it: an entity's later configurations arrive as UpdateEntity entries in the log,
// so replaying earlier entries under a later configuration (say a shorter TTL) would
// rebuild a different state than the one clients were answered from.
const baseFile = "fsm-base.bin"

// baseConfig returns the configuration the fsm must start from: the one recorded when
// this replica was created, or, for a new replica, cfg.FSM, which it records first.
func baseConfig(dir string, cfg fsm.Config) (fsm.Config, error) {
	path := filepath.Join(dir, baseFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		e, err := fsm.DecodeEntry(b)
		if err != nil || len(e.Cmds) != 1 {
			return cfg, fmt.Errorf("partition: %s is corrupt: %v", path, err)
		}
		u, ok := e.Cmds[0].(*fsm.UpdateEntity)
		if !ok {
			return cfg, fmt.Errorf("partition: %s does not hold a configuration", path)
		}
		if u.Config.GroupID != cfg.GroupID {
			return cfg, fmt.Errorf("partition: %s belongs to group %d, not %d", path, u.Config.GroupID, cfg.GroupID)
		}
		return u.Config, nil
	case !errors.Is(err, os.ErrNotExist):
		return cfg, fmt.Errorf("partition: %w", err)
	}
	// No record: a new replica (record cfg before the first entry is applied), or one
	// created before records existed (cfg is the best there is; record it from now on).
	data := fsm.AppendEntry(nil, &fsm.Entry{Cmds: []fsm.Command{&fsm.UpdateEntity{Config: cfg}}})
	if err := writeSynced(path, data); err != nil {
		return cfg, fmt.Errorf("partition: record the base configuration: %w", err)
	}
	return cfg, nil
}

// writeSynced writes a file durably: a temporary file, fsynced, renamed into place, and
// the directory fsynced.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
