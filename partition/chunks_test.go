package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// entrySizes records the size of every entry the proposer submits.
type entrySizes struct {
	mu  sync.Mutex
	max int
	n   int
}

func (e *entrySizes) Batched(_, bytes int) {
	e.mu.Lock()
	e.max = max(e.max, bytes)
	e.n++
	e.mu.Unlock()
}
func (*entrySizes) Committed(time.Duration, bool) {}

func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ seed
	}
	return b
}

func pendingUploads(p *Partition) []fsm.PendingUpload { return p.PendingUploads() }

// TestChunkedSend: payloads above ChunkBytes, sent concurrently with small ones, arrive
// whole and in the order of their sends' results; no entry holds two chunks (each entry
// stays under two chunks' worth), and no upload is left pending.
func TestChunkedSend(t *testing.T) {
	obs := &entrySizes{}
	const chunk = 4 << 10
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.ChunkBytes = chunk
		cfg.Observer = obs
	})
	c.addGroup(testQueue(1, 5*time.Second))
	_, p := c.leader(1, 20*time.Second)
	ctx := ctxT(t, 30*time.Second)
	want := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		body := patterned(37_000+i*1000, byte(i))
		small := []byte(fmt.Sprintf("small-%d", i))
		mu.Lock()
		want[fmt.Sprint("big-", i)], want[string(small)] = body, small
		mu.Unlock()
		wg.Add(2)
		go func() {
			defer wg.Done()
			m := &fsm.Message{Payload: body}
			m.MessageID = fmt.Sprint("big-", i)
			if _, err := p.Enqueue(ctx, []*fsm.Message{m}); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			m := &fsm.Message{Payload: small}
			m.MessageID = string(small)
			if _, err := p.Schedule(ctx, []*fsm.Message{m}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := p.Receive(ctx, fsm.Receive{Mode: fsm.ReceiveAndDelete, Max: 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("received %d messages, want %d", len(got), len(want))
	}
	for _, m := range got {
		if !bytes.Equal(m.Payload, want[m.MessageID]) {
			t.Fatalf("message %s: %d bytes, want %d", m.MessageID, len(m.Payload), len(want[m.MessageID]))
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.max >= 2*chunk {
		t.Fatalf("an entry of %d bytes: two chunks went into one entry", obs.max)
	}
	if obs.n < 4*10 {
		t.Fatalf("%d entries for 4 bodies of 10 chunks each", obs.n)
	}
	if up := pendingUploads(p); len(up) != 0 {
		t.Fatalf("uploads left pending: %+v", up)
	}
}

// TestChunkedSendOff: with ChunkBytes 0 a large payload is one entry, as before.
func TestChunkedSendOff(t *testing.T) {
	obs := &entrySizes{}
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.ChunkBytes = 0
		cfg.Observer = obs
	})
	c.addGroup(testQueue(1, 5*time.Second))
	_, p := c.leader(1, 20*time.Second)
	if _, err := p.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: patterned(100_000, 1)}}); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.max < 100_000 {
		t.Fatalf("largest entry %d bytes: the body was split", obs.max)
	}
}

// TestChunkedSendLeaderChange: the leader changes while a large body is being sent in
// chunks. The sender gets a not-leader error that is definite (no "outcome unknown":
// the message was not stored) and may retry; no replica ever holds part of the message
// as a message; the new leader drops the orphaned chunks at their deadline on every
// replica alike; the retry on the new leader stores the whole body.
func TestChunkedSendLeaderChange(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.ChunkBytes = 1 << 10
		cfg.UploadTimeout = 3 * time.Second
	})
	c.addGroup(testQueue(1, 5*time.Second))
	li, lp := c.leader(1, 20*time.Second)
	body := patterned(4<<20, 7) // 4096 chunks: seconds of work, so the transfer lands mid-upload
	done := make(chan error, 1)
	go func() {
		_, err := lp.Enqueue(ctxT(t, 60*time.Second), []*fsm.Message{{Payload: body}})
		done <- err
	}()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if up := pendingUploads(lp); len(up) == 0 || up[0].Chunks < 16 {
			return errors.New("upload not under way yet")
		}
		return nil
	})
	if err := lp.TransferLeadership(); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the send did not return after the leader changed")
	}
	if !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("send across a leader change: %v, want a definite ErrNotLeader", err)
	}
	ni, np := c.leader(1, 20*time.Second)
	if ni == li {
		t.Fatal("leadership did not move")
	}
	for i, p := range c.group(1) {
		var st fsm.Stats
		p.m.read(func(f *fsm.FSM) { st = f.Stats() })
		for _, ts := range st.Targets {
			if ts.Active+ts.Scheduled+ts.Locked+ts.Deferred != 0 {
				t.Fatalf("replica %d holds a message after the failed send: %+v", i, ts)
			}
		}
	}
	// The orphaned upload goes at its deadline, on every replica.
	testutil.WaitFor(t, 30*time.Second, func() error {
		for i, p := range c.group(1) {
			if up := pendingUploads(p); len(up) != 0 {
				return fmt.Errorf("replica %d still holds %+v", i, up)
			}
		}
		return nil
	})
	c.checkConverged(1)
	small := patterned(64<<10, 9)
	retry(t, c, 1, func(p *Partition) ([]int64, error) {
		return p.Enqueue(context.Background(), []*fsm.Message{{Payload: small}})
	})
	got, err := np.Receive(ctxT(t, 10*time.Second), fsm.Receive{Mode: fsm.ReceiveAndDelete, Max: 10}, 0)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Payload, small) {
		t.Fatalf("after the retry: %v, %d messages", err, len(got))
	}
	c.checkConverged(1)
}

// TestChunkedSendAbandoned: a sender that gives up mid-upload gets a definite error, and
// its chunks are dropped at once (not held toward the quota until UploadTimeout).
func TestChunkedSendAbandoned(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.ChunkBytes = 1 << 10 })
	c.addGroup(testQueue(1, 5*time.Second))
	_, p := c.leader(1, 20*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Enqueue(ctx, []*fsm.Message{{Payload: patterned(8<<20, 3)}})
		done <- err
	}()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if up := p.PendingUploads(); len(up) == 0 || up[0].Chunks < 16 {
			return errors.New("upload not under way yet")
		}
		return nil
	})
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("abandoned send: %v, want a definite context.Canceled", err)
	}
	if up := p.PendingUploads(); len(up) != 0 {
		t.Fatalf("chunks still held after the send returned: %+v", up)
	}
	st, err := p.Stats(ctxT(t, 5*time.Second))
	if err != nil || st.Bytes != 0 || st.Targets[0].Active != 0 {
		t.Fatalf("stats after the abandoned send: %+v, %v", st, err)
	}
}
