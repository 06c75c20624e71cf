package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
)

// seen is what a user can see of a stored message through the SDK.
type seen struct {
	ID, Body, Props string
	Seq             int64
	Enqueued        time.Time
	Deliveries      uint32
	State           azservicebus.MessageState
	DLQReason       string
}

func (s seen) String() string {
	return fmt.Sprintf("%s seq %d %q props %s enq %s deliveries %d state %d dlq %q", s.ID, s.Seq, s.Body, s.Props,
		s.Enqueued.Format(time.RFC3339Nano), s.Deliveries, s.State, s.DLQReason)
}

func seenOf(m *azservicebus.ReceivedMessage) seen {
	keys := make([]string, 0, len(m.ApplicationProperties))
	for k := range m.ApplicationProperties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var props []string
	for _, k := range keys {
		props = append(props, fmt.Sprintf("%s=%v", k, m.ApplicationProperties[k]))
	}
	s := seen{ID: m.MessageID, Body: string(m.Body), Props: strings.Join(props, ","), Seq: *m.SequenceNumber,
		Enqueued: *m.EnqueuedTime, Deliveries: m.DeliveryCount, State: m.State}
	if m.DeadLetterReason != nil {
		s.DLQReason = *m.DeadLetterReason
	}
	return s
}

// peekAll peeks every message of a receiver (every state), sorted by message ID.
func peekAll(t *testing.T, r interface {
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}) []seen {
	t.Helper()
	var out []seen
	var from *int64
	for {
		ms, err := r.PeekMessages(ctxT(t, 30*time.Second), 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: from})
		if err != nil {
			t.Fatalf("peek: %v", err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			out = append(out, seenOf(m))
		}
		from = to.Ptr(*ms[len(ms)-1].SequenceNumber + 1)
	}
	slices.SortFunc(out, func(a, b seen) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// contents is every message of the entities the backup test fills, by "entity[/dlq]".
func contents(t *testing.T, n *harness.Node) map[string][]seen {
	t.Helper()
	c := n.Client(t)
	out := map[string][]seen{}
	peek := func(key string, r *azservicebus.Receiver, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		out[key] = peekAll(t, r)
	}
	for _, q := range []string{"plain", "parted", "dedupe", "big"} {
		r, err := c.NewReceiverForQueue(q, nil)
		peek(q, r, err)
		r, err = c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		peek(q+"/dlq", r, err)
	}
	for _, sub := range []string{"all", "red"} {
		r, err := c.NewReceiverForSubscription("events", sub, nil)
		peek("events/"+sub, r, err)
	}
	for _, id := range []string{"s1", "s2"} {
		sr, err := c.AcceptSessionForQueue(ctxT(t, 30*time.Second), "sess", id, nil)
		if err != nil {
			t.Fatalf("accept session %s: %v", id, err)
		}
		out["sess/"+id] = peekAll(t, sr)
		st, err := sr.GetSessionState(ctxT(t, 30*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		out["sess/"+id+"/state"] = []seen{{Body: string(st)}}
		sr.Close(context.Background())
	}
	return out
}

// fillForBackup creates and fills the entities; it returns the ID of the message it
// leaves locked (its receiver stays open).
func fillForBackup(t *testing.T, n *harness.Node) (locked string) {
	t.Helper()
	adm := n.AdminClient(t)
	ctx := ctxT(t, 2*time.Minute)
	createQueue(t, n, "plain", &admin.QueueProperties{MaxDeliveryCount: to.Ptr[int32](5)})
	createQueue(t, n, "parted", &admin.QueueProperties{EnablePartitioning: to.Ptr(true)})
	createQueue(t, n, "dedupe", &admin.QueueProperties{RequiresDuplicateDetection: to.Ptr(true)})
	createQueue(t, n, "sess", &admin.QueueProperties{RequiresSession: to.Ptr(true)})
	createQueue(t, n, "load", nil)
	createQueue(t, n, "big", nil) // an image of several 1 MiB chunks each way
	if _, err := adm.CreateTopic(ctx, "events", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, "events", "all", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, "events", "red", &admin.CreateSubscriptionOptions{
		Properties: &admin.SubscriptionProperties{
			DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.SQLFilter{Expression: "color = 'red'"}}}}); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Qbctl(t, "key", "create", "app", "--rights", "Send,Listen", "--key", "YXBwLWtleS1zZWNyZXQtMTIzNDU2Nzg5MA=="); err != nil {
		t.Fatalf("key create: %v\n%s", err, out)
	}

	c := n.Client(t)
	send := func(entity string, ms ...*azservicebus.Message) {
		t.Helper()
		s, err := c.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		for _, m := range ms {
			if err := s.SendMessage(ctx, m, nil); err != nil {
				t.Fatalf("send to %s: %v", entity, err)
			}
		}
	}
	msg := func(id string, props map[string]any) *azservicebus.Message {
		return &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte("body of " + id), ApplicationProperties: props}
	}
	var plain []*azservicebus.Message
	for i := range 12 {
		plain = append(plain, msg(fmt.Sprintf("p-%02d", i), map[string]any{"n": int64(i), "kind": "plain"}))
	}
	send("plain", plain...)
	// Scheduled, in an hour.
	s, err := c.NewSender("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{msg("p-sched", nil)}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	// Deferred, dead-lettered, abandoned (delivery count 1) and still locked.
	r, err := c.NewReceiverForQueue("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ReceiveMessages(ctx, 4, nil)
	for err == nil && len(got) < 4 {
		var more []*azservicebus.ReceivedMessage
		more, err = r.ReceiveMessages(ctx, 4-len(got), nil)
		got = append(got, more...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := r.DeferMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.DeadLetterMessage(ctx, got[1], &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad-input")}); err != nil {
		t.Fatal(err)
	}
	if err := r.AbandonMessage(ctx, got[2], nil); err != nil {
		t.Fatal(err)
	}
	// got[3] stays locked through the backup; the receiver is never closed before it.

	var parted []*azservicebus.Message
	for i := range 16 {
		m := msg(fmt.Sprintf("q-%02d", i), nil)
		m.PartitionKey = to.Ptr(fmt.Sprint("k", i))
		parted = append(parted, m)
	}
	send("parted", parted...)
	send("dedupe", msg("d-1", nil), msg("d-2", nil), msg("d-3", nil))
	var big []*azservicebus.Message
	for i := range 24 {
		m := msg(fmt.Sprintf("b-%02d", i), nil)
		m.Body = []byte(strings.Repeat(fmt.Sprintf("%02d", i), 64<<10)) // 128 KiB
		big = append(big, m)
	}
	send("big", big...)
	var events []*azservicebus.Message
	for i := range 6 {
		color := []string{"red", "blue"}[i%2]
		events = append(events, msg(fmt.Sprintf("e-%d", i), map[string]any{"color": color}))
	}
	send("events", events...)
	var sess []*azservicebus.Message
	for i := range 4 {
		m := msg(fmt.Sprintf("s-%d", i), nil)
		m.SessionID = to.Ptr([]string{"s1", "s2"}[i%2])
		sess = append(sess, m)
	}
	send("sess", sess...)
	sr, err := c.AcceptSessionForQueue(ctx, "sess", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("state of s1"), nil); err != nil {
		t.Fatal(err)
	}
	sr.Close(ctx)
	return got[3].MessageID
}

// A backup taken under load, restored into a new 3-node cluster, gives back every
// message as it was (body, properties, sequence number, enqueue time, delivery count,
// state, dead-letter reason), the session state, the rules, a key, and the
// duplicate-detection history; a locked message comes back available. A truncated or
// corrupted archive is refused with a clear error and restores nothing.
func TestBackupRestore(t *testing.T) {
	src := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	src.WaitFor(t, 60*time.Second, func() error { return formed(t, src) })
	n := src.Nodes[0]
	locked := fillForBackup(t, n)
	for _, e := range []string{"plain", "parted", "dedupe", "sess", "load", "events", "big"} {
		src.WaitFor(t, 60*time.Second, func() error { return serving(t, src, e, 3) })
	}
	want := contents(t, n)

	// A sender keeps sending to "load" through the backup.
	stop := make(chan struct{})
	var mu sync.Mutex
	acked := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		s, err := n.Client(t).NewSender("load", nil)
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(fmt.Sprintf("l-%06d", i)), Body: []byte("load")}, nil)
			cancel()
			if err != nil {
				t.Errorf("load send %d: %v", i, err)
				return
			}
			mu.Lock()
			acked = i + 1
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})
	src.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if acked < 20 {
			return fmt.Errorf("%d load messages acknowledged", acked)
		}
		return nil
	})
	mu.Lock()
	before := acked
	mu.Unlock()
	file := filepath.Join(t.TempDir(), "cluster.qbbackup")
	out, err := n.Qbctl(t, "backup", "create", file)
	if err != nil {
		t.Fatalf("backup create: %v\n%s", err, out)
	}
	close(stop)
	wg.Wait()
	after := acked
	t.Logf("backup: %s (load: %d acknowledged before, %d after)", strings.TrimSpace(out), before, after)
	if again := contents(t, n); !equalContents(t, want, again) {
		t.Fatal("the source changed during the backup (outside the load queue)")
	}

	dst := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	dst.WaitFor(t, 60*time.Second, func() error { return formed(t, dst) })
	via := dst.Nodes[1]

	// A truncated and a corrupted archive are refused, and restore nothing.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.qbbackup")
	for _, c := range []struct {
		name string
		data []byte
		says string
	}{
		{"truncated", data[:len(data)*2/3], "truncated"},
		{"one byte changed", func() []byte {
			b := slices.Clone(data)
			i := len(b) / 2
			for b[i] == 0 { // change a byte of content, not of zero padding
				i++
			}
			b[i] ^= 0x01
			return b
		}(), "corrupt"},
	} {
		if err := os.WriteFile(bad, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := via.Qbctl(t, "backup", "restore", bad)
		if err == nil {
			t.Fatalf("%s archive: restore succeeded: %s", c.name, out)
		}
		if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "nothing was restored") {
			t.Fatalf("%s archive: the error does not say %q and that nothing was restored: %v", c.name, c.says, err)
		}
		t.Logf("%s archive: %v", c.name, err)
		noEntities(t, via)
	}

	out, err = via.Qbctl(t, "backup", "restore", file)
	if err != nil {
		t.Fatalf("backup restore: %v\n%s", err, out)
	}
	t.Logf("restore: %s", strings.TrimSpace(out))
	got := contents(t, dst.Nodes[2])
	// Locks are not restored: the message locked at backup time is available, and shows
	// (as Service Bus does for an unlocked message) the count its next delivery carries.
	restored := map[string][]seen{}
	for k, ms := range want {
		restored[k] = slices.Clone(ms)
		for i := range restored[k] {
			if k == "plain" && restored[k][i].ID == locked {
				restored[k][i].Deliveries++
			}
		}
	}
	if !equalContents(t, restored, got) {
		t.Fatal("the restored cluster does not hold what the backup held")
	}
	// A cluster of another size takes the same archive: here a single node, whose
	// partitions have one replica each.
	single := harness.Start(t)
	if out, err := single.Qbctl(t, "backup", "restore", file); err != nil {
		t.Fatalf("backup restore into a single node: %v\n%s", err, out)
	}
	if !equalContents(t, restored, contents(t, single)) {
		t.Fatal("the restored single node does not hold what the backup held")
	}

	// The load queue holds a prefix of what was sent: everything acknowledged before the
	// backup started, nothing never sent.
	lr, err := dst.Nodes[0].Client(t).NewReceiverForQueue("load", nil)
	if err != nil {
		t.Fatal(err)
	}
	load := peekAll(t, lr)
	if len(load) < before || len(load) > after {
		t.Fatalf("load: %d messages restored, want between %d (acknowledged before the backup) and %d", len(load), before, after)
	}
	for i, m := range load {
		if m.ID != fmt.Sprintf("l-%06d", i) {
			t.Fatalf("load: message %d is %s: not a prefix of what was sent", i, m.ID)
		}
	}

	c := dst.Nodes[0].Client(t)
	ctx := ctxT(t, time.Minute)
	// Duplicate detection remembers d-2: sending it again is dropped.
	s, err := c.NewSender("dedupe", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("d-2"), Body: []byte("again")}, nil); err != nil {
		t.Fatal(err)
	}
	dr, err := c.NewReceiverForQueue("dedupe", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := peekAll(t, dr); len(got) != 3 {
		t.Fatalf("dedupe after re-sending d-2: %d messages, want 3: %v", len(got), got)
	}
	// The rule of "red" still filters.
	es, err := c.NewSender("events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := es.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("e-new"), Body: []byte("x"),
		ApplicationProperties: map[string]any{"color": "blue"}}, nil); err != nil {
		t.Fatal(err)
	}
	after2 := contents(t, dst.Nodes[0])
	if len(after2["events/all"]) != len(want["events/all"])+1 || len(after2["events/red"]) != len(want["events/red"]) {
		t.Fatalf("after a blue message: all %d (want %d), red %d (want %d)", len(after2["events/all"]), len(want["events/all"])+1,
			len(after2["events/red"]), len(want["events/red"]))
	}
	// The key "app" works on the new cluster.
	kc, err := azservicebus.NewClientFromConnectionString(withKey(dst.Nodes[2].ConnectionString, "app", "YXBwLWtleS1zZWNyZXQtMTIzNDU2Nzg5MA=="), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close(context.Background())
	ks, err := kc.NewSender("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.SendMessage(ctx, &azservicebus.Message{Body: []byte("with app key")}, nil); err != nil {
		t.Fatalf("send with the restored key: %v", err)
	}
	// Every active message of "plain" is received with the count peek showed, the one
	// locked at backup time too.
	pr, err := c.NewReceiverForQueue("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	active := 0
	for _, m := range restored["plain"] {
		if m.State == azservicebus.MessageStateActive {
			active++
		}
	}
	var recv []*azservicebus.ReceivedMessage
	for len(recv) < active+1 {
		ms, err := pr.ReceiveMessages(ctx, active+1-len(recv), nil)
		if err != nil {
			t.Fatalf("receive from plain after %d: %v", len(recv), err)
		}
		recv = append(recv, ms...)
	}
	wantCount := map[string]uint32{}
	for _, m := range restored["plain"] {
		wantCount[m.ID] = m.Deliveries
	}
	for _, m := range recv {
		if string(m.Body) == "with app key" {
			continue
		}
		if m.DeliveryCount != wantCount[m.MessageID] {
			t.Errorf("plain %s: delivery count %d after restore and one receive, want %d", m.MessageID, m.DeliveryCount, wantCount[m.MessageID])
		}
	}

	// A second restore is refused: the cluster has entities now.
	if out, err := via.Qbctl(t, "backup", "restore", file); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a cluster with entities: %v\n%s", err, out)
	}
}

func equalContents(t *testing.T, want, got map[string][]seen) bool {
	t.Helper()
	ok := true
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Errorf("%s: %d messages, want %d", k, len(g), len(w))
			ok = false
			continue
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s:\n got %v\nwant %v", k, g[i], w[i])
				ok = false
			}
		}
	}
	return ok
}

func noEntities(t *testing.T, n *harness.Node) {
	t.Helper()
	adm := n.AdminClient(t)
	qp := adm.NewListQueuesPager(nil)
	for qp.More() {
		page, err := qp.NextPage(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Queues) > 0 {
			t.Fatalf("after a refused restore, %s lists queue %s", n.ID, page.Queues[0].QueueName)
		}
	}
	tp := adm.NewListTopicsPager(nil)
	for tp.More() {
		page, err := tp.NextPage(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Topics) > 0 {
			t.Fatalf("after a refused restore, %s lists topic %s", n.ID, page.Topics[0].TopicName)
		}
	}
}
