package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/batchdelete"
	"github.com/quorumbus/quorumbus/cmd/internal/msgstate"
	"github.com/quorumbus/quorumbus/cmd/internal/redrive"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// receiveRoundTimeout bounds one receive round of resubmit; a round that gets
// nothing within it ends the loop (the sub-queue is drained as far as this client sees).
const receiveRoundTimeout = 3 * time.Second

func (g *globals) peekCmd() *cobra.Command {
	var count int
	var from int64
	var session string
	c := &cobra.Command{Use: "peek ENTITY", Short: "browse messages without locking them", Args: nArgs("ENTITY"),
		Long: `Browse the messages of a queue or subscription (ENTITY: QUEUE or TOPIC/Subscriptions/SUB) without locking or removing them.

On a session-enabled entity, peek without --session browses the messages of every
session, in sequence-number order, without taking any session's lock (as Service Bus
answers a peek on the entity's management node); a SESSION column shows each message's
session. --session ID browses one session through a session receiver, which holds that
session's lock while it peeks: it fails while a consumer holds the session.`,
		RunE: func(c *cobra.Command, pos []string) error {
			e, err := parseEntity(pos[0])
			if err != nil {
				return usageErr(c.CommandPath(), "%v", err)
			}
			if c.Flags().Changed("session") && session == "" {
				return usageErr(c.CommandPath(), "--session needs a session ID")
			}
			if count < 1 {
				return usageErr(c.CommandPath(), "--count must be at least 1")
			}
			return g.human(g.browse(c.Context(), e, nil, session, count, from), e.target())
		}}
	c.ValidArgsFunction = g.completeEntityPath(false)
	c.Flags().IntVar(&count, "count", 20, "how many messages")
	c.Flags().Int64Var(&from, "from", 0, "first sequence number (0: from the start)")
	c.Flags().StringVar(&session, "session", "", "peek only this session of a session-enabled entity, through a session receiver (takes its lock)")
	return c
}

// peeker is what browse peeks through: the SDK's Receiver or SessionReceiver, or a
// management link of qbctl's own (mgmtPeeker) on a session-enabled entity.
type peeker func(ctx context.Context, n int, from int64) ([]*peekedMessage, error)

func sdkPeeker(r interface {
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}) peeker {
	return func(ctx context.Context, n int, from int64) ([]*peekedMessage, error) {
		msgs, err := r.PeekMessages(ctx, n, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		out := make([]*peekedMessage, len(msgs))
		for i, m := range msgs {
			out[i] = peekedOfSDK(m)
		}
		return out, err
	}
}

// browse prints up to count messages of e (its sub-queue with opts) from sequence number
// from (0: the start). With session, only that session's, through a session receiver.
// Without, on a session-enabled entity (whose receive link refuses a receiver without a
// session), it peeks every session through the entity's $management node (mgmtpeek.go).
func (g *globals) browse(ctx context.Context, e entityPath, opts *azservicebus.ReceiverOptions, session string, count int, from int64) error {
	c, err := g.dataClient()
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var peek peeker
	sessionful := session != ""
	if sessionful {
		sr, err := e.acceptSession(ctx, c, session)
		if err != nil {
			return err
		}
		defer sr.Close(context.Background())
		peek = sdkPeeker(sr)
	} else {
		r, err := e.receiver(c, opts)
		if err != nil {
			return err
		}
		defer r.Close(context.Background())
		peek = sdkPeeker(r)
	}
	from = max(from, 1) // sequence numbers start at 1
	dlq := opts != nil && opts.SubQueue == azservicebus.SubQueueDeadLetter
	msgs, err := peek(ctx, min(count, 100), from)
	if err != nil && !sessionful && !dlq && requiresSessions(err) {
		mp, merr := g.openMgmtPeeker(ctx, e.String())
		if merr != nil {
			return merr
		}
		defer mp.Close()
		sessionful, peek = true, mp.peek
		msgs, err = peek(ctx, min(count, 100), from)
	}
	t := &table{header: []string{"SEQ", "MESSAGE-ID", "ENQUEUED", "STATE", "DELIVERIES", "SUBJECT", "BODY"},
		jsonKeys: []string{"SequenceNumber", "MessageID", "EnqueuedTime", "State", "DeliveryCount", "Subject", "Body"}}
	if dlq {
		t.header = []string{"SEQ", "MESSAGE-ID", "ENQUEUED", "REASON", "DESCRIPTION", "SUBJECT", "BODY"}
		t.jsonKeys = []string{"SequenceNumber", "MessageID", "EnqueuedTime", "DeadLetterReason", "DeadLetterErrorDescription", "Subject", "Body"}
	}
	if sessionful {
		t.header = append([]string{"SEQ", "SESSION"}, t.header[1:]...)
		t.jsonKeys = append([]string{"SequenceNumber", "SessionID"}, t.jsonKeys[1:]...)
	}
	for {
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			row := []any{m.SequenceNumber}
			if sessionful {
				row = append(row, m.SessionID)
			}
			if dlq {
				row = append(row, m.MessageID, m.EnqueuedTime, m.DeadLetterReason, m.DeadLetterDescription, m.Subject, bodyPreview(m.Body))
			} else {
				row = append(row, m.MessageID, m.EnqueuedTime, msgstate.Name(m.State), m.DeliveryCount, m.Subject, bodyPreview(m.Body))
			}
			t.add(row...)
		}
		count -= len(msgs)
		if count <= 0 {
			break
		}
		from = msgs[len(msgs)-1].SequenceNumber + 1
		msgs, err = peek(ctx, min(count, 100), from)
	}
	return g.print(t)
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func bodyPreview(b []byte) string {
	const max = 40
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '.'
		}
		return r
	}, string(b))
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

