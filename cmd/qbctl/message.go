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
	var body, id, subject, session string
	var create bool
	c := &cobra.Command{Use: "send QUEUE|TOPIC", Short: "send one message", Args: nArgs("QUEUE|TOPIC"),
		Long: `Send one message. A session-enabled queue (or a topic whose subscriptions require
sessions) takes only messages with a session ID: give it with --session.`,
		RunE: func(c *cobra.Command, pos []string) error {
			e, err := parseEntity(pos[0])
			if err != nil || e.queue == "" {
				return usageErr(c.CommandPath(), "send takes QUEUE or TOPIC, got %q", pos[0])
			}
			if c.Flags().Changed("session") && session == "" {
				return usageErr(c.CommandPath(), "--session needs a session ID")
			}
			return g.human(g.send(c.Context(), e, &azservicebus.Message{Body: []byte(body), MessageID: nonEmpty(id),
				Subject: nonEmpty(subject), SessionID: nonEmpty(session)}, create), e.target())
		}}
	c.ValidArgsFunction = g.completeEntityPath(true)
	fs := c.Flags()
	fs.StringVar(&body, "body", "", "message body (text)")
	fs.StringVar(&id, "message-id", "", "message ID (default: the SDK leaves it empty)")
	fs.StringVar(&subject, "subject", "", "message subject (label)")
	fs.StringVar(&session, "session", "", "session ID (SessionId), required by a session-enabled entity")
	fs.BoolVar(&create, "create", false, "create ENTITY as a queue with default properties when it does not exist")
	return c
}

// nonEmpty is &s, or nil for "": an optional message property not given.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (g *globals) send(ctx context.Context, e entityPath, m *azservicebus.Message, create bool) error {
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
	var expect, session string
	c := &cobra.Command{Use: "receive ENTITY", Short: "receive and complete messages", Args: nArgs("ENTITY"),
		Long: `Receive messages in peek-lock mode and complete each one printed.

A session-enabled entity is received through a session receiver: --session ID takes that
session (and fails while another receiver holds it); without --session, receive takes the
next available session, as the SDKs' AcceptNextSession does, says which on standard
error, and receives from that session only. A SESSION column shows the session.`,
		RunE: func(c *cobra.Command, pos []string) error {
			if count < 1 {
				return usageErr(c.CommandPath(), "--count must be at least 1")
			}
			e, err := parseEntity(pos[0])
			if err != nil {
				return usageErr(c.CommandPath(), "%v", err)
			}
			if c.Flags().Changed("session") && session == "" {
				return usageErr(c.CommandPath(), "--session needs a session ID")
			}
			return g.human(g.receive(c.Context(), e, session, count, timeout, &expect), e.target())
		}}
	c.ValidArgsFunction = g.completeEntityPath(false)
	fs := c.Flags()
	fs.IntVar(&count, "count", 1, "stop after this many messages")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	fs.StringVar(&expect, "expect", "", "keep receiving until a message with this body arrives (other messages are completed too); fail if none does within --timeout")
	fs.StringVar(&session, "session", "", "receive from this session of a session-enabled entity (default there: the next available session)")
	return c
}

// msgReceiver is what receive needs of the SDK's Receiver and SessionReceiver.
type msgReceiver interface {
	ReceiveMessages(ctx context.Context, n int, opts *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, opts *azservicebus.CompleteMessageOptions) error
	Close(ctx context.Context) error
}

var (
	_ msgReceiver = (*azservicebus.Receiver)(nil)
	_ msgReceiver = (*azservicebus.SessionReceiver)(nil)
)

func (g *globals) receive(ctx context.Context, e entityPath, session string, n int, timeout time.Duration, expect *string) error {
	count := &n
	c, err := g.dataClient()
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r msgReceiver
	sessionful := session != ""
	if sessionful {
		r, err = e.acceptSession(ctx, c, session)
	} else {
		r, err = e.receiver(c, nil)
	}
	if err != nil {
		return err
	}
	defer func() { r.Close(context.Background()) }()

	t := &table{header: []string{"SEQ", "MESSAGE-ID", "ENQUEUED", "SUBJECT", "BODY"},
		jsonKeys: []string{"SequenceNumber", "MessageID", "EnqueuedTime", "Subject", "Body"}}
	got, found := 0, false
	for (*expect != "" && !found) || (*expect == "" && got < *count) {
		want := *count - got
		if *expect != "" {
			want = 10
		}
		msgs, err := r.ReceiveMessages(ctx, want, nil)
		if err != nil && !sessionful && requiresSessions(err) {
			// A session-enabled entity: take the next available session (S-SES-2).
			r.Close(context.Background())
			sr, aerr := e.acceptNextSession(ctx, c)
			if aerr != nil {
				if errors.Is(aerr, context.DeadlineExceeded) || isTimeout(aerr) {
					return fmt.Errorf("receive %s: no session of this session-enabled entity became available within %v", e, timeout)
				}
				return aerr
			}
			r, sessionful = sr, true
			fmt.Fprintf(g.stderr, "receiving from session %q, the next available one (--session ID picks one)\n", sr.SessionID())
			continue
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				// --timeout, the only deadline here (go-amqp may see it pass before
				// ctx.Err() says so): report what arrived.
				break
			}
			return err
		}
		for _, m := range msgs {
			// Peek-lock and complete: a message is gone only once it was printed.
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				return fmt.Errorf("complete message %d: %w", derefSeq(m.SequenceNumber), err)
			}
			body := m.Body
			subject := ""
			if m.Subject != nil {
				subject = *m.Subject
			}
			row := []any{m.SequenceNumber, m.MessageID, derefTime(m.EnqueuedTime), subject, string(body)}
			if sessionful {
				row = append([]any{m.SequenceNumber, m.SessionID}, row[1:]...)
			}
			t.add(row...)
			got++
			if *expect != "" && string(body) == *expect {
				found = true
			}
		}
	}
	if sessionful {
		t.header = append([]string{"SEQ", "SESSION"}, t.header[1:]...)
		t.jsonKeys = append([]string{"SequenceNumber", "SessionID"}, t.jsonKeys[1:]...)
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

// isTimeout reports whether err is the SDK's timeout (CodeTimeout): no session became
// available while the node waited.
func isTimeout(err error) bool {
	var sbe *azservicebus.Error
	return errors.As(err, &sbe) && sbe.Code == azservicebus.CodeTimeout
}
