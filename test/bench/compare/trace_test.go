package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"
)

// compare trace reads a trace this process records: the file writes it makes show up
// as system calls of this test, and goroutines' waits for a CPU are counted.
func TestTraceSummarizesSyscallsAndWaits(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		trace.Stop()
		t.Fatal(err)
	}
	for range 50 {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			t.Error(err)
		}
	}
	f.Close()
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	trace.Stop()
	path := filepath.Join(dir, "trace.out")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := traceCmd([]string{path}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"waits for a CPU  n=", "syscalls of github.com/quorumbus/quorumbus/test/bench/compare.TestTraceSummarizesSyscallsAndWaits  n="} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if err := traceCmd([]string{filepath.Join(dir, "data")}, &out); err == nil {
		t.Error("a file that is not a trace was summarized without an error")
	}
}
