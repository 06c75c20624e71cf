package cluster

import (
	"context"
	"fmt"
	"net/rpc"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
)

// wireVersionTo reports the version of n's connection to the node at addr (0: none).
func wireVersionTo(n *Node, addr string) int {
	n.rpc.mu.Lock()
	defer n.rpc.mu.Unlock()
	switch c := n.rpc.peers[addr]; {
	case c == nil:
		return 0
	case c.v2 != nil:
		return wire.Version
	default:
		return 1
	}
}

// orderedQueue creates a one-partition queue and returns a node without a replica of it
// and the node that leads it.
func outsiderAndLeader(t *testing.T, ctx context.Context, nodes []*Node, name string) (outsider, leader *Node) {
	t.Helper()
	var ml *Node
	waitFor(t, 30*time.Second, func() error {
		for _, nd := range nodes {
			if nd.meta.IsLeader() {
				ml = nd
				return nil
			}
		}
		return fmt.Errorf("no metadata leader")
	})
	if err := ml.Store().Apply(ctx, &meta.CreateQueue{Name: name, Properties: queueProps(1)}); err != nil {
		t.Fatal(err)
	}
	var pl meta.Placement
	ml.meta.Read(func(s *meta.State) { pl, _ = s.Placement(name) })
	waitFor(t, 30*time.Second, func() error {
		outsider, leader = nil, nil
		for _, nd := range nodes {
			if !containsNode(pl.Partitions[0].Replicas, nd.cfg.NodeID) {
				outsider = nd
				continue
			}
			nd.mu.RLock()
			r := nd.parts[pl.Partitions[0].GroupID]
			nd.mu.RUnlock()
			if r != nil && r.p.IsLeader() {
				leader = nd
			}
		}
		if outsider == nil || leader == nil {
			return fmt.Errorf("outsider %v, leader %v", outsider, leader)
		}
		return nil
	})
	return outsider, leader
}

// sendReceiveComplete sends count messages through n, then receives and completes them
// through n, as a client connected to n would.
func sendReceiveComplete(t *testing.T, ctx context.Context, n *Node, queue string, count int) {
	t.Helper()
	for i := range count {
		m := &fsm.Message{Payload: []byte(fmt.Sprintf("body %d", i))}
		m.MessageID = fmt.Sprintf("m%d", i)
		if err := n.Router().Send(ctx, queue, []*fsm.Message{m}); err != nil {
			t.Fatalf("send %d through %s: %v", i, n.cfg.NodeID, err)
		}
	}
	got := map[string]bool{}
	for len(got) < count {
		msgs, err := n.Router().Receive(ctx, Address{Entity: queue}, "", "", fsm.PeekLock, 8, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("received %d of %d messages, then nothing", len(got), count)
		}
		var toks []fsm.LockToken
		for _, m := range msgs {
			if want := fmt.Sprintf("body %s", m.MessageID[1:]); string(m.Payload) != want {
				t.Fatalf("message %s has body %q, want %q", m.MessageID, m.Payload, want)
			}
			got[m.MessageID] = true
			toks = append(toks, m.LockToken)
		}
		for i, err := range n.Router().Settle(ctx, Settlement{Address: Address{Entity: queue}, Tokens: toks, Disposition: fsm.Complete}) {
			if err != nil {
				t.Fatalf("complete %d: %v", i, err)
			}
		}
	}
	rc, err := n.Store().Runtime(ctx, adminEntity(queue))
	if err != nil || rc.Active != 0 {
		t.Fatalf("after completing everything: %+v, %v", rc, err)
	}
}

