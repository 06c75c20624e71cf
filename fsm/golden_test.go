package fsm

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden entries and snapshots in testdata/compat")

// P3: release N+1 applies what release N wrote, and a rolling upgrade (docs/operations.md
// § Upgrading) has nodes of both releases replicate one log. testdata/compat holds the
// entries (every command, seedEntries) and the snapshots of every version the previous
// release writes (seedSnapshots: version 2 for three kinds of entity, 3 with a prepared
// transaction, 4 with pending chunked bodies, with and without one). Each must decode or
// restore and re-encode to the same bytes; and today's encoder must still write them,
// byte for byte, so that a node of the previous release can read what this one writes
// (an intended new layout bumps a version and gets new files, with -update).

func goldenSnapshotNames() []string {
	return []string{"snapshot-v2-queue", "snapshot-v2-sessions", "snapshot-v2-topic", "snapshot-v3-txn",
		"snapshot-v4-uploads-txn", "snapshot-v4-uploads"}
}

func readOrUpdate(t *testing.T, path string, cur []byte) []byte {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, cur, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	return b
}

func TestGoldenEntries(t *testing.T) {
	var cur []byte
	for _, e := range seedEntries() {
		b := AppendEntry(nil, e)
		cur = binary.BigEndian.AppendUint32(cur, uint32(len(b)))
		cur = append(cur, b...)
	}
	old := readOrUpdate(t, "testdata/compat/entries-v1.golden", cur)
	for i := 0; len(old) > 0; i++ {
		n := binary.BigEndian.Uint32(old)
		raw := old[4 : 4+n]
		e, err := DecodeEntry(raw)
		if err != nil {
			t.Fatalf("entry %d of the previous release does not decode: %v", i, err)
		}
		if again := AppendEntry(nil, e); !bytes.Equal(again, raw) {
			t.Errorf("entry %d re-encodes differently:\n%x\nwas\n%x", i, again, raw)
		}
		for _, cfg := range []Config{queueCfg(), sessCfg(), topicCfg("a")} {
			busyFSM(cfg).Apply(e) // applies without panicking
		}
		old = old[4+n:]
	}
	if !bytes.Equal(cur, readOrUpdate(t, "testdata/compat/entries-v1.golden", cur)) {
		t.Errorf("today's encoding of seedEntries differs from the previous release's (testdata/compat/entries-v1.golden): " +
			"a node of that release could not apply it; bump entryVersion for a new layout, or run -update for a new command")
	}
}

func TestGoldenSnapshots(t *testing.T) {
	cur := seedSnapshots(t)
	names := goldenSnapshotNames()
	if len(cur) != len(names) {
		t.Fatalf("seedSnapshots gives %d snapshots, goldenSnapshotNames names %d", len(cur), len(names))
	}
	cfgs := []Config{queueCfg(), sessCfg(), topicCfg("a", "b"), queueCfg(), queueCfg(), queueCfg()}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			old := readOrUpdate(t, "testdata/compat/"+name+".snap", cur[i])
			if want := name[len("snapshot-v")] - '0'; old[4] != want {
				t.Fatalf("fixture is version %d, named %d", old[4], want)
			}
			f := New(cfgs[i])
			if err := f.Restore(bytes.NewReader(old)); err != nil {
				t.Fatalf("the previous release's version %d snapshot does not restore: %v", old[4], err)
			}
			var again bytes.Buffer
			if err := f.Snapshot(&again); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Bytes(), old) {
				t.Errorf("restored and snapshotted again, it differs (version %d, was %d)", again.Bytes()[4], old[4])
			}
			// What a partition persists (Freeze, then WriteTo off the apply loop) is the same.
			var frozen bytes.Buffer
			if _, err := f.Freeze().WriteTo(&frozen); err != nil || !bytes.Equal(frozen.Bytes(), old) {
				t.Errorf("Freeze().WriteTo writes other bytes than the previous release's snapshot (err %v)", err)
			}
			if !bytes.Equal(cur[i], old) {
				t.Errorf("today's snapshot of the same state differs from the previous release's: " +
					"a node of that release could not restore it; bump snapVersion for a new layout")
			}
		})
	}
}
