package batchdelete_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cmd/internal/batchdelete"
	"github.com/quorumbus/quorumbus/cmd/internal/bridge"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// node is one real node with an AMQP listener, as cmd wires it.
type node struct {
	addr, keyName, key string
	n                  *cluster.Node
	client             *azservicebus.Client
}

func start(t *testing.T) *node {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ClusterAddr = "127.0.0.1:0"
	cfg.Raft = cluster.RaftConfig{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ac := amqp.DefaultConfig()
	ac.Addresses = []string{ln.Addr().String()}
	ac.Namespace = n.Namespace()
	srv, err := amqp.New(ac, bridge.New(n))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	name, key := n.DefaultKey()
	c, err := azservicebus.NewClientFromConnectionString(amqp.ConnectionString(ln.Addr().String(), amqp.SASKey{Name: name, Key: key}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return &node{addr: ln.Addr().String(), keyName: name, key: key, n: n, client: c}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (nd *node) queue(t *testing.T, name string) {
	t.Helper()
	if err := nd.n.Store().Apply(ctxT(t), &meta.CreateQueue{Name: name, Properties: meta.DefaultQueueProperties()}); err != nil {
		t.Fatal(err)
	}
}

func (nd *node) send(t *testing.T, q string, n int) {
	t.Helper()
	s, err := nd.client.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := range n {
		if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func (nd *node) open(t *testing.T, token string) *batchdelete.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", nd.addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := batchdelete.Open(ctxT(t), nc, "127.0.0.1", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (nd *node) count(t *testing.T, r *azservicebus.Receiver) int {
	t.Helper()
	ms, err := r.PeekMessages(ctxT(t), 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: new(int64)})
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

// Purge deletes a dead-letter queue's messages in batches up to a limit, and a queue's
// except the locked one (S-DEL-1, S-DEL-3), through the node's batch-delete operation.
func TestPurge(t *testing.T) {
	nd := start(t)
	nd.queue(t, "orders")
	nd.send(t, "orders", 7)
	r, err := nd.client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var got []*azservicebus.ReceivedMessage
	for len(got) < 5 {
		ms, err := r.ReceiveMessages(ctxT(t), 5-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	for _, m := range got[:4] {
		if err := r.DeadLetterMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	locked := got[4]

	c := nd.open(t, sas.Format("sb://127.0.0.1/", nd.keyName, nd.key, time.Now().Add(time.Hour)))
	var progress []int
	n, err := c.Purge(ctxT(t), "orders/$DeadLetterQueue", time.Now().Add(time.Minute), 3, func(d int) { progress = append(progress, d) })
	if err != nil || n != 3 || fmt.Sprint(progress) != "[3]" {
		t.Fatalf("purge 3 of the 4 dead letters: %d, %v, progress %v", n, err, progress)
	}
	dlq, err := nd.client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(context.Background())
	if left := nd.count(t, dlq); left != 1 {
		t.Fatalf("%d dead letters left, want 1", left)
	}
	n, err = c.Purge(ctxT(t), "orders", time.Now().Add(time.Minute), 0, nil)
	if err != nil || n != 2 {
		t.Fatalf("purge the queue: %d, %v; want the 2 not locked", n, err)
	}
	if err := r.CompleteMessage(ctxT(t), locked, nil); err != nil {
		t.Fatalf("the locked message kept its lock: %v", err)
	}
	if left := nd.count(t, dlq); left != 1 {
		t.Fatalf("purging the queue touched its dead-letter queue: %d left", left)
	}
}

// A token the node does not accept, or an entity it does not have, is ErrRefused.
func TestPurgeRefused(t *testing.T) {
	nd := start(t)
	nd.queue(t, "orders")
	bad := nd.open(t, sas.Format("sb://127.0.0.1/", nd.keyName, "wrong-key", time.Now().Add(time.Hour)))
	if _, err := bad.Purge(ctxT(t), "orders/$DeadLetterQueue", time.Now(), 0, nil); !errors.Is(err, batchdelete.ErrRefused) {
		t.Fatalf("with a wrong key: %v, want ErrRefused", err)
	}
	c := nd.open(t, sas.Format("sb://127.0.0.1/", nd.keyName, nd.key, time.Now().Add(time.Hour)))
	if _, err := c.Purge(ctxT(t), "nosuch", time.Now(), 0, nil); !errors.Is(err, batchdelete.ErrRefused) {
		t.Fatalf("a missing queue: %v, want ErrRefused", err)
	}
}
