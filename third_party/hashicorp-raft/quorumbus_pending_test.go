// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 3 (docs/raft-patches.md in the Quorumbus repository).

package raft

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// gatedStore is an InmemStore whose StoreLogs waits, while armed, until released: a
// log write that takes its time, as an fsync does.
type gatedStore struct {
	*InmemStore
	mu      sync.Mutex
	armed   chan struct{} // closed to release the waiting writes; nil: not armed
	waiting chan struct{} // closed when a write starts waiting
}

func (s *gatedStore) StoreLogs(logs []*Log) error {
	s.mu.Lock()
	armed, waiting := s.armed, s.waiting
	s.waiting = nil
	s.mu.Unlock()
	if armed != nil {
		if waiting != nil {
			close(waiting)
		}
		<-armed
	}
	return s.InmemStore.StoreLogs(logs)
}

func (s *gatedStore) arm() (release func(), waiting <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.waiting = make(chan struct{}), make(chan struct{})
	armed, w := s.armed, s.waiting
	return func() {
		s.mu.Lock()
		s.armed = nil
		s.mu.Unlock()
		close(armed)
	}, w
}

// The leader sends a new entry to its followers while it is still writing it to its own
// log: the followers hold it durably before the leader's write returns, and it commits
// (the followers are a majority) only as the leader's log says; the leader counts itself
// once its write is done. Without the patch the leader wrote first and replicated after,
// so the followers got nothing while its write lasted: their writes and the leader's ran
// in series.
func TestRaft_LeaderReplicatesWhileItWrites(t *testing.T) {
	const n = 3
	var (
		trans  []*InmemTransport
		stores []*gatedStore
		rafts  []*Raft
		fsms   []*MockFSM
		config Configuration
	)
	for i := 0; i < n; i++ {
		addr, tr := NewInmemTransport("")
		trans = append(trans, tr)
		config.Servers = append(config.Servers, Server{Suffrage: Voter, ID: ServerID(fmt.Sprintf("s%d", i)), Address: addr})
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := 0; i < n; i++ {
		conf := inmemConfig(t)
		conf.LocalID = config.Servers[i].ID
		store := &gatedStore{InmemStore: NewInmemStore()}
		fsm := &MockFSM{}
		if err := BootstrapCluster(conf, store, store, NewInmemSnapshotStore(), trans[i], config); err != nil {
			t.Fatal(err)
		}
		r, err := NewRaft(conf, fsm, store, store, NewInmemSnapshotStore(), trans[i])
		if err != nil {
			t.Fatal(err)
		}
		stores, rafts, fsms = append(stores, store), append(rafts, r), append(fsms, fsm)
	}
	defer func() {
		for _, r := range rafts {
			r.Shutdown().Error()
		}
	}()
	var leader int
	deadline := time.Now().Add(10 * time.Second)
	for leader = -1; leader < 0; {
		for i, r := range rafts {
			if r.State() == Leader {
				leader = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := rafts[leader].Apply([]byte("warm"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}

	want := rafts[leader].LastIndex() + 1
	release, waiting := stores[leader].arm()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	f := rafts[leader].Apply([]byte("x"), 0)
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not start writing the entry")
	}
	// The leader's write waits; both followers must get the entry meanwhile.
	deadline = time.Now().Add(5 * time.Second)
	for {
		got := 0
		for i, s := range stores {
			if i == leader {
				continue
			}
			if last, _ := s.LastIndex(); last >= want {
				got++
			}
		}
		if got == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while the leader was writing entry %d, %d of %d followers stored it", want, got, n-1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if last, _ := stores[leader].InmemStore.LastIndex(); last >= want {
		t.Fatalf("the leader's store holds entry %d before its write was released", want)
	}
	release()
	released = true
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if last, _ := stores[leader].LastIndex(); last < want {
		t.Fatalf("committed, but the leader's store ends at %d, want %d", last, want)
	}
}
