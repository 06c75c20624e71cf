package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rabbit is one RabbitMQ quorum queue with 3 replicas. The queue is managed over AMQP
// 0-9-1 (the 3.x AMQP 1.0 plugin cannot declare a quorum queue); data goes over 0-9-1
// with publisher confirms, or over AMQP 1.0 when over10 is set. Clients connect to the
// first URL, whose node declares the queue and so leads it.
type rabbit struct {
	url    string
	queue  string
	over10 bool
	mu     sync.Mutex // guards admin and ch: Depth may run beside a test
	admin  *amqp091.Connection
	ch     *amqp091.Channel
}

func newRabbit(rawURL, queue string, over10 bool) (*rabbit, error) {
	conn, err := amqp091.Dial(rawURL)
	if err != nil {
		return nil, err
	}
	return &rabbit{url: rawURL, queue: queue, over10: over10, admin: conn}, nil
}

// channel returns the admin channel, opening a new one after a channel error closed it.
func (r *rabbit) channel() (*amqp091.Channel, error) {
	if r.ch == nil || r.ch.IsClosed() {
		ch, err := r.admin.Channel()
		if err != nil {
			return nil, err
		}
		r.ch = ch
	}
	return r.ch, nil
}

func (r *rabbit) Reset(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, err := r.channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDelete(r.queue, false, false, false); err != nil {
		return fmt.Errorf("delete queue: %w", err)
	}
	_, err = ch.QueueDeclare(r.queue, true, false, false, false, amqp091.Table{
		"x-queue-type":                "quorum",
		"x-quorum-initial-group-size": int32(3),
	})
	if err != nil {
		return fmt.Errorf("declare quorum queue: %w", err)
	}
	return nil
}

func (r *rabbit) Depth(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, err := r.channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

func (r *rabbit) Describe(ctx context.Context) string {
	over := "AMQP 0-9-1, publisher confirms, basic.ack per message"
	if r.over10 {
		over = "AMQP 1.0 address " + r.address() + ", link credit by hand"
	}
	return fmt.Sprintf("quorum queue %q (3 replicas) on the node at %s, leader and clients there, over %s",
		r.queue, redact(r.url), over)
}

// address is the 3.x plugin's address of an existing queue ("/queue/NAME" would have
// the plugin declare a classic queue of that name).
func (r *rabbit) address() string { return "/amq/queue/" + r.queue }

func (r *rabbit) Close() { r.admin.Close() }

func (r *rabbit) NewSender(ctx context.Context) (sender, error) {
	if r.over10 {
		return newAMQPSender(ctx, r.url, r.address())
	}
	conn, ch, err := r.dataChannel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, err
	}
	return &rabbitSender{conn: conn, ch: ch, queue: r.queue}, nil
}

func (r *rabbit) NewReceiver(ctx context.Context, prefetch int) (receiver, error) {
	if r.over10 {
		return newAMQPReceiver(ctx, r.url, r.address(), prefetch, false)
	}
	conn, ch, err := r.dataChannel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		conn.Close()
		return nil, err
	}
	d, err := ch.ConsumeWithContext(ctx, r.queue, "", false, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &rabbitReceiver{conn: conn, d: d}, nil
}

func (r *rabbit) dataChannel() (*amqp091.Connection, *amqp091.Channel, error) {
	conn, err := amqp091.Dial(r.url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

type rabbitSender struct {
	conn  *amqp091.Connection
	ch    *amqp091.Channel
	queue string
}

var errNacked = errors.New("rabbitmq: the broker nacked the message")

func (s *rabbitSender) Send(ctx context.Context, body []byte) (func() error, error) {
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, "", s.queue, false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, ContentType: "application/octet-stream", Body: body})
	if err != nil {
		return nil, err
	}
	return func() error {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errNacked
		}
		return nil
	}, nil
}

func (s *rabbitSender) Close() { s.conn.Close() }

type rabbitReceiver struct {
	conn *amqp091.Connection
	d    <-chan amqp091.Delivery
}

var errConsumerClosed = errors.New("rabbitmq: the consumer was closed")

func (r *rabbitReceiver) Next(ctx context.Context) ([]byte, func() error, error) {
	select {
	case d, ok := <-r.d:
		if !ok {
			return nil, nil, errConsumerClosed
		}
		return d.Body, func() error { return d.Ack(false) }, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (r *rabbitReceiver) Close() { r.conn.Close() }
