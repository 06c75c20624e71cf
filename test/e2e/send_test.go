package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
)

// TestSend covers what a sender observes: every message property round-trips, the
// broker stamps sequence numbers and times, batches, pipelining and size limits.
func TestSend(t *testing.T) {
	e := newEnv(t)

	// S-SEND-1, S-SEND-5: every settable property comes back unchanged, and the broker
	// stamps SequenceNumber, EnqueuedTime and ExpiresAt.
	t.Run("MessageProperties", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "props", nil)
		before := time.Now()
		in := &azservicebus.Message{
			Body:             []byte("payload"),
			MessageID:        to.Ptr("mid-1"),
			CorrelationID:    to.Ptr("corr-1"),
			Subject:          to.Ptr("subject-1"),
			To:               to.Ptr("to-1"),
			ReplyTo:          to.Ptr("reply-to-1"),
			ReplyToSessionID: to.Ptr("reply-session-1"),
			ContentType:      to.Ptr("application/json"),
			TimeToLive:       to.Ptr(time.Hour),
			PartitionKey:     to.Ptr("pk-1"),
		}
		send(t, e.sender(t, q), in)
		m := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		after := time.Now()

		if string(m.Body) != "payload" {
			t.Errorf("Body = %q", m.Body)
		}
		for _, c := range []struct {
			field     string
			got, want *string
		}{
			{"MessageID", &m.MessageID, in.MessageID},
			{"CorrelationID", m.CorrelationID, in.CorrelationID},
			{"Subject", m.Subject, in.Subject},
			{"To", m.To, in.To},
			{"ReplyTo", m.ReplyTo, in.ReplyTo},
			{"ReplyToSessionID", m.ReplyToSessionID, in.ReplyToSessionID},
			{"ContentType", m.ContentType, in.ContentType},
			{"PartitionKey", m.PartitionKey, in.PartitionKey},
		} {
			if c.got == nil || *c.got != *c.want {
				t.Errorf("%s = %v, want %q", c.field, deref(c.got), *c.want)
			}
		}
		if m.SessionID != nil {
			t.Errorf("SessionID = %q, want none", *m.SessionID)
		}
		if m.TimeToLive == nil || *m.TimeToLive != time.Hour {
			t.Errorf("TimeToLive = %v, want 1h", m.TimeToLive)
		}
		if m.SequenceNumber == nil || *m.SequenceNumber < 1 {
			t.Errorf("SequenceNumber = %v", m.SequenceNumber)
		}
		// Broker and test share a clock; allow a second of rounding.
		if m.EnqueuedTime == nil || m.EnqueuedTime.Before(before.Add(-time.Second)) || m.EnqueuedTime.After(after.Add(time.Second)) {
			t.Errorf("EnqueuedTime = %v, want within [%v, %v]", m.EnqueuedTime, before, after)
		} else if m.ExpiresAt == nil || !m.ExpiresAt.Equal(m.EnqueuedTime.Add(time.Hour)) {
			t.Errorf("ExpiresAt = %v, want EnqueuedTime+1h = %v", m.ExpiresAt, m.EnqueuedTime.Add(time.Hour))
		}
		if m.LockedUntil == nil || !m.LockedUntil.After(after) {
			t.Errorf("LockedUntil = %v, want in the future", m.LockedUntil)
		}
		if m.DeliveryCount != 1 {
			t.Errorf("DeliveryCount = %d, want 1", m.DeliveryCount)
		}
		if m.State != azservicebus.MessageStateActive {
			t.Errorf("State = %v, want active", m.State)
		}
	})

	// S-SEND-1: application properties of every AMQP simple type the SDK can send come
	// back with the same Go type and value.
	t.Run("ApplicationPropertyTypes", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "appprops", nil)
		ts := time.Date(2024, 5, 6, 7, 8, 9, 123_000_000, time.UTC) // AMQP timestamps have ms precision
		props := map[string]any{
			"string":  "hello",
			"empty":   "",
			"int64":   int64(-1 << 40),
			"int32":   int32(-7),
			"int16":   int16(-300),
			"int8":    int8(-5),
			"uint64":  uint64(1 << 63),
			"uint32":  uint32(4_000_000_000),
			"uint16":  uint16(65_000),
			"uint8":   uint8(200),
			"float64": 3.25,
			"float32": float32(1.5),
			"true":    true,
			"false":   false,
			"time":    ts,
			"bytes":   []byte{0, 1, 2, 255},
			"uuid":    amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			"unicode": "héllo wörld ✓",
		}
		send(t, e.sender(t, q), &azservicebus.Message{Body: []byte("x"), ApplicationProperties: props})
		m := receiveOne(t, e.receiver(t, q, nil), 10*time.Second)
		for k, want := range props {
			got, ok := m.ApplicationProperties[k]
			if !ok {
				t.Errorf("property %q missing", k)
				continue
			}
			if wt, ok := want.(time.Time); ok {
				if gt, ok := got.(time.Time); !ok || !gt.Equal(wt) {
					t.Errorf("property %q = %#v, want %v", k, got, wt)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("property %q = %#v (%T), want %#v (%T)", k, got, got, want, want)
			}
		}
		if len(m.ApplicationProperties) != len(props) {
			t.Errorf("got %d properties, want %d: %v", len(m.ApplicationProperties), len(props), m.ApplicationProperties)
		}
	})

	// S-SEND-1: empty and binary bodies survive unchanged.
	t.Run("Bodies", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "bodies", nil)
		bin := make([]byte, 100_000) // larger than one 64 KiB frame: fragmented both ways
		for i := range bin {
			bin[i] = byte(i * 7)
		}
		s := e.sender(t, q)
		send(t, s, &azservicebus.Message{Body: nil}, &azservicebus.Message{Body: bin})
		msgs := receiveN(t, e.receiver(t, q, nil), 2, 10*time.Second)
		if len(msgs[0].Body) != 0 {
			t.Errorf("empty body came back as %d bytes", len(msgs[0].Body))
		}
		if !bytes.Equal(msgs[1].Body, bin) {
			t.Errorf("100 kB body changed (len %d)", len(msgs[1].Body))
		}
	})

	// S-SEND-5, S-RCV-2: sequence numbers are unique and increase in send order, and
	// messages are delivered in that order.
	t.Run("SequenceNumbersAndOrder", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "order", nil)
		s := e.sender(t, q)
		for i := range 20 {
			send(t, s, body(fmt.Sprint(i)))
		}
		msgs := receiveN(t, e.receiver(t, q, nil), 20, 15*time.Second)
		for i, m := range msgs {
			if string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("message %d has body %q: order %v", i, m.Body, bodies(msgs))
			}
			if i > 0 && *m.SequenceNumber <= *msgs[i-1].SequenceNumber {
				t.Fatalf("sequence numbers not increasing: %d then %d", *msgs[i-1].SequenceNumber, *m.SequenceNumber)
			}
		}
	})

	// S-SEND-5: a batch is stored as one unit, in order, each message with its own
	// properties and sequence number.
	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "batch", nil)
		s := e.sender(t, q)
		b, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 25 {
			m := &azservicebus.Message{Body: []byte(fmt.Sprint(i)), Subject: to.Ptr(fmt.Sprint("s", i)),
				ApplicationProperties: map[string]any{"i": int64(i)}}
			if i%2 == 0 {
				m.MessageID = to.Ptr(fmt.Sprint("id-", i))
			}
			if err := b.AddMessage(m, nil); err != nil {
				t.Fatal(err)
			}
		}
		if b.NumMessages() != 25 {
			t.Fatalf("batch holds %d", b.NumMessages())
		}
		if err := s.SendMessageBatch(testCtx(t), b, nil); err != nil {
			t.Fatal(err)
		}
		msgs := receiveN(t, e.receiver(t, q, nil), 25, 15*time.Second)
		seen := map[int64]bool{}
		for i, m := range msgs {
			if string(m.Body) != fmt.Sprint(i) || deref(m.Subject) != fmt.Sprint("s", i) || m.ApplicationProperties["i"] != int64(i) {
				t.Errorf("message %d: body %q subject %q props %v", i, m.Body, deref(m.Subject), m.ApplicationProperties)
			}
			if i%2 == 0 && m.MessageID != fmt.Sprint("id-", i) {
				t.Errorf("message %d: MessageID %q", i, m.MessageID)
			}
			if seen[*m.SequenceNumber] {
				t.Errorf("sequence number %d twice", *m.SequenceNumber)
			}
			seen[*m.SequenceNumber] = true
		}
	})

	// S-SEND-5, S-SEND-6: a batch is all-or-nothing. Fill a 1 MB queue with batches of 10
	// until the quota rejects one: the number of stored messages is a whole number of
	// batches, and the rejection is not retryable success.
	t.Run("BatchAllOrNothingAtQuota", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "quota", &admin.QueueProperties{MaxSizeInMegabytes: to.Ptr[int32](1)})
		s := e.isolated(t).sender(t, q)
		payload := bytes.Repeat([]byte("q"), 15_000)
		sent, rejected := 0, false
		for range 20 { // 20 batches of 150 kB = 3 MB: well past the 1 MB quota
			b, err := s.NewMessageBatch(testCtx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				if err := b.AddMessage(&azservicebus.Message{Body: payload}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.SendMessageBatch(testCtx(t), b, nil); err != nil {
				rejected = true
				var ae *amqp.Error
				if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded {
					t.Errorf("quota rejection %v (%T), want condition %s", err, err, amqp.ErrCondResourceLimitExceeded)
				}
				break
			}
			sent += 10
		}
		if !rejected {
			t.Fatalf("3 MB of batches accepted by a 1 MB queue")
		}
		if sent == 0 {
			t.Fatalf("the first 150 kB batch was already rejected")
		}
		rp, err := e.admin.GetQueueRuntimeProperties(testCtx(t), q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rp.ActiveMessageCount != int32(sent) {
			t.Fatalf("stored %d messages, want exactly the %d of the accepted batches", rp.ActiveMessageCount, sent)
		}
	})

	// S-SEND-3: many unsettled sends in flight at once, from several goroutines on one
	// sender and on several senders, all acknowledged and all stored exactly once.
	t.Run("PipelinedConcurrentSends", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "pipeline", nil)
		shared := e.sender(t, q)
		const goroutines, each = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*each)
		for g := range goroutines {
			s := shared
			if g%2 == 1 {
				s = e.sender(t, q)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if err := s.SendMessage(testCtx(t), body(fmt.Sprintf("%d-%d", g, i)), nil); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		r := e.receiver(t, q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		got := receiveUpTo(t, r, goroutines*each, 20*time.Second)
		expectNothing(t, r, time.Second)
		var names []string
		seqs := map[int64]bool{}
		for _, m := range got {
			names = append(names, string(m.Body))
			seqs[*m.SequenceNumber] = true
		}
		sort.Strings(names)
		var want []string
		for g := range goroutines {
			for i := range each {
				want = append(want, fmt.Sprintf("%d-%d", g, i))
			}
		}
		sort.Strings(want)
		if !reflect.DeepEqual(names, want) {
			t.Fatalf("stored %d messages, want the %d sent exactly once", len(names), len(want))
		}
		if len(seqs) != len(want) {
			t.Fatalf("%d distinct sequence numbers for %d messages", len(seqs), len(want))
		}
		// Each goroutine waits for one acknowledgement before the next send, so its
		// messages are delivered in its send order (S-RCV-2).
		next := map[int]int{}
		for _, m := range got {
			var g, i int
			if _, err := fmt.Sscanf(string(m.Body), "%d-%d", &g, &i); err != nil {
				t.Fatal(err)
			}
			if i != next[g] {
				t.Fatalf("goroutine %d: message %d delivered when %d was expected", g, i, next[g])
			}
			next[g] = i + 1
		}
	})

	// S-SEND-6: a message above the entity's MaxMessageSizeInKilobytes is refused with
	// ErrMessageTooLarge, both alone and in a batch; a larger limit admits it.
	t.Run("MessageTooLarge", func(t *testing.T) {
		t.Parallel()
		small := e.queue(t, "small", nil) // 256 KB
		big := e.queue(t, "big", &admin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](1024)})
		huge := &azservicebus.Message{Body: bytes.Repeat([]byte("h"), 300*1024)}

		s := e.sender(t, small)
		err := s.SendMessage(testCtx(t), huge, nil)
		if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
			t.Fatalf("300 kB send to a 256 KB queue: %v, want ErrMessageTooLarge", err)
		}
		b, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AddMessage(huge, nil); !errors.Is(err, azservicebus.ErrMessageTooLarge) {
			t.Fatalf("AddMessage of 300 kB: %v, want ErrMessageTooLarge", err)
		}
		// The sender still works after the refusal.
		send(t, s, body("fits"))
		if m := receiveOne(t, e.receiver(t, small, nil), 10*time.Second); string(m.Body) != "fits" {
			t.Fatalf("got %q", m.Body)
		}

		// The batch limit is the entity's size: ten 30 kB messages do not fit in 256 KB.
		b, err = s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		added := 0
		for range 10 {
			if err := b.AddMessage(&azservicebus.Message{Body: make([]byte, 30*1024)}, nil); err != nil {
				if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
					t.Fatal(err)
				}
				break
			}
			added++
		}
		if added < 7 || added > 8 {
			t.Errorf("a 256 KB batch took %d messages of 30 kB, want 7 or 8", added)
		}
		if err := s.SendMessageBatch(testCtx(t), b, nil); err != nil {
			t.Fatalf("send of a full batch: %v", err)
		}

		send(t, e.sender(t, big), huge)
		m := receiveOne(t, e.receiver(t, big, nil), 10*time.Second)
		if len(m.Body) != len(huge.Body) {
			t.Fatalf("got %d bytes, want %d", len(m.Body), len(huge.Body))
		}
	})

	// protocol.md §4: entity names are case-insensitive and may contain '/'.
	t.Run("EntityNames", func(t *testing.T) {
		t.Parallel()
		q := name("Orders/EU")
		if _, err := e.admin.CreateQueue(testCtx(t), q, nil); err != nil {
			t.Fatal(err)
		}
		send(t, e.sender(t, strings.ToLower(q)), body("lower"))
		send(t, e.sender(t, q), body("exact"))
		msgs := receiveN(t, e.receiver(t, strings.ToUpper(q), nil), 2, 10*time.Second)
		if fmt.Sprint(bodies(msgs)) != "[lower exact]" {
			t.Fatalf("got %v", bodies(msgs))
		}
	})

	// S-LOCK-11: a peek returns as many messages as asked when they exist.
	t.Run("PeekMany", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "peekmany", nil)
		s := e.sender(t, q)
		b, err := s.NewMessageBatch(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 150 {
			if err := b.AddMessage(body(fmt.Sprint(i)), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SendMessageBatch(testCtx(t), b, nil); err != nil {
			t.Fatal(err)
		}
		r := e.receiver(t, q, nil)
		p, err := r.PeekMessages(testCtx(t), 200, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != 150 || string(p[149].Body) != "149" {
			t.Fatalf("peek of 200 returned %d of 150", len(p))
		}
	})

	// S-LOCK-7: receiving a deferred message by a sequence number that does not exist fails.
	t.Run("ReceiveDeferredUnknown", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "defunknown", nil)
		send(t, e.sender(t, q), body("active"))
		r := e.receiver(t, q, nil)
		msgs, err := r.ReceiveDeferredMessages(testCtx(t), []int64{987654}, nil)
		if err == nil && len(msgs) > 0 {
			t.Fatalf("deferred receive of an unknown sequence number returned %v", bodies(msgs))
		}
		// An active (not deferred) message is not receivable by sequence number either.
		m := receiveOne(t, r, 10*time.Second)
		if err := r.AbandonMessage(testCtx(t), m, nil); err != nil {
			t.Fatal(err)
		}
		msgs, err = r.ReceiveDeferredMessages(testCtx(t), []int64{*m.SequenceNumber}, nil)
		if err == nil && len(msgs) > 0 {
			t.Fatalf("deferred receive of an active message returned it")
		}
	})

	// S-SEND-1: SendAMQPAnnotatedMessage bodies other than one data section (amqp-value,
	// amqp-sequence, several data sections), non-string ids, extra properties and custom
	// message annotations survive storage unchanged.
	t.Run("AMQPAnnotatedMessages", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "annotated", nil)
		s := e.sender(t, q)
		created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		msgs := []*azservicebus.AMQPAnnotatedMessage{
			{Body: azservicebus.AMQPAnnotatedMessageBody{Value: "a string value"},
				Properties: &azservicebus.AMQPAnnotatedMessageProperties{MessageID: "v1", ContentEncoding: to.Ptr("utf-8"),
					CreationTime: &created, GroupSequence: to.Ptr[uint32](3), UserID: []byte("user")},
				MessageAnnotations: map[any]any{"x-custom": int64(5)}},
			{Body: azservicebus.AMQPAnnotatedMessageBody{Value: map[string]any{"k": int64(1)}}},
			{Body: azservicebus.AMQPAnnotatedMessageBody{Sequence: [][]any{{"a", int64(2)}, {true}}}},
			{Body: azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("part1"), []byte("part2")}},
				Properties: &azservicebus.AMQPAnnotatedMessageProperties{MessageID: uint64(42), CorrelationID: []byte{1, 2}}},
		}
		for _, m := range msgs {
			if err := s.SendAMQPAnnotatedMessage(testCtx(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
		got := receiveN(t, e.receiver(t, q, nil), len(msgs), 10*time.Second)
		raw := func(i int) *azservicebus.AMQPAnnotatedMessage { return got[i].RawAMQPMessage }
		if v := raw(0).Body.Value; v != "a string value" {
			t.Errorf("value body %#v", v)
		}
		if p := raw(0).Properties; p == nil || p.MessageID != "v1" || deref(p.ContentEncoding) != "utf-8" ||
			p.CreationTime == nil || !p.CreationTime.Equal(created) || deref(p.GroupSequence) != uint32(3) || string(p.UserID) != "user" {
			t.Errorf("properties %+v", raw(0).Properties)
		}
		if v := raw(0).MessageAnnotations["x-custom"]; v != int64(5) {
			t.Errorf("custom annotation %#v", v)
		}
		if v, ok := raw(1).Body.Value.(map[string]any); !ok || v["k"] != int64(1) {
			t.Errorf("map value body %#v", raw(1).Body.Value)
		}
		if sq := raw(2).Body.Sequence; !reflect.DeepEqual(sq, [][]any{{"a", int64(2)}, {true}}) {
			t.Errorf("sequence body %#v", sq)
		}
		if d := raw(3).Body.Data; len(d) != 2 || string(d[0]) != "part1" || string(d[1]) != "part2" {
			t.Errorf("data sections %q", d)
		}
		if p := raw(3).Properties; p == nil || p.MessageID != uint64(42) || !reflect.DeepEqual(p.CorrelationID, []byte{1, 2}) {
			t.Errorf("non-string ids %+v", raw(3).Properties)
		}
	})

	// S-SEND-6, S-LOCK-6: the largest message the SDK lets through (256 KB link limit)
	// is delivered even after the broker adds its annotations, and again after
	// dead-lettering with an 8 kB reason and description; peek returns it too.
	t.Run("MaxSizeMessage", func(t *testing.T) {
		t.Parallel()
		q := e.queue(t, "maxsz", nil)
		s := e.sender(t, q)
		sent := 0
		for size := 262144; size > 260000 && sent == 0; size -= 16 {
			err := s.SendMessage(testCtx(t), &azservicebus.Message{Body: make([]byte, size), MessageID: to.Ptr("m")}, nil)
			switch {
			case err == nil:
				sent = size
			case !errors.Is(err, azservicebus.ErrMessageTooLarge):
				t.Fatal(err)
			}
		}
		if sent == 0 {
			t.Fatalf("no body above 260000 bytes fits a 256 KB message")
		}
		r := e.receiver(t, q, nil)
		m := receiveOne(t, r, 10*time.Second)
		if len(m.Body) != sent {
			t.Fatalf("received %d bytes, sent %d", len(m.Body), sent)
		}
		long := strings.Repeat("x", 4000)
		if err := r.DeadLetterMessage(testCtx(t), m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("r" + long), ErrorDescription: to.Ptr("d" + long)}); err != nil {
			t.Fatal(err)
		}
		dlq := e.dlq(t, q)
		if p := peekAll(t, dlq); len(p) != 1 || len(p[0].Body) != sent {
			t.Fatalf("peek of the dead-lettered message: %d messages", len(p))
		}
		d := receiveOne(t, dlq, 10*time.Second)
		if len(d.Body) != sent || deref(d.DeadLetterReason) != "r"+long {
			t.Fatalf("DLQ: %d bytes, reason %.20v... (want r+4000 x)", len(d.Body), deref(d.DeadLetterReason))
		}
	})
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
