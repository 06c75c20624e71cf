package main

import (
	"testing"

	"github.com/quorumbus/quorumbus/test/lazyfsctl"
)

// The node ID recorded in a data directory survives a power loss: a node restarted
// with a defaulted ID (a new host name) after a power cut still takes the recorded
// one. test/lazyfs drops what was not fsynced, as a power cut does.
func TestRecordedNodeIDSurvivesPowerLoss(t *testing.T) {
	l, dir := lazyfsctl.MountTemp(t, "nodeid-test")

	if id, err := resolveNodeID(dir, "qb-0", false); err != nil || id != "qb-0" {
		t.Fatalf("first start: %q, %v", id, err)
	}
	if _, err := l.Crash(); err != nil {
		t.Fatal(err)
	}
	if id, err := resolveNodeID(dir, "new-host-name", true); err != nil || id != "qb-0" {
		t.Fatalf("after a power loss, a defaulted ID gives %q, %v; want the recorded qb-0", id, err)
	}
}
