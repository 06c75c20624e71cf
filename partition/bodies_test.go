package partition

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// withBodies gives every node of the test cluster a Bodies of its own (in the node's data
// directory) and returns them by node index.
func withBodies(t *testing.T, n int, cfg BodiesConfig) (func(*Config), []*Bodies) {
	t.Helper()
	root := t.TempDir()
	bs := make([]*Bodies, n)
	byID := map[string]*Bodies{}
	for i := range bs {
		c := cfg
		c.Dir = filepath.Join(root, fmt.Sprintf("n%d", i+1))
		b, err := OpenBodies(c)
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
		byID[fmt.Sprintf("n%d", i+1)] = b
	}
	return func(c *Config) { c.Bodies = byID[string(c.NodeID)] }, bs
}

func body(i int) []byte {
	return bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i%50)
}

// Past the node's memory budget, every replica writes bodies to its segment files; the
// leader serves them back (receive, peek, deferred), a replica restarted from a snapshot
// spills again, replicas converge, and the files go once the messages are gone.
func TestBodiesSpillAndServe(t *testing.T) {
	tune, bs := withBodies(t, 3, BodiesConfig{MemoryBudget: 8 << 10, SegmentBytes: 32 << 10})
	c := newCluster(t, 3, tune)
	const g = 41
	c.addGroup(testQueue(g, time.Minute))
	const n = 120
	for i := 0; i < n; i += 10 {
		var ms []*fsm.Message
		for j := i; j < i+10; j++ {
			ms = append(ms, &fsm.Message{Payload: body(j)})
		}
		retry(t, c, g, func(p *Partition) ([]int64, error) { return p.Enqueue(ctxT(t, 10*time.Second), ms) })
	}
	c.checkConverged(g)
	for i, b := range bs {
		st := b.Stats()
		if st.Spilled < n-10 || st.MemoryBytes > 8<<10+2<<10 || st.Segments < 2 {
			t.Fatalf("node %d: %+v; want most bodies spilled, at most the budget in memory, rotated segments", i+1, st)
		}
	}

	// A replica restarted from its snapshot restores the bodies onto disk again.
	li, _ := c.leader(g, 20*time.Second)
	fi := (li + 1) % 3
	if err := c.group(g)[fi].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.stop(g, fi)
	before := bs[fi].Stats().Spilled
	c.restart(g, fi)
	c.checkConverged(g)
	if got := bs[fi].Stats().Spilled; got < before+n-10 {
		t.Fatalf("restarted replica spilled %d bodies on restore, want about %d", got-before, n)
	}

	// Peek and receive return the bodies as they were sent.
	peeked := retry(t, c, g, func(p *Partition) ([]*fsm.Message, error) { return p.Peek(ctxT(t, 10*time.Second), fsm.Target{}, 0, n) })
	got := retry(t, c, g, func(p *Partition) ([]*fsm.Message, error) {
		return p.Receive(ctxT(t, 10*time.Second), fsm.Receive{Max: n}, 0)
	})
	if len(peeked) != n || len(got) != n {
		t.Fatalf("peeked %d, received %d, want %d", len(peeked), len(got), n)
	}
	for i := range got {
		for _, m := range []*fsm.Message{peeked[i], got[i]} {
			if m.Spilled != nil || !bytes.Equal(m.Payload, body(i)) {
				t.Fatalf("message %d: spilled %v, body of %d bytes, want body %d", i, m.Spilled, len(m.Payload), i)
			}
		}
	}
	toks := make([]fsm.LockToken, n)
	for i, m := range got {
		toks[i] = m.LockToken
	}
	retry(t, c, g, func(p *Partition) ([]error, error) {
		return p.Settle(ctxT(t, 10*time.Second), fsm.Settle{Tokens: toks, Disposition: fsm.Complete})
	})
	c.checkConverged(g)

	// With the messages gone, a collection releases their segments: only each replica's
	// current one stays, and nothing spilled is referenced.
	testutil.WaitFor(t, 20*time.Second, func() error {
		runtime.GC()
		for i, b := range bs {
			if st := b.Stats(); st.LiveBytes != 0 || st.Segments > 1 {
				return fmt.Errorf("node %d: %+v", i+1, st)
			}
			if ents, _ := os.ReadDir(b.dir); len(ents) > 1 {
				return fmt.Errorf("node %d: %d segment files", i+1, len(ents))
			}
		}
		return nil
	})
}

// With the memory budget used and the disk budget full, the leader refuses sends with a
// quota error (and the send is not stored); once messages are received and completed,
// sends are accepted again.
func TestBodiesDiskBudgetRefusesSends(t *testing.T) {
	tune, bs := withBodies(t, 1, BodiesConfig{MemoryBudget: 4 << 10, DiskBudget: 16 << 10, SegmentBytes: 8 << 10})
	c := newCluster(t, 1, tune)
	const g = 42
	c.addGroup(testQueue(g, time.Minute))
	_, p := c.leader(g, 20*time.Second)
	var err error
	sent := 0
	for ; sent < 100; sent++ {
		if _, err = p.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: body(sent)}}); err != nil {
			break
		}
	}
	if !errors.Is(err, fsm.ErrQuotaExceeded) || !errors.Is(err, ErrStorageFull) {
		t.Fatalf("after %d sends: %v; want a quota error for full storage", sent, err)
	}
	if sent < 16 || sent > 24 {
		t.Fatalf("refused after %d sends of ~1 KiB with 4 KiB in memory and 16 KiB on disk", sent)
	}
	if st := bs[0].Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v, want 1 refused", st)
	}
	got, err := p.Receive(ctxT(t, 10*time.Second), fsm.Receive{Max: 100}, 0)
	if err != nil || len(got) != sent {
		t.Fatalf("received %d, %v; want the %d stored", len(got), err, sent)
	}
	toks := make([]fsm.LockToken, len(got))
	for i, m := range got {
		if !bytes.Equal(m.Payload, body(i)) {
			t.Fatalf("message %d: wrong body", i)
		}
		toks[i] = m.LockToken
	}
	if _, err := p.Settle(ctxT(t, 10*time.Second), fsm.Settle{Tokens: toks, Disposition: fsm.Complete}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		runtime.GC()
		_, err := p.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: body(0)}})
		return err
	})
}
