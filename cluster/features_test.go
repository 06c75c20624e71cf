package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// A batch delete is refused, deleting nothing anywhere, while a replica of the entity
// runs on a node of a release that cannot read it (a rolling upgrade half done): the
// node would skip the entry and keep the messages the others deleted. The client sees
// ServerBusy (ErrUnavailable) naming the node, and retries once it is upgraded.
func TestBatchDeleteWaitsForEveryReplicasRelease(t *testing.T) {
	nodes := startClusterWith(t, 3, 3, func(c *Config) { c.olderRelease = c.NodeID == "n3" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "mixed", Properties: queueProps(2)}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		return nodes[0].Router().Send(ctx, "mixed", []*fsm.Message{{Payload: []byte("m0")}})
	})
	for i := 1; i < 4; i++ {
		if err := nodes[1].Router().Send(ctx, "mixed", []*fsm.Message{{Payload: []byte(fmt.Sprint("m", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range nodes[:2] {
		testutil.WaitFor(t, 30*time.Second, func() error {
			if _, ok := nd.gossip.LastSeen("n3"); !ok {
				return fmt.Errorf("%s has not seen n3 in gossip yet", nd.cfg.NodeID)
			}
			return nil
		})
	}
	for _, nd := range nodes {
		n, err := nd.Router().DeleteMessages(ctx, Address{Entity: "mixed"}, "", 10, time.Now().Add(time.Hour).UnixMilli())
		if n != 0 || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "n3") {
			t.Errorf("batch delete through %s with n3 on an older release: %d deleted, %v; want 0 and ErrUnavailable naming n3", nd.cfg.NodeID, n, err)
		}
	}
	got, err := nodes[2].Router().Peek(ctx, Address{Entity: "mixed"}, "", 0, 10)
	if err != nil || len(got) != 4 {
		t.Fatalf("peek after the refused deletes: %d messages, %v; want all 4", len(got), err)
	}
}
