package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/partition"
)

// A session receive forwarded to the partition's leader whose connection breaks while
// it long-polls there (gossip declared the leader dead and the node dropped its
// connections, say) must not go on waiting on the leader and lock the session's next
// message for a reply nobody reads: the holder's next receive would then get the
// messages after it first (S-SES-3). A chaos run found it: a session receiver got
// 2029..2038 of a session before 2028, which came only after it accepted the session
// again.
func TestBrokenForwardedReceiveLocksNothingLater(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := queueProps(1)
	p.RequiresSession = true
	if err := nodes[0].Store().Apply(ctx, &meta.CreateQueue{Name: "sq", Properties: p}); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes, "sq")
	var fwd *Node
	for _, nd := range nodes {
		if nd != leader {
			fwd = nd
		}
	}
	a := Address{Entity: "sq"}
	rt := fwd.Router()
	if _, _, err := rt.AcceptSession(ctx, a, "s", "holder", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// A receive through fwd long-polls on the leader; then fwd's connection to the
	// leader breaks under it.
	errc := make(chan error, 1)
	go func() {
		_, err := rt.Receive(ctx, a, "s", "holder", fsm.PeekLock, 5, 20*time.Second)
		errc <- err
	}()
	waitFor(t, 10*time.Second, func() error {
		n := 0
		leader.inflight.Range(func(any, any) bool { n++; return true })
		if n == 0 {
			return errors.New("the receive is not waiting on the leader yet")
		}
		return nil
	})
	fwd.rpc.dropAddr(fwd.addrOf(leader.cfg.NodeID))
	select {
	case err := <-errc:
		if !errors.Is(err, partition.ErrOutcomeUnknown) {
			t.Fatalf("receive on a broken connection: %v, want its outcome unknown", err)
		}
	case <-ctx.Done():
		t.Fatal("the receive did not return when its connection broke")
	}

	for i := 1; i <= 2; i++ {
		m := &fsm.Message{}
		m.SessionID = "s"
		m.MessageID = fmt.Sprintf("m%d", i)
		if err := rt.Send(ctx, "sq", []*fsm.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := rt.Receive(ctx, a, "s", "holder", fsm.PeekLock, 5, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) == 0 || msgs[0].MessageID != "m1" {
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.MessageID
		}
		t.Fatalf("the session's holder received %v after the broken receive, want m1 first", ids)
	}
}
