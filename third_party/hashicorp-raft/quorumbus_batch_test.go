// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 5 (docs/raft-patches.md in the Quorumbus repository).

package raft

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// countingTransport counts the AppendEntries with entries sent through it, per target,
// and the largest; it does not pipeline, so every batch goes through AppendEntries.
type countingTransport struct {
	*InmemTransport
	mu         sync.Mutex
	rpcs       map[ServerAddress]int
	maxEntries int
}

func (c *countingTransport) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	if len(args.Entries) > 0 {
		c.mu.Lock()
		c.rpcs[target]++
		if len(args.Entries) > c.maxEntries {
			c.maxEntries = len(args.Entries)
		}
		c.mu.Unlock()
	}
	return c.InmemTransport.AppendEntries(id, target, args, resp)
}

func (c *countingTransport) AppendEntriesPipeline(ServerID, ServerAddress) (AppendPipeline, error) {
	return nil, ErrPipelineReplicationNotSupported
}

func (c *countingTransport) counts(target ServerAddress) (rpcs, maxEntries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rpcs[target], c.maxEntries
}

func (c *countingTransport) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rpcs, c.maxEntries = map[ServerAddress]int{}, 0
}

// A follower that was cut off catches up on 300 small entries in a few AppendEntries
// of up to ReplicationMaxEntries entries each, bounded by ReplicationMaxBytes, while
// MaxAppendEntries stays 4. Without the patch it took 75 round trips of 4 entries.
func TestRaft_CatchUpBatchesSmallEntries(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		maxBytes, entry      int
		maxRPCs, wantLargest int // at most maxRPCs; the largest batch at most wantLargest, above 4
	}{
		{"entries", 1 << 20, 16, 3, 256},
		{"bytes", 1000, 100, 40, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, entries = 3, 300
			var (
				trans  []*countingTransport
				rafts  []*Raft
				stores []*InmemStore
				config Configuration
			)
			for i := 0; i < n; i++ {
				addr, tr := NewInmemTransport("")
				trans = append(trans, &countingTransport{InmemTransport: tr, rpcs: map[ServerAddress]int{}})
				config.Servers = append(config.Servers, Server{Suffrage: Voter, ID: ServerID(fmt.Sprintf("s%d", i)), Address: addr})
			}
			connect := func(i, j int) {
				trans[i].Connect(trans[j].LocalAddr(), trans[j].InmemTransport)
				trans[j].Connect(trans[i].LocalAddr(), trans[i].InmemTransport)
			}
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					connect(i, j)
				}
			}
			for i := 0; i < n; i++ {
				conf := inmemConfig(t)
				conf.LocalID = config.Servers[i].ID
				conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
				conf.MaxAppendEntries = 4
				conf.ReplicationMaxEntries, conf.ReplicationMaxBytes = 256, tc.maxBytes
				store := NewInmemStore()
				if err := BootstrapCluster(conf, store, store, NewInmemSnapshotStore(), trans[i], config); err != nil {
					t.Fatal(err)
				}
				r, err := NewRaft(conf, &MockFSM{}, store, store, NewInmemSnapshotStore(), trans[i])
				if err != nil {
					t.Fatal(err)
				}
				rafts, stores = append(rafts, r), append(stores, store)
			}
			defer func() {
				for _, r := range rafts {
					r.Shutdown().Error()
				}
			}()
			leader := -1
			for deadline := time.Now().Add(10 * time.Second); leader < 0; time.Sleep(10 * time.Millisecond) {
				for i, r := range rafts {
					if r.State() == Leader {
						leader = i
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("no leader")
				}
			}
			f := (leader + 1) % n // the follower cut off
			trans[leader].Disconnect(trans[f].LocalAddr())
			trans[f].Disconnect(trans[leader].LocalAddr())
			var last ApplyFuture
			for i := 0; i < entries; i++ {
				last = rafts[leader].Apply(bytes.Repeat([]byte{'x'}, tc.entry), 0)
			}
			if err := last.Error(); err != nil {
				t.Fatal(err)
			}
			want := rafts[leader].LastIndex()
			trans[leader].reset()
			connect(leader, f)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if got, _ := stores[f].LastIndex(); got >= want {
					break
				}
				if time.Now().After(deadline) {
					got, _ := stores[f].LastIndex()
					rpcs, largest := trans[leader].counts(trans[f].LocalAddr())
					t.Fatalf("the follower is at %d of %d after %d AppendEntries (largest %d entries)", got, want, rpcs, largest)
				}
			}
			rpcs, largest := trans[leader].counts(trans[f].LocalAddr())
			if rpcs > tc.maxRPCs || largest <= 4 || largest > tc.wantLargest {
				t.Fatalf("the follower caught up on %d entries in %d AppendEntries of up to %d entries; want at most %d, of 5..%d entries",
					entries, rpcs, largest, tc.maxRPCs, tc.wantLargest)
			}
		})
	}
}
