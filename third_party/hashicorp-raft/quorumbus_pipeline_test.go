// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 1 (docs/raft-patches.md in the Quorumbus repository): a pipeline
// whose decoder stops must not leave its replication goroutine blocked.

package raft

import (
	"testing"
	"time"
)

// When pipelineDecode stops on its own (a follower answers !Success, or a newer term),
// nothing reads the pipeline's responses any more. Without the patch the replication
// goroutine could go on sending: its next AppendEntries waited for a slot of the
// pipeline that nobody would free, for good; the follower got no more entries and
// Shutdown waited for ever. Here a single-voter leader replicates over a TCP pipeline
// (two RPCs in flight) to a follower that answers at once, and refuses its 10th
// request; the sender is kept busy. Without the patch about half the rounds hang, so
// 20 rounds all but surely catch it.
func TestRaft_PipelineDecoderStopUnblocksSender(t *testing.T) {
	conf := inmemConfig(t)
	conf.LocalID = "leader"
	leaderTrans, err := NewTCPTransportWithConfig("127.0.0.1:0", nil, &NetworkTransportConfig{
		MaxPool: 2, Timeout: 10 * time.Second, MaxRPCsInFlight: 2, Logger: newTestLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	store := NewInmemStore()
	r, err := NewRaft(conf, &MockFSM{}, store, store, NewInmemSnapshotStore(), leaderTrans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
	}()
	if err := r.BootstrapCluster(Configuration{Servers: []Server{{Suffrage: Voter, ID: conf.LocalID, Address: leaderTrans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}

	for round := 0; round < 20; round++ {
		fake, err := NewTCPTransport("127.0.0.1:0", nil, 2, 10*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			for n := 1; ; n++ {
				select {
				case rpc := <-fake.Consumer():
					rpc.Respond(&AppendEntriesResponse{Term: r.getCurrentTerm(), Success: n < 10}, nil)
				case <-stop:
					return
				}
			}
		}()
		s := &followerReplication{
			peer:                Server{ID: "fake", Address: fake.LocalAddr()},
			currentTerm:         r.getCurrentTerm(),
			nextIndex:           r.getLastIndex() + 1,
			stopCh:              make(chan uint64, 1),
			triggerCh:           make(chan struct{}, 1),
			triggerDeferErrorCh: make(chan *deferError, 1),
			notify:              make(map[*verifyFuture]struct{}),
			stepDown:            make(chan struct{}, 1),
		}
		returned := make(chan error, 1)
		go func() { returned <- r.pipelineReplicate(s) }()
		go func() { // the sender always has something to send
			for {
				select {
				case s.triggerCh <- struct{}{}:
				case <-stop:
					return
				}
			}
		}()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			close(stop)
			t.Fatalf("round %d: pipelineReplicate still blocked 10 s after the follower refused an AppendEntries", round)
		}
		close(stop)
		<-answered
		fake.Close()
	}
}

// Quorumbus patch 2: a pipelined send goes on until the follower has every entry the
// leader had when it was triggered, in batches of MaxAppendEntries, instead of sending
// one batch per trigger. Triggers coalesce while the sender waits for a free slot of
// the pipeline, so without the patch a burst left the followers behind by all but one
// batch, which then trickled out one batch per CommitTimeout. Here the burst is 300
// entries of one batch each with a CommitTimeout of 500 ms: without the patch they take
// minutes to commit, with it well under a second on a quiet machine.
func TestRaft_PipelineSendsTheWholeBacklog(t *testing.T) {
	conf := inmemConfig(t)
	conf.MaxAppendEntries = 1
	conf.CommitTimeout = 500 * time.Millisecond
	c := MakeCluster(3, t, conf)
	defer c.Close()
	leader := c.Leader()
	if err := leader.Apply([]byte("first"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var futures []ApplyFuture
	for i := 0; i < 300; i++ {
		futures = append(futures, leader.Apply([]byte("x"), 0))
	}
	for i, f := range futures {
		if err := f.Error(); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("only %d of 300 entries committed after %v", i, took)
		}
	}
	t.Logf("300 entries committed in %v", time.Since(start))
}
