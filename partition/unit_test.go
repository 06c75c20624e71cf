package partition

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err == nil {
		t.Fatal("default config without identity validated")
	}
	good := func() *Config {
		c := DefaultConfig()
		c.DataDir, c.Entity, c.NodeID = t.TempDir(), "q", "n1"
		c.Stream = newFaultLayer(nil)
		c.FSM.GroupID = 1
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"election<heartbeat": func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 },
		"lease>heartbeat":    func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout },
		"maxappend":          func(c *Config) { c.MaxAppendEntries = 2000 },
		"replmax":            func(c *Config) { c.ReplicationMaxEntries = 5000 },
		"group0":             func(c *Config) { c.FSM.GroupID = 0 },
		"batch":              func(c *Config) { c.MaxBatchCmds = 0 },
		"inflight":           func(c *Config) { c.MaxInflight = 0 },
		"linger":             func(c *Config) { c.Linger = -time.Millisecond },
		"chunkbytes":         func(c *Config) { c.ChunkBytes = -1 },
		"chunkwindow":        func(c *Config) { c.ChunkWindow = 0 },
		"uploadtimeout":      func(c *Config) { c.UploadTimeout = 0 },
		"peer":               func(c *Config) { c.Peers = []raft.Server{{ID: "x"}} },
		"logstore":           func(c *Config) { c.LogStore = "rocks" },
	} {
		c := good()
		mut(c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

func TestDirEscapesEntity(t *testing.T) {
	got := Dir("/data", "orders/eu", 3)
	want := filepath.Join("/data", "partitions", "orders%2Feu", "3")
	if got != want {
		t.Fatalf("Dir = %q, want %q", got, want)
	}
	for _, e := range []string{"..", ".", "../x", "a/../../b"} {
		if d := filepath.Dir(filepath.Dir(Dir("/d", e, 0))); d != "/d/partitions" {
			t.Errorf("entity %q escapes the partitions dir: %q", e, Dir("/d", e, 0))
		}
	}
}

func TestGroupOfToken(t *testing.T) {
	var tok fsm.LockToken
	copy(tok[:], []byte{0x01, 0x02, 0x03, 0x04, 0xff})
	if g := GroupOfToken(tok); g != 0x01020304 {
		t.Fatalf("GroupOfToken = %#x", g)
	}
}

func TestNotLeaderErrorMatches(t *testing.T) {
	var err error = &NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:1", Unknown: true}
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("errors.Is failed for %v", err)
	}
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != "n2" {
		t.Fatalf("errors.As failed for %v", err)
	}
	if errors.Is(&NotLeaderError{}, ErrOutcomeUnknown) {
		t.Fatal("a plain not-leader error claims an unknown outcome")
	}
}

func fsmTarget() fsm.Target { return fsm.Target{} }