func (g *globals) dlqCmd() *cobra.Command {
	dlqOpts := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	verb := func(use, short string, fn func(ctx context.Context, e entityPath, count int) error) *cobra.Command {
		var count int
		c := &cobra.Command{Use: use + " ENTITY", Short: short, Args: nArgs("ENTITY"),
			RunE: func(c *cobra.Command, pos []string) error {
				e, err := parseEntity(pos[0])
				if err != nil {
					return usageErr(c.CommandPath(), "%v", err)
				}
				return g.human(fn(c.Context(), e, count), e.target())
			}}
		c.Flags().IntVar(&count, "count", 0, "at most this many messages (0: all; inspect defaults to 20)")
		c.ValidArgsFunction = g.completeEntityPath(false)
		return c
	}
	inspect := verb("inspect", "browse dead-lettered messages with their reasons", func(ctx context.Context, e entityPath, n int) error {
		if n == 0 {
			n = 20
		}
		return g.browse(ctx, e, dlqOpts, "", n, 0)
	})
	purge := verb("purge", "remove dead-lettered messages", func(ctx context.Context, e entityPath, limit int) error {
		n, err := g.drainDLQ(ctx, e, limit)
		if err != nil {
			if n > 0 {
				return fmt.Errorf("after purging %d message(s) from %s/$DeadLetterQueue: %w", n, e, err)
			}
			return err
		}
		if g.output == "json" {
			return g.printJSON(map[string]any{"Entity": e.String(), "Purged": n})
		}
		fmt.Fprintf(g.stdout, "purged %d message(s) from %s/$DeadLetterQueue\n", n, e)
		return nil
	})
	resubmit := verb("resubmit", "move dead-lettered messages back to their entity", func(ctx context.Context, e entityPath, limit int) error {
		n, err := g.resubmit(ctx, e, limit)
		if err != nil {
			if n > 0 {
				return fmt.Errorf("after resubmitting %d message(s) from %s/$DeadLetterQueue to %s: %w", n, e, e.sendTarget(), err)
			}
			return err
		}
		if g.output == "json" {
			return g.printJSON(map[string]any{"Entity": e.String(), "To": e.sendTarget(), "Resubmitted": n})
		}
		fmt.Fprintf(g.stdout, "resubmitted %d message(s) from %s/$DeadLetterQueue to %s\n", n, e, e.sendTarget())
		return nil
	})
	resubmit.Long = `Move dead-lettered messages back: each is sent as a copy to the queue (or, for a
subscription, to its topic) and only then completed in the dead-letter queue, so an
interruption leaves a message in both places, never in neither. Without --count it moves
at most what the dead-letter queue held when it started. Progress goes to standard error.`
	return group("dlq", "the dead-letter sub-queue of ENTITY: inspect, purge, resubmit", nil, inspect, purge, resubmit)
}

