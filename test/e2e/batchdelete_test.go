package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
)

// TestBatchDelete sends com.microsoft:batch-delete-messages as the SDKs do (.NET
// DeleteMessagesAsync/PurgeMessagesAsync, the JavaScript 7.10 beta's deleteMessages and
// purgeMessages) to plain and partitioned entities (S-DEL-1..4). With E2E_CLUSTER=1 the
// requests reach a node that leads none of the partitions: they are forwarded.
func TestBatchDelete(t *testing.T) {
	e := newEnv(t)
	deleted := func(t *testing.T, m *rawMgmt, body map[string]any) int32 {
		t.Helper()
		st, resp := m.callBody(t, "com.microsoft:batch-delete-messages", body)
		n, ok := resp["message-count"].(int32)
		if st != 200 || !ok {
			t.Fatalf("batch delete %v: status %d, body %v", body, st, resp)
		}
		return n
	}
	for _, partitioned := range []bool{false, true} {
		t.Run(fmt.Sprint("Partitioned=", partitioned), func(t *testing.T) {
			t.Parallel()
			q := e.queue(t, "bdel", &admin.QueueProperties{EnablePartitioning: to.Ptr(partitioned)})
			s := e.sender(t, q)
			const total = 30
			batch, err := s.NewMessageBatch(testCtx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range total {
				if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprint(i)), PartitionKey: to.Ptr(fmt.Sprint("k", i%5))}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.SendMessageBatch(testCtx(t), batch, nil); err != nil {
				t.Fatal(err)
			}
			r := e.receiver(t, q, nil)
			locked := receiveOne(t, r, 20*time.Second)
			m := e.rawMgmt(t, q)
			cutoff := time.Now().Add(time.Minute)
			if n := deleted(t, m, map[string]any{"message-count": int32(10), "enqueued-time-utc": cutoff}); n != 10 {
				t.Fatalf("deleted %d of 10", n)
			}
			if left := peekAll(t, r); len(left) != total-10 {
				t.Fatalf("%d left after deleting 10, want %d", len(left), total-10)
			}
			// What PurgeMessagesAsync does: batches until one deletes nothing.
			var purged int32
			for {
				n := deleted(t, m, map[string]any{"message-count": int32(7), "enqueued-time-utc": cutoff})
				if n == 0 {
					break
				}
				purged += n
			}
			if purged != total-11 {
				t.Errorf("purged %d, want %d (all but the locked one)", purged, total-11)
			}
			left := peekAll(t, r)
			if len(left) != 1 || *left[0].SequenceNumber != *locked.SequenceNumber {
				t.Fatalf("left %v, want only the locked message %d", bodies(left), *locked.SequenceNumber)
			}
			if err := r.CompleteMessage(testCtx(t), locked, nil); err != nil {
				t.Fatalf("the locked message kept its lock: %v", err)
			}
			if st, _ := m.callBody(t, "com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(4001)}); st != 400 {
				t.Errorf("4,001 messages: status %d, want 400", st)
			}
		})
	}

	// A session receiver's delete (the JavaScript SDK sends session-id) deletes only that
	// session's messages, on a partitioned session queue too.
	t.Run("Session", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "bdelsess", &admin.QueueProperties{RequiresSession: to.Ptr(true), EnablePartitioning: to.Ptr(true)})
		s := e.sender(t, q)
		for i := range 4 {
			send(t, s, &azservicebus.Message{Body: []byte(fmt.Sprint("a", i)), SessionID: to.Ptr("A")},
				&azservicebus.Message{Body: []byte(fmt.Sprint("b", i)), SessionID: to.Ptr("B")})
		}
		m := e.rawMgmt(t, q)
		if n := deleted(t, m, map[string]any{"message-count": int32(4000), "session-id": "A",
			"enqueued-time-utc": time.Now().Add(time.Minute)}); n != 4 {
			t.Fatalf("deleted %d of session A's 4", n)
		}
		sr, err := e.c.AcceptSessionForQueue(testCtx(t), q, "B", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close(testCtx(t))
		if got := bodies(peekAll(t, sr)); fmt.Sprint(got) != "[b0 b1 b2 b3]" {
			t.Fatalf("left %v, want session B's four", got)
		}
	})

	// Peek without bodies (peekMessages omitMessageBody) through the same node.
	t.Run("PeekOmitMessageBody", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "bdelpeek", nil)
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("secret"), Subject: to.Ptr("subj")})
		m := e.rawMgmt(t, q)
		st, resp := m.callBody(t, "com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(0),
			"message-count": int32(10), "omit-message-body": true})
		list, _ := resp["messages"].([]any)
		if st != 200 || len(list) != 1 {
			t.Fatalf("peek: status %d, %d messages", st, len(list))
		}
		raw, _ := list[0].(map[string]any)["message"].([]byte)
		var msg amqp.Message
		if err := msg.UnmarshalBinary(raw); err != nil {
			t.Fatal(err)
		}
		if len(msg.Data) != 0 || msg.Properties == nil || msg.Properties.Subject == nil || *msg.Properties.Subject != "subj" {
			t.Fatalf("peeked without body: data %q, properties %+v", msg.Data, msg.Properties)
		}
	})
}
