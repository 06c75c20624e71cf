package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// quorumbusSDK is the quorumbus system driven the way a Service Bus user drives it: the
// official azservicebus client against the partition leader's node. Send has no
// asynchronous form in the SDK, so each send in the window is one goroutine calling
// SendMessage. Messages are received in batches of up to prefetch (ReceiveMessages) and
// completed in the background, at most prefetch completions in flight, so that
// acknowledging does not wait for the broker, as with the other clients.
type quorumbusSDK struct {
	*quorumbus
}

// leaderConnStr is a connection string for the leader's AMQP listener.
func (q quorumbusSDK) leaderConnStr() string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true",
		q.amqpAddr, q.keyName, q.key)
}

func (q quorumbusSDK) client() (*azservicebus.Client, error) {
	return azservicebus.NewClientFromConnectionString(q.leaderConnStr(), nil)
}

func (q quorumbusSDK) Describe(ctx context.Context) string {
	return q.quorumbus.Describe(ctx) + ", through the azservicebus SDK"
}

func (q quorumbusSDK) NewSender(ctx context.Context) (sender, error) {
	c, err := q.client()
	if err != nil {
		return nil, err
	}
	s, err := c.NewSender(q.queue, nil)
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	return &sdkSender{c: c, s: s}, nil
}

type sdkSender struct {
	c  *azservicebus.Client
	s  *azservicebus.Sender
	wg sync.WaitGroup // one per send goroutine
}

func (s *sdkSender) Send(ctx context.Context, body []byte) (func() error, error) {
	done := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		done <- s.s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil)
	}()
	return func() error { return <-done }, nil
}

func (s *sdkSender) Close() {
	s.wg.Wait()
	s.s.Close(context.Background())
	s.c.Close(context.Background())
}

func (q quorumbusSDK) NewReceiver(ctx context.Context, prefetch int) (receiver, error) {
	c, err := q.client()
	if err != nil {
		return nil, err
	}
	r, err := c.NewReceiverForQueue(q.queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock})
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	return &sdkReceiver{c: c, r: r, prefetch: prefetch, slots: make(chan struct{}, prefetch)}, nil
}

type sdkReceiver struct {
	c        *azservicebus.Client
	r        *azservicebus.Receiver
	prefetch int
	buf      []*azservicebus.ReceivedMessage // owned by the caller of Next
	slots    chan struct{}                   // a token per completion in flight
	wg       sync.WaitGroup                  // one per completion goroutine
	mu       sync.Mutex
	err      error // first completion error; guarded by mu
}

func (r *sdkReceiver) Next(ctx context.Context) ([]byte, func() error, error) {
	for len(r.buf) == 0 {
		msgs, err := r.r.ReceiveMessages(ctx, r.prefetch, nil)
		if err != nil {
			return nil, nil, err
		}
		r.buf = msgs
	}
	m := r.buf[0]
	r.buf = r.buf[1:]
	return m.Body, func() error {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.r.CompleteMessage(ctx, m, nil); err != nil {
				r.mu.Lock()
				if r.err == nil {
					r.err = err
				}
				r.mu.Unlock()
			}
			<-r.slots
		}()
		return nil
	}, nil
}

func (r *sdkReceiver) Close() {
	r.wg.Wait()
	r.r.Close(context.Background())
	r.c.Close(context.Background())
}