// sendTarget is where resubmitted messages go: the queue itself, or the subscription's
// topic (which fans them out again by the subscriptions' rules).
func (e entityPath) sendTarget() string {
	if e.queue != "" {
		return e.queue
	}
	return e.topic
}

// deadLetterCount asks the admin API how many messages e's dead-letter queue holds, and
// so whether e exists: a command on a missing entity fails before it prints anything.
func (g *globals) deadLetterCount(ctx context.Context, e entityPath) (int, error) {
	ac, err := g.adminClient()
	if err != nil {
		return 0, err
	}
	notFound := withHint(fmt.Errorf("%s not found", e.target()), "'"+e.target().list+"' lists them")
	if e.queue != "" {
		rt, err := ac.GetQueueRuntimeProperties(ctx, e.queue, nil)
		if err != nil || rt == nil {
			return 0, firstNonNil(err, notFound)
		}
		return int(rt.DeadLetterMessageCount), nil
	}
	rt, err := ac.GetSubscriptionRuntimeProperties(ctx, e.topic, e.sub, nil)
	if err != nil || rt == nil {
		return 0, firstNonNil(err, notFound)
	}
	return int(rt.DeadLetterMessageCount), nil
}

// drainDLQ removes up to limit (0: all) dead-lettered messages, those enqueued before
// it started, with com.microsoft:batch-delete-messages (cmd/internal/batchdelete:
// up to 4,000 a request, as the explorer's purge does); locked ones stay (S-DEL-3).
func (g *globals) drainDLQ(ctx context.Context, e entityPath, limit int) (int, error) {
	if _, err := g.deadLetterCount(ctx, e); err != nil {
		return 0, err
	}
	before := time.Now()
	c, err := g.batchConn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.Purge(ctx, e.String()+"/$DeadLetterQueue", before, limit, nil)
}

// batchConn opens a batch-delete connection to the node of the connection string
// (dialNode).
func (g *globals) batchConn(ctx context.Context) (*batchdelete.Conn, error) {
	nc, host, tok, err := g.dialNode(ctx)
	if err != nil {
		return nil, err
	}
	return batchdelete.Open(ctx, nc, host, tok)
}

// dialNode connects to the AMQP port of the node of the connection string: plain AMQP
// (port 5672 unless given) for an emulator connection string, else AMQPS (5671 unless
// given) with the admin API's trust. It returns the connection, the host the token's
// audience names, and a namespace token signed from the string's key (or its
// SharedAccessSignature), valid for an hour.
func (g *globals) dialNode(ctx context.Context) (nc net.Conn, host, token string, err error) {
	cs, err := g.connectionString()
	if err != nil {
		return nil, "", "", err
	}
	tok, err := sasToken(cs, time.Now().Add(time.Hour))
	if err != nil {
		return nil, "", "", err
	}
	var endpoint string
	for _, part := range strings.Split(cs, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && strings.EqualFold(k, "endpoint") {
			endpoint = v
		}
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil, "", "", fmt.Errorf("the connection string's Endpoint %q is not sb://HOST[:PORT]", endpoint)
	}
	host, port := u.Hostname(), u.Port()
	var d net.Dialer
	if strings.Contains(cs, "UseDevelopmentEmulator=true") {
		if port == "" {
			port = "5672"
		}
		nc, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	} else {
		if port == "" {
			port = "5671"
		}
		tc := &tls.Config{}
		if g.adminTLS != nil {
			tc = g.adminTLS.Clone() // the same trust as the admin API
		}
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		nc, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	}
	if err != nil {
		return nil, "", "", withHint(fmt.Errorf("cannot reach the node's AMQP port: %w", err),
			"is the node running and its AMQP port reachable at the connection string's Endpoint? 'qbctl status' checks the node")
	}
	return nc, host, tok, nil
}

