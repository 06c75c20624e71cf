// Package batchdelete is what qbctl's `dlq purge` and `queue|subscription|topic purge`
// and the explorer's purges share: com.microsoft:batch-delete-messages (S-DEL-1..4),
// which the Go SDK has no API for, sent as the .NET and JavaScript SDKs send it, over a
// go-amqp connection of its own authorized as the SDKs are (a SAS token put on $cbs). One request deletes up to
// 4,000 messages in one Raft entry per partition, where a receive-and-delete loop took
// a round trip and an entry per 100 messages and waited out a quiet round at the end.
//
// It imports neither amqp nor cluster: it is a client of the node's AMQP port.
package batchdelete

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

// MaxBatch is the most messages one request deletes (Service Bus's cap).
const MaxBatch = 4000

// Conn is an AMQP connection that sends batch deletes. It is not safe for concurrent use.
type Conn struct {
	conn  *amqp.Conn
	sess  *amqp.Session
	host  string
	token string
	n     int
}

// Open speaks AMQP over nc (a TCP or TLS connection to the node's AMQP port, or an
// in-process pipe), with SASL ANONYMOUS, and authorizes each entity it touches with
// token (a SharedAccessSignature) on $cbs. host names the namespace in the token's
// audience (sb://host/entity). Close closes nc too.
func Open(ctx context.Context, nc net.Conn, host, token string) (*Conn, error) {
	c, err := amqp.NewConn(ctx, nc, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), HostName: host})
	if err != nil {
		nc.Close()
		return nil, err
	}
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &Conn{conn: c, sess: sess, host: host, token: token}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// ErrRefused wraps a request the node answered with an error status.
var ErrRefused = errors.New("batchdelete: refused")

// call sends one request on node (a sender to it, a receiver from it for the answer)
// and returns the answer's status, description and body.
func (c *Conn) call(ctx context.Context, node string, props map[string]any, body any) (int32, string, any, error) {
	c.n++
	reply := fmt.Sprintf("batchdelete-reply-%d", c.n)
	snd, err := c.sess.NewSender(ctx, node, nil)
	if err != nil {
		return 0, "", nil, err
	}
	defer snd.Close(context.WithoutCancel(ctx))
	rcv, err := c.sess.NewReceiver(ctx, node, &amqp.ReceiverOptions{TargetAddress: reply, Credit: 1})
	if err != nil {
		return 0, "", nil, err
	}
	defer rcv.Close(context.WithoutCancel(ctx))
	id := fmt.Sprint("batchdelete-", c.n)
	msg := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id, ReplyTo: &reply},
		ApplicationProperties: props, Value: body}
	if err := snd.Send(ctx, msg, nil); err != nil {
		return 0, "", nil, err
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		return 0, "", nil, err
	}
	_ = rcv.AcceptMessage(ctx, resp)
	status, _ := resp.ApplicationProperties["statusCode"].(int32)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	return status, desc, resp.Value, nil
}

// authorize puts the token on $cbs for entity's queue, topic or subscription (a
// sub-queue, "/$DeadLetterQueue", is authorized through its entity).
func (c *Conn) authorize(ctx context.Context, entity string) error {
	if i := strings.Index(entity, "/$"); i >= 0 {
		entity = entity[:i]
	}
	st, desc, _, err := c.call(ctx, "$cbs", map[string]any{"operation": "put-token",
		"type": "servicebus.windows.net:sastoken", "name": "sb://" + c.host + "/" + entity}, c.token)
	if err != nil {
		return err
	}
	if st != 200 && st != 202 {
		return fmt.Errorf("%w: put-token: %d %s", ErrRefused, st, desc)
	}
	return nil
}

// Delete sends one batch delete of up to n (1..MaxBatch) messages of entity ("q",
// "q/$DeadLetterQueue", "t/Subscriptions/s/$DeadLetterQueue") enqueued before before,
// and returns how many the node deleted.
func (c *Conn) Delete(ctx context.Context, entity string, n int, before time.Time) (int, error) {
	st, desc, body, err := c.call(ctx, entity+"/$management",
		map[string]any{"operation": "com.microsoft:batch-delete-messages"},
		map[string]any{"message-count": int32(n), "enqueued-time-utc": before})
	if err != nil {
		return 0, err
	}
	if st != 200 {
		return 0, fmt.Errorf("%w: batch delete on %s: %d %s", ErrRefused, entity, st, desc)
	}
	m, _ := body.(map[string]any)
	deleted, ok := m["message-count"].(int32)
	if !ok || deleted < 0 || int(deleted) > n {
		return 0, fmt.Errorf("batchdelete: the answer has no valid message-count: %v", body)
	}
	return int(deleted), nil
}

// Purge deletes the messages of entity enqueued before before, in batches of MaxBatch
// (fewer near limit; limit 0 means no limit), until a batch deletes none, the limit is
// reached or ctx ends, calling progress (when not nil) with the total after each batch.
// Locked messages stay (S-DEL-3). It returns the total, also on an error.
func (c *Conn) Purge(ctx context.Context, entity string, before time.Time, limit int, progress func(done int)) (int, error) {
	if err := c.authorize(ctx, entity); err != nil {
		return 0, err
	}
	done := 0
	for limit == 0 || done < limit {
		want := MaxBatch
		if limit > 0 {
			want = min(want, limit-done)
		}
		n, err := c.Delete(ctx, entity, want, before)
		done += n
		if err != nil {
			return done, err
		}
		if progress != nil {
			progress(done)
		}
		if n == 0 {
			break
		}
	}
	return done, nil
}
