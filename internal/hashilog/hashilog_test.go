package hashilog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// lines decodes the JSON lines written to buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// A stopped peer's heartbeat failures, from many groups twice a second, give one
// warning per minute per message and peer; raft's ordinary events stay at debug and
// its other errors at error, all as slog JSON.
func TestRaftNoiseIsLimited(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1e9, 0)}
	b := New(slog.New(slog.NewJSONHandler(&buf, nil)), &Config{Now: c.now})
	groups := []string{"raft.meta", "raft.orders.0", "raft.orders.1"}
	for range 240 { // two minutes, twice a second
		for _, g := range groups {
			l := b.Raft(g)
			l.Error("failed to heartbeat to", "peer", "10.0.0.3:5400", "backoff time", 10*time.Millisecond, "error", errors.New("dial tcp: connection refused"))
			l.Error("failed to appendEntries to", "peer", "{Voter n3 10.0.0.3:5400}", "error", errors.New("i/o timeout"))
			l.Warn("heartbeat timeout reached, starting election", "last-leader-id", "n3")
			l.Info("entering follower state", "follower", "n1")
		}
		c.t = c.t.Add(500 * time.Millisecond)
	}
	b.Raft("raft.meta").Error("failed to persist vote", "error", errors.New("disk full"))
	got := map[string]int{}
	for _, m := range lines(t, &buf) {
		got[m["level"].(string)+" "+m["msg"].(string)]++
		if m["component"] == nil {
			t.Errorf("line without component: %v", m)
		}
	}
	want := map[string]int{
		"WARN failed to heartbeat to":     2, // at 0 and 60 s
		"WARN failed to appendEntries to": 2,
		"ERROR failed to persist vote":    1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%q logged %d times, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("lines at info and above: %v, want only %v", got, want)
	}
	if !strings.Contains(buf.String(), `"repeated":`) {
		t.Errorf("the second warning does not say how many lines it held back:\n%s", buf.String())
	}
}

// At debug, everything the libraries say is there, as slog lines.
func TestDebugKeepsEverything(t *testing.T) {
	var buf bytes.Buffer
	b := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	l := b.Raft("raft.meta")
	for range 3 {
		l.Error("failed to heartbeat to", "peer", "n3")
	}
	l.Info("entering follower state")
	b.Memberlist().Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1234")
	if n := len(lines(t, &buf)); n != 5 {
		t.Errorf("%d lines at debug, want 5:\n%s", n, buf.String())
	}
}

// memberlist's "[LEVEL] memberlist: ..." lines get their level from the prefix; its
// repeated warnings about one peer are limited like raft's.
func TestMemberlistLevels(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1e9, 0)}
	b := New(slog.New(slog.NewJSONHandler(&buf, nil)), &Config{Now: c.now})
	ml := b.Memberlist()
	for range 10 {
		ml.Printf("[INFO] memberlist: Suspect n3 has failed, no acks received")
		ml.Printf("[ERR] memberlist: Failed to send ping: write tcp 127.0.0.1:5400: connection refused")
		c.t = c.t.Add(time.Second)
	}
	ls := lines(t, &buf)
	if len(ls) != 1 || ls[0]["level"] != "WARN" || !strings.HasPrefix(ls[0]["msg"].(string), "Failed to send ping") {
		t.Errorf("want one warning about the failed ping, got %v", ls)
	}
}

// What raft logs at error on every leadership change, stop and restart goes to debug
// (ERROR is "needs a person": docs/operations.md); the same messages about a connection
// that was not simply closed, and raft's real errors, stay at error.
func TestRoutineRaftErrorsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	b := New(slog.New(slog.NewJSONHandler(&buf, nil)), nil)
	l := b.Raft("raft.meta")
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	l.Error("peer has newer term, stopping replication", "peer", "{Voter n2 127.0.0.1:5401}")
	l.Error("failed to decode incoming command", "error", closed)
	l.Error("failed to decode incoming command", "error", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection"))
	l.Error("failed to flush response", "error", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE})
	l.Error("failed to decode incoming command", "error", io.ErrUnexpectedEOF)
	l.Error("failed to accept connection", "error", closed)
	l.Error("failed to decode incoming command", "error", errors.New("msgpack decode error: invalid byte"))
	l.Error("failed to persist vote", "error", errors.New("disk full"))
	var got []string
	for _, m := range lines(t, &buf) {
		got = append(got, m["level"].(string)+" "+m["msg"].(string))
	}
	want := []string{"ERROR failed to decode incoming command", "ERROR failed to persist vote"}
	if !slices.Equal(got, want) {
		t.Errorf("lines at info and above: %q, want %q", got, want)
	}
}
