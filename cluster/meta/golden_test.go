package meta

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// P3: release N+1 must apply what release N wrote. The golden files hold the entries and
// the snapshot of sampleCommands as version 1 writes them; a change to the wire format
// shows up here as a diff (regenerate with -update only for an intended, compatible
// change, and keep decoding the old files).
func TestGoldenEntriesAndSnapshot(t *testing.T) {
	var entries []byte
	s := New()
	for i, c := range sampleCommands() {
		e := &Entry{Now: int64(1_700_000_000_000 + i), Cmd: c}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		entries = binary.BigEndian.AppendUint32(entries, uint32(len(b)))
		entries = append(entries, b...)
		if err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if err := s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/entries-v1.golden", entries)
	golden(t, "testdata/snapshot-v1.golden", snap.Bytes())

	// The stored files decode and apply to the same state.
	old, err := os.ReadFile("testdata/entries-v1.golden")
	if err != nil {
		t.Fatal(err)
	}
	replay := New()
	cmds := sampleCommands()
	for i := 0; len(old) > 0; i++ {
		n := binary.BigEndian.Uint32(old)
		e, err := DecodeEntry(old[4 : 4+n])
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !reflect.DeepEqual(e.Cmd, cmds[i]) {
			t.Fatalf("entry %d decodes to %#v", i, e.Cmd)
		}
		if err := replay.Apply(e); err != nil {
			t.Fatal(err)
		}
		old = old[4+n:]
	}
	oldSnap, _ := os.ReadFile("testdata/snapshot-v1.golden")
	restored := New()
	if err := restored.Restore(bytes.NewReader(oldSnap)); err != nil {
		t.Fatal(err)
	}
	if replay.Digest() != s.Digest() || restored.Digest() != s.Digest() {
		t.Fatal("golden replay or restore differs from the current state")
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the current encoding (%d vs %d bytes): the wire format changed", path, len(got), len(want))
	}
}

// A snapshot written before partitions recorded their creation configuration (Base,
// Bootstrap) still restores; its groups have no Base, and their replicas keep using the
// configuration they recorded locally.
func TestGoldenSnapshotWithoutBase(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-v1-nobase.golden")
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	pls := s.Placements()
	if len(pls) == 0 {
		t.Fatal("no placements restored")
	}
	for _, pl := range pls {
		for _, p := range pl.Partitions {
			if p.Base != nil || p.Bootstrap != nil {
				t.Fatalf("%s group %d: Base %x Bootstrap %v, want none", pl.Entity, p.GroupID, p.Base, p.Bootstrap)
			}
		}
	}
}

// A new entity records, per partition, the fsm configuration its group starts from, and
// a later update does not change it (a replica added after the update must replay the log
// from the same configuration as the first replicas).
func TestBaseConfigIsTheCreationConfig(t *testing.T) {
	s := New()
	q := &CreateQueue{Name: "q", Properties: DefaultQueueProperties(), Replicas: [][]string{{"a", "b", "c"}}}
	if err := s.Apply(&Entry{Now: 1, Cmd: q}); err != nil {
		t.Fatal(err)
	}
	pl, _ := s.Placement("q")
	base := pl.Partitions[0].Base
	if len(base) == 0 || !reflect.DeepEqual(pl.Partitions[0].Bootstrap, []string{"a", "b", "c"}) {
		t.Fatalf("partition %+v: want a Base and Bootstrap [a b c]", pl.Partitions[0])
	}
	up := DefaultQueueProperties()
	up.MaxDeliveryCount = 3
	if err := s.Apply(&Entry{Now: 2, Cmd: &UpdateQueue{Name: "q", Properties: up}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(&Entry{Now: 3, Cmd: &SetPlacement{Entity: "q", Replicas: [][]string{{"b", "c", "d"}}}}); err != nil {
		t.Fatal(err)
	}
	pl, _ = s.Placement("q")
	if !bytes.Equal(pl.Partitions[0].Base, base) || !reflect.DeepEqual(pl.Partitions[0].Bootstrap, []string{"a", "b", "c"}) {
		t.Fatalf("after update and re-placement: %+v, want the creation Base and Bootstrap", pl.Partitions[0])
	}
}
