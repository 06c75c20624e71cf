// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

// Quorumbus patch 4 (docs/raft-patches.md in the Quorumbus repository).

package raft

import (
	"testing"
	"time"
)

func quiesceConfig(t *testing.T) *Config {
	conf := inmemConfig(t)
	conf.QuiesceAfter = 100 * time.Millisecond
	return conf
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leaderOf waits for c to have a leader.
func leaderOf(t *testing.T, c *cluster) *Raft {
	t.Helper()
	var l *Raft
	waitFor(t, 10*time.Second, "a leader", func() bool {
		for _, r := range c.rafts {
			if r.State() == Leader {
				l = r
				return true
			}
		}
		return false
	})
	return l
}

func allQuiet(c *cluster) bool {
	for _, r := range c.rafts {
		if !r.Quiet() {
			return false
		}
	}
	return true
}

// An idle group goes quiet on every server: no heartbeats reach the followers, and no
// election happens although the followers hear nothing for many heartbeat timeouts. An
// Apply wakes it and commits; then it goes quiet again.
func TestRaft_QuiesceIdleGroup(t *testing.T) {
	c := MakeCluster(3, t, quiesceConfig(t))
	defer c.Close()
	leader := leaderOf(t, c)
	if err := leader.Apply([]byte("a"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "every server quiet", func() bool { return allQuiet(c) })
	term := leader.CurrentTerm()
	contact := map[*Raft]time.Time{}
	for _, r := range c.rafts {
		contact[r] = r.LastContact()
	}
	time.Sleep(20 * leader.config().HeartbeatTimeout) // 1 s: 20 heartbeat timeouts
	var followers []*Raft
	for _, r := range c.rafts {
		if r != leader {
			followers = append(followers, r)
		}
	}
	for i, f := range followers {
		// At most the heartbeats already on their way when the leader went quiet (they
		// go every HeartbeatTimeout/10); without quiescence it moves by the whole second.
		if moved := f.LastContact().Sub(contact[f]); moved >= leader.config().HeartbeatTimeout {
			t.Errorf("follower %d heard from the leader while quiet (last contact moved by %v)", i, moved)
		}
		if f.State() != Follower || f.CurrentTerm() != term {
			t.Errorf("follower %d: %v at term %d while quiet, want a follower at %d", i, f.State(), f.CurrentTerm(), term)
		}
	}
	if leader.State() != Leader || !allQuiet(c) {
		t.Fatalf("the quiet group changed: leader %v, all quiet %v", leader.State(), allQuiet(c))
	}
	start := time.Now()
	if err := leader.Apply([]byte("b"), time.Second).Error(); err != nil {
		t.Fatalf("apply on a quiet leader: %v", err)
	}
	t.Logf("apply on a quiet group committed in %v", time.Since(start))
	waitFor(t, 5*time.Second, "the followers applied b", func() bool {
		for _, f := range c.fsms {
			if len(getMockFSM(f).Logs()) < 2 {
				return false
			}
		}
		return true
	})
	waitFor(t, 5*time.Second, "quiet again", func() bool { return allQuiet(c) })
	if leader.CurrentTerm() != term {
		t.Fatalf("term moved from %d to %d", term, leader.CurrentTerm())
	}
}

// A quiet group whose leader goes: the followers stay quiet (nothing tells them) until
// whoever watches the nodes calls Wake; then they elect. The old leader, cut off, can
// commit nothing: its Apply fails, and the new leader's log never holds it.
func TestRaft_QuiesceLeaderGoneAndWake(t *testing.T) {
	c := MakeCluster(3, t, quiesceConfig(t))
	defer c.Close()
	old := leaderOf(t, c)
	if err := old.Apply([]byte("a"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "every server quiet", func() bool { return allQuiet(c) })
	term := old.CurrentTerm()
	c.Disconnect(old.localAddr)
	time.Sleep(10 * old.config().HeartbeatTimeout)
	for _, f := range c.rafts {
		if f != old && (f.State() != Follower || f.CurrentTerm() != term) {
			t.Fatalf("a quiet follower acted before it was woken: %v at term %d", f.State(), f.CurrentTerm())
		}
	}
	// The old leader, still quiet and cut off, is asked to apply: it wakes, cannot reach
	// a quorum, and steps down without committing.
	lost := old.Apply([]byte("lost"), 0)
	for _, f := range c.rafts {
		if f != old {
			f.Wake()
		}
	}
	var leader *Raft
	waitFor(t, 10*time.Second, "a new leader among the followers", func() bool {
		for _, f := range c.rafts {
			if f != old && f.State() == Leader {
				leader = f
				return true
			}
		}
		return false
	})
	if leader.CurrentTerm() <= term {
		t.Fatalf("new leader at term %d, want past %d", leader.CurrentTerm(), term)
	}
	if err := lost.Error(); err == nil {
		t.Fatal("the cut-off old leader committed an entry")
	}
	if err := leader.Apply([]byte("b"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for _, f := range c.fsms {
		for _, l := range getMockFSM(f).Logs() {
			if string(l) == "lost" {
				t.Fatal("an entry the cut-off leader took was applied")
			}
		}
	}
}

// A voter that asks a quiet leader for a pre-vote has lost track of it (it restarted,
// or missed the quiesce mark): the leader wakes, so that its heartbeats and appends find
// the voter again. Without it, a restarted follower of a quiet group heard nothing until
// the next proposal, and could not catch up.
func TestRaft_QuiesceLeaderWakesOnPreVote(t *testing.T) {
	c := MakeCluster(3, t, quiesceConfig(t))
	defer c.Close()
	leader := leaderOf(t, c)
	if err := leader.Apply([]byte("a"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "every server quiet", func() bool { return allQuiet(c) })
	var follower *Raft
	for _, r := range c.rafts {
		if r != leader {
			follower = r
			break
		}
	}
	addr, tr := NewInmemTransport("")
	c.trans[c.IndexOf(leader)].(*InmemTransport).Connect(addr, tr)
	tr.Connect(leader.localAddr, c.trans[c.IndexOf(leader)].(*InmemTransport))
	req := &RequestPreVoteRequest{
		RPCHeader:    RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte(follower.localID), Addr: []byte(follower.localAddr)},
		Term:         leader.CurrentTerm() + 1,
		LastLogIndex: leader.LastIndex(),
		LastLogTerm:  leader.CurrentTerm(),
	}
	var resp RequestPreVoteResponse
	if err := tr.RequestPreVote(leader.localID, leader.localAddr, req, &resp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the leader awake", func() bool { return !leader.Quiet() })
	if leader.State() != Leader {
		t.Fatalf("the leader is %v after a pre-vote request", leader.State())
	}
}