// A node of a release before cluster/wire has no route for the versioned wire: its
// transport closes such connections unread. Calls to it fall back to version 1 (gob),
// and a client of a newer node sees no difference. Closing a node's version-2 route
// makes it such a node, as far as its callers can tell.
func TestWireFallsBackToVersion1(t *testing.T) {
	nodes := startCluster(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	outsider, leader := outsiderAndLeader(t, ctx, nodes, "fallback")
	addr := outsider.addrOf(leader.cfg.NodeID)

	sendReceiveComplete(t, ctx, outsider, "fallback", 5)
	if v := wireVersionTo(outsider, addr); v != wire.Version {
		t.Fatalf("between two nodes of this release: version %d, want %d", v, wire.Version)
	}

	for _, nd := range nodes {
		if nd != outsider {
			nd.rpc.layer2.Close() // now "older": the route is unknown, its connections closed
		}
	}
	// The outsider's connections to them end; its next calls redial.
	waitFor(t, 10*time.Second, func() error {
		outsider.rpc.mu.Lock()
		defer outsider.rpc.mu.Unlock()
		if c := outsider.rpc.peers[addr]; c != nil && c.v2 != nil && c.v2.Err() == nil {
			return fmt.Errorf("the version-2 connection to %s still looks open", addr)
		}
		return nil
	})
	sendReceiveComplete(t, ctx, outsider, "fallback", 20)
	if v := wireVersionTo(outsider, addr); v != 1 {
		t.Fatalf("calling a node without the versioned route: version %d, want 1", v)
	}
	// Admin fan-out (the other methods) works over version 1 too.
	if d := outsider.Ops().digestsEverywhere(ctx); len(d) != 3 {
		t.Fatalf("digests from %d nodes over version 1, want 3: %v", len(d), d)
	}
}

// A node of an older release dials route 0 and speaks net/rpc with gob, with the
// standard library's codecs: this node serves it.
func TestWireServesVersion1Callers(t *testing.T) {
	nodes := startCluster(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	outsider, leader := outsiderAndLeader(t, ctx, nodes, "oldcaller")
	e, err := leader.Router().resolve("oldcaller")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := outsider.rpc.layer.Dial(raft.ServerAddress(outsider.addrOf(leader.cfg.NodeID)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := rpc.NewClient(conn) // net/rpc's own gob codec, as an older node might use
	defer c.Close()
	call := func(req *CallReq) *CallResp {
		t.Helper()
		req.Group, req.Timeout = e.parts[0].id, 10*time.Second
		var resp CallResp
		if err := c.Call(rpcName+".Call", req, &resp); err != nil {
			t.Fatalf("%v: %v", wire.Op(req.Op), err)
		}
		if err := resp.E.err(); err != nil {
			t.Fatalf("%v: %v", wire.Op(req.Op), err)
		}
		return &resp
	}
	m := &fsm.Message{Payload: []byte("from an older node")}
	m.MessageID = "old-1"
	if r := call(&CallReq{Op: op(wire.OpEnqueue), Msgs: []*fsm.Message{m}}); len(r.Seqs) != 1 {
		t.Fatalf("enqueue: seqs %v", r.Seqs)
	}
	r := call(&CallReq{Op: op(wire.OpReceive), Receive: fsm.Receive{Mode: fsm.PeekLock, Max: 10}, Wait: time.Second})
	if len(r.Msgs) != 1 || string(r.Msgs[0].Payload) != "from an older node" {
		t.Fatalf("receive: %+v", r.Msgs)
	}
	s := call(&CallReq{Op: op(wire.OpSettle), Settle: fsm.Settle{Tokens: []fsm.LockToken{r.Msgs[0].LockToken}, Disposition: fsm.Complete}})
	if len(s.TokenErrs) > 1 || (len(s.TokenErrs) == 1 && s.TokenErrs[0].Msg != "") {
		t.Fatalf("complete: %+v", s.TokenErrs)
	}
	st := call(&CallReq{Op: op(wire.OpStats)})
	if len(st.Stats.Targets) == 0 || st.Stats.Targets[0].Active != 0 || st.Stats.Targets[0].Counters.Completed != 1 {
		t.Fatalf("stats after the complete: %+v", st.Stats)
	}
	var gs []GroupInfo
	if err := c.Call(rpcName+".GroupStatus", []uint32{e.parts[0].id}, &gs); err != nil || len(gs) != 1 || !gs[0].IsLeader {
		t.Fatalf("GroupStatus: %+v, %v", gs, err)
	}
}
