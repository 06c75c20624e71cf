package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// send and receive exist so that a smoke test (the Helm chart's test pod, a user
// checking a fresh install) can prove the data path end to end with nothing but the
// image's own binaries: the image has no shell and no SDK.

func (g *globals) sendCmd() *cobra.Command {
	var body, id, subject string
	var create bool
	c := &cobra.Command{Use: "send QUEUE|TOPIC", Short: "send one message", Args: nArgs("QUEUE|TOPIC"),
		RunE: func(c *cobra.Command, pos []string) error {
			e, err := parseEntity(pos[0])
			if err != nil || e.queue == "" {
				return usageErr(c.CommandPath(), "send takes QUEUE or TOPIC, got %q", pos[0])
			}
			return g.human(g.send(c.Context(), e, &body, &id, &subject, create), e.target())
		}}
	c.ValidArgsFunction = g.completeEntityPath(true)
	fs := c.Flags()
	fs.StringVar(&body, "body", "", "message body (text)")
	fs.StringVar(&id, "message-id", "", "message ID (default: the SDK leaves it empty)")
	fs.StringVar(&subject, "subject", "", "message subject (label)")
	fs.BoolVar(&create, "create", false, "create ENTITY as a queue with default properties when it does not exist")
	return c
}

func (g *globals) send(ctx context.Context, e entityPath, body, id, subject *string, create bool) error {
	if create {
		ac, err := g.adminClient()
		if err != nil {
			return err
		}
		q, err := ac.GetQueue(ctx, e.queue, nil)
		if err != nil {
			return fmt.Errorf("send --create: %w", err)
		}
		if q == nil {
			if _, err := ac.CreateQueue(ctx, e.queue, nil); err != nil {
				return fmt.Errorf("send --create: %w", err)
			}
		}
	}
	c, err := g.dataClient()
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	s, err := c.NewSender(e.sendTarget(), nil)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	m := &azservicebus.Message{Body: []byte(*body)}
	if *id != "" {
		m.MessageID = id
	}
	if *subject != "" {
		m.Subject = subject
	}
	if err := s.SendMessage(ctx, m, nil); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"Entity": e.sendTarget(), "Sent": 1})
	}
	fmt.Fprintf(g.stdout, "sent 1 message to %s\n", e.sendTarget())
	return nil
}

func (g *globals) receiveCmd() *cobra.Command {
	var count int
	var timeout time.Duration
	var expect string
	c := &cobra.Command{Use: "receive ENTITY", Short: "receive and complete messages", Args: nArgs("ENTITY"),
		RunE: func(c *cobra.Command, pos []string) error {
			if count < 1 {
				return usageErr(c.CommandPath(), "--count must be at least 1")
			}
			e, err := parseEntity(pos[0])
			if err != nil {
				return usageErr(c.CommandPath(), "%v", err)
			}
			return g.human(g.receive(c.Context(), e, count, timeout, &expect), e.target())
		}}
	c.ValidArgsFunction = g.completeEntityPath(false)
	fs := c.Flags()
	fs.IntVar(&count, "count", 1, "stop after this many messages")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	fs.StringVar(&expect, "expect", "", "keep receiving until a message with this body arrives (other messages are completed too); fail if none does within --timeout")
	return c
}

func (g *globals) receive(ctx context.Context, e entityPath, n int, timeout time.Duration, expect *string) error {
	count := &n
	c, err := g.dataClient()
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	r, err := e.receiver(c, nil)
	if err != nil {
		return err
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	t := &table{header: []string{"SEQ", "MESSAGE-ID", "ENQUEUED", "SUBJECT", "BODY"},
		jsonKeys: []string{"SequenceNumber", "MessageID", "EnqueuedTime", "Subject", "Body"}}
	got, found := 0, false
	for (*expect != "" && !found) || (*expect == "" && got < *count) {
		want := *count - got
		if *expect != "" {
			want = 10
		}
		msgs, err := r.ReceiveMessages(ctx, want, nil)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				break // --timeout: report what arrived
			}
			return err
		}
		for _, m := range msgs {
			// Peek-lock and complete: a message is gone only once it was printed.
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				return fmt.Errorf("complete message %d: %w", m.SequenceNumber, err)
			}
			body := m.Body
			subject := ""
			if m.Subject != nil {
				subject = *m.Subject
			}
			t.add(m.SequenceNumber, m.MessageID, derefTime(m.EnqueuedTime), subject, string(body))
			got++
			if *expect != "" && string(body) == *expect {
				found = true
			}
		}
	}
	if err := g.print(t); err != nil {
		return err
	}
	switch {
	case *expect != "" && !found:
		return fmt.Errorf("receive %s: no message with body %q within %v (%d other messages received)", e, *expect, timeout, got)
	case *expect == "" && got == 0:
		return fmt.Errorf("receive %s: no message within %v", e, timeout)
	}
	return nil
}
