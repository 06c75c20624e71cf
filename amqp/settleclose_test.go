package amqp

import (
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// A client that settles a delivery (settled=true: receiver-settle-mode first, fire and
// forget) and closes the connection in the same write must still see that settlement
// applied: the close ends the connection, not what the client said before it. Before the
// fix the owner returned on the close before flushing the queued settlements (and a
// flush that did run used the connection's context, which the close cancels), so the
// message stayed locked and came back after its lock expired.
func TestSettlementBeforeCloseIsApplied(t *testing.T) {
	_, b, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("m")), nil); err != nil {
		t.Fatal(err)
	}

	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	first := frames.RcvFirst
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver,
		RcvSettleMode: &first, Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	handle, credit, zero, next := uint32(0), uint32(1), uint32(0), uint32(0)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &next, IncomingWindow: 100, OutgoingWindow: 100,
		Handle: &handle, DeliveryCount: &zero, LinkCredit: &credit}, nil)
	var id uint32
	for {
		if tr, ok := rc.next().(*frames.Transfer); ok && tr.DeliveryID != nil {
			id = *tr.DeliveryID
			break
		}
	}
	// The settlement and the close in one write, so the server reads them together.
	out := frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: id,
		Settled: true, State: frames.Accepted{}}, nil)
	out = frames.AppendFrame(out, frames.TypeAMQP, 0, &frames.Close{}, nil)
	rc.write(out)

	testutil.WaitFor(t, 10*time.Second, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if n := len(b.entities["q1"].queues[0]); n != 0 {
			return fmt.Errorf("%d messages still in q1: the settlement before the close was dropped", n)
		}
		return nil
	})
}
