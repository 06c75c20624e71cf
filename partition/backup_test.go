package partition

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
)

// A backup of one group restores into another, empty group through raft: every replica
// of the new group holds the messages, with the new group's ID; a group that is not
// empty, and a follower, refuse.
func TestBackupRestoresIntoAnotherGroup(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addGroup(testQueue(1, 30*time.Second))
	c.addGroup(testQueue(2, 30*time.Second))
	li, lp := c.leader(1, 20*time.Second)
	var msgs []*fsm.Message
	for i := range 50 {
		msgs = append(msgs, &fsm.Message{Payload: bytes.Repeat([]byte{byte(i)}, 100)})
	}
	if _, err := lp.Enqueue(ctxT(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	if ms, err := lp.Receive(ctxT(t, 10*time.Second), fsm.Receive{Max: 1}, 0); err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	follower := c.group(1)[(li+1)%3]
	if _, err := follower.Backup(ctxT(t, 10*time.Second), &bytes.Buffer{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("backup on a follower: %v", err)
	}
	var img bytes.Buffer
	if _, err := lp.Backup(ctxT(t, 10*time.Second), &img); err != nil {
		t.Fatal(err)
	}
	if err := lp.RestoreBackup(ctxT(t, 10*time.Second), bytes.NewReader(img.Bytes())); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a group with messages: %v", err)
	}

	_, dp := c.leader(2, 20*time.Second)
	if err := dp.RestoreBackup(ctxT(t, 30*time.Second), bytes.NewReader(img.Bytes())); err != nil {
		t.Fatal(err)
	}
	c.checkConverged(2)
	for _, p := range c.group(2) {
		var st fsm.Stats
		var cfg fsm.Config
		p.m.read(func(f *fsm.FSM) { st, cfg = f.Stats(), f.Config() })
		if cfg.GroupID != 2 || st.LastSeq != 50 || st.Targets[0].Active != 50 || st.Locks != 0 {
			t.Fatalf("a replica of the restored group: group %d, last seq %d, %d active, %d locks", cfg.GroupID, st.LastSeq,
				st.Targets[0].Active, st.Locks)
		}
	}
	_, dp = c.leader(2, 20*time.Second)
	if seqs, err := dp.Enqueue(ctxT(t, 10*time.Second), []*fsm.Message{{Payload: []byte("next")}}); err != nil || seqs[0] != 51 {
		t.Fatalf("a send after the restore: %v %v (want sequence number 51)", seqs, err)
	}
}
