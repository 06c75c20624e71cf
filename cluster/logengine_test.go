package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// A data directory whose replicas are on bolt (the previous release's store, still the
// default) starts with --raft-log-store shared and keeps every message: its replicas stay on their raft.db files, entities created afterwards go to
// the engine, and deleting one of those removes its log from the engine.
func TestLogEngineUpgradeFromBolt(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := func(store string) *Node {
		t.Helper()
		c := testConfig(dir)
		c.Storage.LogStore = store
		n, err := Start(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(n *Node, queue string, from, count int) {
		t.Helper()
		for i := from; i < from+count; i++ {
			m := &fsm.Message{Payload: fmt.Appendf(nil, "%s-%d", queue, i)}
			m.MessageID = fmt.Sprintf("%s-%d", queue, i)
			if err := n.Router().Send(ctx, queue, []*fsm.Message{m}); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveAll := func(n *Node, queue string, count int) {
		t.Helper()
		got := map[string]bool{}
		for len(got) < count {
			msgs, err := n.Router().Receive(ctx, Address{Entity: queue}, "", "", fsm.ReceiveAndDelete, 50, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				var missing []string
				for i := range count {
					if id := fmt.Sprintf("%s-%d", queue, i); !got[id] {
						missing = append(missing, id)
					}
				}
				t.Fatalf("%s: received %d of %d, missing %v", queue, len(got), count, missing)
			}
			for _, m := range msgs {
				got[m.MessageID] = true
			}
		}
		for i := range count {
			if id := fmt.Sprintf("%s-%d", queue, i); !got[id] {
				t.Fatalf("%s missing", id)
			}
		}
	}
	has := func(queue string, idx int, file string) bool {
		_, err := os.Stat(filepath.Join(partition.Dir(dir, queue, idx), file))
		return err == nil
	}

	n := start(partition.LogStoreBolt)
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "old", Properties: queueProps(2)}); err != nil {
		t.Fatal(err)
	}
	send(n, "old", 0, 40)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partition.EngineDir(dir)); !os.IsNotExist(err) {
		t.Fatalf("a node on bolt created the log engine: %v", err)
	}

	n = start(partition.LogStoreShared)
	defer func() { n.Close() }()
	if err := n.Store().Apply(ctx, &meta.CreateQueue{Name: "new", Properties: queueProps(2)}); err != nil {
		t.Fatal(err)
	}
	send(n, "new", 0, 20)
	send(n, "old", 40, 10)
	for idx := range 2 {
		if !has("old", idx, "raft.db") || has("old", idx, "raft-log.id") {
			t.Fatalf("old/%d: want its raft.db kept, no log in the engine", idx)
		}
		if has("new", idx, "raft.db") || !has("new", idx, "raft-log.id") {
			t.Fatalf("new/%d: want its log in the engine, no raft.db", idx)
		}
	}
	if logs, err := n.logs.engine.Logs(); err != nil || logs != 2 {
		t.Fatalf("logs in the engine: %d, %v; want the 2 of queue new", logs, err)
	}
	// And both again after a restart on the engine.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = start(partition.LogStoreShared)
	receiveAll(n, "old", 50)
	receiveAll(n, "new", 20)

	if err := n.Store().Apply(ctx, &meta.DeleteQueue{Name: "new"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		if logs, err := n.logs.engine.Logs(); err != nil || logs != 0 {
			return fmt.Errorf("%d logs left in the engine after deleting the queue (%v)", logs, err)
		}
		if has("new", 0, "") || has("new", 1, "") {
			return fmt.Errorf("the deleted queue's directories are still there")
		}
		return nil
	})
}
