package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/Azure/go-amqp"
)

// dialAMQP opens an AMQP 1.0 connection with SASL PLAIN from the URL's user and password.
func dialAMQP(ctx context.Context, raw string) (*amqp.Conn, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	return amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(user, pass)})
}

// amqpSender sends durable messages unsettled and waits for the accepted outcome.
type amqpSender struct {
	conn *amqp.Conn
	snd  *amqp.Sender
}

func newAMQPSender(ctx context.Context, rawURL, address string) (*amqpSender, error) {
	conn, err := dialAMQP(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err == nil {
		var snd *amqp.Sender
		snd, err = sess.NewSender(ctx, address, &amqp.SenderOptions{
			SettlementMode:              amqp.SenderSettleModeUnsettled.Ptr(),
			RequestedReceiverSettleMode: amqp.ReceiverSettleModeFirst.Ptr(),
		})
		if err == nil {
			return &amqpSender{conn: conn, snd: snd}, nil
		}
	}
	conn.Close()
	return nil, err
}

func (s *amqpSender) Send(ctx context.Context, body []byte) (func() error, error) {
	msg := amqp.NewMessage(body)
	msg.Header = &amqp.MessageHeader{Durable: true}
	rc, err := s.snd.SendWithReceipt(ctx, msg, nil)
	if err != nil {
		return nil, err
	}
	return func() error {
		st, err := rc.Wait(ctx)
		if err != nil {
			return err
		}
		switch st := st.(type) {
		case *amqp.StateAccepted:
			return nil
		case *amqp.StateRejected:
			if st.Error != nil {
				return fmt.Errorf("rejected: %w", st.Error)
			}
			return errors.New("rejected")
		default:
			return fmt.Errorf("outcome %T, want accepted", st)
		}
	}, nil
}

func (s *amqpSender) Close() { s.conn.Close() }

// amqpReceiver accepts every message, settle mode first. With autoCredit go-amqp keeps
// prefetch credits outstanding; otherwise creditRefill does it by hand (RabbitMQ 3.10).
type amqpReceiver struct {
	conn   *amqp.Conn
	rcv    *amqp.Receiver
	manual *creditRefill // nil: go-amqp's automatic credit
}

func newAMQPReceiver(ctx context.Context, rawURL, address string, prefetch int, autoCredit bool) (*amqpReceiver, error) {
	conn, err := dialAMQP(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	credit := int32(prefetch)
	if !autoCredit {
		credit = -1
	}
	sess, err := conn.NewSession(ctx, nil)
	if err == nil {
		var rcv *amqp.Receiver
		rcv, err = sess.NewReceiver(ctx, address, &amqp.ReceiverOptions{
			Credit: credit, SettlementMode: amqp.ReceiverSettleModeFirst.Ptr()})
		if err == nil {
			r := &amqpReceiver{conn: conn, rcv: rcv}
			if autoCredit {
				return r, nil
			}
			r.manual = &creditRefill{rcv: rcv, window: uint32(prefetch)}
			if err = r.manual.start(); err == nil {
				return r, nil
			}
		}
	}
	conn.Close()
	return nil, err
}

func (r *amqpReceiver) Next(ctx context.Context) ([]byte, func() error, error) {
	var msg *amqp.Message
	var err error
	if r.manual != nil {
		msg, err = r.manual.next(ctx)
	} else {
		msg, err = r.rcv.Receive(ctx, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	return msg.GetData(), func() error {
		if err := r.rcv.AcceptMessage(ctx, msg); err != nil {
			return err
		}
		if r.manual != nil {
			return r.manual.settled()
		}
		return nil
	}, nil
}

func (r *amqpReceiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.rcv.Close(ctx)
	r.conn.Close()
}

// creditRefill grants link credit by hand, for RabbitMQ 3.10's AMQP 1.0 plugin on a
// quorum queue. That plugin sometimes delivers past the credit it was given and then
// computes a negative credit, which the queue clamps to zero, while go-amqp's count of
// remaining credit has wrapped: with automatic credit the consumer stops for good. Here
// settled messages give their credit back in batches of window/2 and at once whenever
// nothing is buffered, and after idleNudge without a delivery one extra credit is sent:
// every FLOW makes the plugin recompute its credit. The extra credits are withheld from
// later refills so the window stays at its size. Owned by the receiving goroutine.
type creditRefill struct {
	rcv      *amqp.Receiver
	window   uint32
	pending  uint32 // settled, not yet granted again
	debt     uint32 // nudge credits to withhold from later refills
	inFlight int64  // granted minus received
	nudges   int
}

const idleNudge = 200 * time.Millisecond

func (c *creditRefill) start() error {
	c.inFlight = int64(c.window)
	return c.rcv.IssueCredit(c.window)
}

func (c *creditRefill) grant(n uint32) error {
	if n == 0 {
		return nil
	}
	c.inFlight += int64(n)
	return c.rcv.IssueCredit(n)
}

func (c *creditRefill) settled() error {
	if c.debt > 0 {
		c.debt--
		return nil
	}
	c.pending++
	if c.pending >= max(c.window/2, 1) {
		n := c.pending
		c.pending = 0
		return c.grant(n)
	}
	return nil
}

func (c *creditRefill) next(ctx context.Context) (*amqp.Message, error) {
	if msg := c.rcv.Prefetched(); msg != nil {
		c.inFlight--
		return msg, nil
	}
	if c.pending > 0 && c.inFlight < int64(c.window/2) {
		n := c.pending
		c.pending = 0
		if err := c.grant(n); err != nil {
			return nil, err
		}
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, idleNudge)
		msg, err := c.rcv.Receive(wctx, nil)
		cancel()
		if err == nil {
			c.inFlight--
			return msg, nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		c.nudges++
		n := c.pending
		c.pending = 0
		if n == 0 {
			n = 1
			c.debt++
		}
		if err := c.grant(n); err != nil {
			return nil, err
		}
	}
}
