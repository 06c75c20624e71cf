package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/hosts"
)

// The leader of a quiescent group cut off from its peers and from clients. Its
// followers' election timers are stopped, so nothing inside the group notices: gossip
// must (the node is declared dead, its quiet followers are woken), one of them must be
// elected, and sends through the other nodes must be acknowledged. When the node comes
// back, the old leader, which stayed quiet believing it leads, must step down and catch
// up: every acknowledged message is received once, through it.
func TestChaosQuietLeaderIsolated(t *testing.T) {
	if os.Getenv("QUORUMBUS_CHAOS") != "1" {
		t.Skip("set QUORUMBUS_CHAOS=1 (make chaos) to run the fault suite: it needs root, iproute2 and nftables")
	}
	if err := hosts.Available(); err != nil {
		t.Fatal(err)
	}
	net := hosts.New(t, hosts.Config{N: 3, Proxy: true, Prefix: "qbq", Subnet: env("CHAOS_QUIET_SUBNET", "10.77.3")})
	if err := net.StartQuorumbus(120*time.Second, "--log-level", "info"); err != nil {
		t.Fatal(err)
	}
	c := &cluster{net: net, bin: harness.Binary(t), members: net.Hosts(), base: 3}
	const queue = "idle"
	createQueue(t, net.Host(0), queue, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var ids []string
	send := func(h *hosts.Host, n int) {
		t.Helper()
		e, err := h.Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		client, err := azservicebus.NewClientFromConnectionString(e.ConnectionString, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close(context.Background())
		s, err := client.NewSender(queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			id := fmt.Sprintf("m-%03d", len(ids))
			sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
			err := s.SendMessage(sctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil)
			scancel()
			if err != nil {
				t.Fatalf("send %s through %s: %v", id, h.Name, err)
			}
			ids = append(ids, id)
		}
	}
	send(net.Host(0), 10)

	leader := func() (*hosts.Host, error) {
		var ps []partition
		for _, h := range net.Hosts() {
			if err := c.qbctl(h, &ps, "cluster", "partitions"); err == nil {
				break
			}
		}
		for _, p := range ps {
			if strings.EqualFold(p.Entity, queue) && p.Leader != "" {
				for _, h := range net.Hosts() {
					if h.Name == p.Leader {
						return h, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("no leader of %s yet", queue)
	}
	// Every replica goes quiet once the queue is idle (--raft-quiesce-after, 2 s).
	harness.WaitFor(t, 60*time.Second, func() error {
		for _, h := range net.Hosts() {
			if q, err := quiet(h, queue); err != nil || !q {
				return fmt.Errorf("%s's replica of %s not quiet yet (%v)", h.Name, queue, err)
			}
		}
		return nil
	})
	old, err := leader()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Isolate(); err != nil {
		t.Fatal(err)
	}
	isolated := time.Now()
	var rest []*hosts.Host
	for _, h := range net.Hosts() {
		if h != old {
			rest = append(rest, h)
		}
	}
	send(rest[0], 1)
	t.Logf("isolated the quiet leader %s; the next send through %s acknowledged within %v", old.Name, rest[0].Name, time.Since(isolated).Round(time.Millisecond))
	send(rest[0], 9)
	send(rest[1], 10)
	if now, err := leader(); err != nil || now == old {
		t.Fatalf("with %s isolated, the leader of %s is %v (%v)", old.Name, queue, now, err)
	}

	if err := net.HealAll(); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged message once, received through the node that was cut off.
	eo, err := old.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(eo.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	r, err := client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	harness.WaitFor(t, 120*time.Second, func() error {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		ms, err := r.ReceiveMessages(rctx, 50, nil)
		for _, m := range ms {
			got[m.MessageID]++
		}
		if len(got) < len(ids) {
			return fmt.Errorf("received %d of %d (%v)", len(got), len(ids), err)
		}
		return nil
	})
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s received %d times, want once", id, got[id])
		}
	}
	if len(got) != len(ids) {
		t.Errorf("received %d distinct messages, sent %d", len(got), len(ids))
	}
}

// quiet reports whether h's replica of entity's partition 0 is quiescent
// (quorumbus_partition_quiet on its /metrics).
func quiet(h *hosts.Host, entity string) (bool, error) {
	e, err := h.Endpoints()
	if err != nil {
		return false, err
	}
	m, err := harness.ScrapeMetrics(e.Admin, 5*time.Second)
	if err != nil {
		return false, err
	}
	v, err := m.Sum("quorumbus_partition_quiet", "entity", entity, "partition", "0")
	return v == 1, err
}
