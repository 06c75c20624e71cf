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