// eachRound receives in rounds of up to 100 messages (fewer near limit; 0 means no
// limit) until a round comes back empty, handing each round to fn, which returns how many
// of them it dealt with. It returns the total.
func eachRound(ctx context.Context, r *azservicebus.Receiver, limit int, fn func([]*azservicebus.ReceivedMessage) (int, error)) (int, error) {
	done := 0
	for limit == 0 || done < limit {
		want := 100
		if limit > 0 {
			want = min(want, limit-done)
		}
		msgs, err := receiveRound(ctx, r, want)
		if err != nil || len(msgs) == 0 {
			return done, err
		}
		n, err := fn(msgs)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func receiveRound(ctx context.Context, r *azservicebus.Receiver, want int) ([]*azservicebus.ReceivedMessage, error) {
	rctx, cancel := context.WithTimeout(ctx, receiveRoundTimeout)
	defer cancel()
	msgs, err := r.ReceiveMessages(rctx, want, nil)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil
	}
	return msgs, err
}

// resubmit moves dead-lettered messages back to their source: each is sent as a copy
// (without its dead-letter properties) and only then completed, so a failure part-way
// leaves a message in both places rather than in neither (at least once). Without a
// limit it moves at most what the dead-letter queue held when it started, so messages
// that fail again meanwhile are not chased round in a loop.
func (g *globals) resubmit(ctx context.Context, e entityPath, limit int) (int, error) {
	total := limit
	n, err := g.deadLetterCount(ctx, e)
	if err != nil {
		return 0, err
	}
	if total == 0 {
		total = n
	}
	c, err := g.dataClient()
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	r, err := e.receiver(c, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		return 0, err
	}
	defer r.Close(context.Background())
	s, err := c.NewSender(e.sendTarget(), nil)
	if err != nil {
		return 0, err
	}
	defer s.Close(context.Background())
	if limit == 0 {
		limit = total
	}
	bar := newProgress(g.stderr, total)
	moved := 0
	done, err := eachRound(ctx, r, limit, func(msgs []*azservicebus.ReceivedMessage) (int, error) {
		for i, m := range msgs {
			if err := s.SendAMQPAnnotatedMessage(ctx, redrive.Copy(m), nil); err != nil {
				return i, fmt.Errorf("resubmit sequence number %d: %w", derefSeq(m.SequenceNumber), err)
			}
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				return i, fmt.Errorf("complete sequence number %d after resubmitting it: %w", derefSeq(m.SequenceNumber), err)
			}
			moved++
			bar.set(moved)
		}
		return len(msgs), nil
	})
	bar.finish()
	return done, err
}

func derefSeq(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// progress reports how far a long operation got, on standard error. On a terminal it
// redraws one bar ([#####.....] 500/1000) and ends it with a newline; elsewhere (a log, a
// pipe) it writes a whole line at every tenth of the way, so every line ends in a newline.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	last  int // the last step drawn: bar cells on a terminal, tenths elsewhere; -1: none
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total, last: -1}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) set(n int) {
	const width = 30
	if p.total <= 0 { // unknown total: a count every 100 messages
		if n/100 == p.last && p.last >= 0 {
			return
		}
		p.last = n / 100
		if p.tty {
			fmt.Fprintf(p.w, "\r%d", n)
		} else {
			fmt.Fprintf(p.w, "%d\n", n)
		}
		return
	}
	filled := min(width, n*width/p.total)
	step := filled
	if !p.tty {
		step = min(10, n*10/p.total)
	}
	if step == p.last && n != p.total {
		return
	}
	p.last = step
	bar := fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, p.total)
	if p.tty {
		fmt.Fprint(p.w, "\r"+bar)
	} else {
		fmt.Fprintln(p.w, bar)
	}
}

// finish ends a terminal's bar with a newline.
func (p *progress) finish() {
	if p.tty && p.last >= 0 {
		fmt.Fprintln(p.w)
	}
}
