package partition

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
)

// S-DUR-1, S-TTL-1: a replica restarted with a newer entity configuration replays its
// log from the configuration it was created with, so a message acknowledged with one TTL
// keeps its ExpiresAt (here the queue's TTL changed from 1h to 5s between the send and
// the restart, with no snapshot taken).
func TestRestartReplaysFromTheCreationConfig(t *testing.T) {
	c := newCluster(t, 1, nil)
	created := testQueue(7, 30*time.Second)
	created.Queue.DefaultTTLMs = time.Hour.Milliseconds()
	c.addGroup(created)
	_, p := c.leader(7, 20*time.Second)
	ctx := ctxT(t, 30*time.Second)
	m := &fsm.Message{Payload: []byte("x")}
	if _, err := p.Enqueue(ctx, []*fsm.Message{m}); err != nil {
		t.Fatal(err)
	}
	before, err := p.Peek(ctx, fsm.Target{}, 0, 1)
	if err != nil || len(before) != 1 {
		t.Fatalf("peek: %v %v", before, err)
	}

	c.stop(7, 0)
	later := created
	later.Queue.DefaultTTLMs = 5_000 // what the metadata says at the restart
	c.mu.Lock()
	c.cfgs[7] = later
	c.mu.Unlock()
	c.restart(7, 0)
	_, p = c.leader(7, 20*time.Second)
	after, err := p.Peek(ctx, fsm.Target{}, 0, 1)
	if err != nil || len(after) != 1 {
		t.Fatalf("peek after restart: %v %v", after, err)
	}
	if after[0].ExpiresAt != before[0].ExpiresAt {
		t.Fatalf("ExpiresAt %d after the restart, %d when acknowledged: the log replayed under the newer configuration",
			after[0].ExpiresAt, before[0].ExpiresAt)
	}
}
