package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsStream is one JetStream stream with 3 replicas, file storage and work-queue
// retention, and one durable pull consumer with explicit acks and at most prefetch
// unacknowledged. Data connections go to the server that leads the stream.
type natsStream struct {
	urls     []string
	name     string
	subject  string
	consumer string
	prefetch int
	admin    *nats.Conn
	js       jetstream.JetStream
	byName   map[string]string // server name -> its URL
	leader   string            // server name of the stream leader, set by Reset
}

func newNATS(urls []string, name string, prefetch int) (*natsStream, error) {
	n := &natsStream{urls: urls, name: name, subject: "bench." + name, consumer: "worker", prefetch: prefetch,
		byName: map[string]string{}}
	for _, u := range urls {
		nc, err := nats.Connect(u, nats.NoReconnect())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", redact(u), err)
		}
		n.byName[nc.ConnectedServerName()] = u
		nc.Close()
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	n.admin, n.js = nc, js
	return n, nil
}

func (n *natsStream) Close() { n.admin.Close() }

// Reset deletes and re-creates stream and consumer, and waits until both have a leader
// and both stream followers are current. Right after the servers start, JetStream has no
// meta leader yet and creation fails; that is retried for a minute.
func (n *natsStream) Reset(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		// A JetStream API request without a deadline waits for ever when no server
		// answers (no meta leader yet): bound each attempt.
		actx, cancel := context.WithTimeout(ctx, 40*time.Second)
		err := n.recreate(actx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second) // waiting for a JetStream meta leader; NATS offers no wait
	}
}

func (n *natsStream) recreate(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := n.js.DeleteStream(rctx, n.name)
	cancel()
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream: %w", err)
	}
	rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := n.js.CreateStream(rctx, jetstream.StreamConfig{
		Name: n.name, Subjects: []string{n.subject}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Replicas: 3, Discard: jetstream.DiscardOld,
	})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	if _, err := st.CreateOrUpdateConsumer(rctx, jetstream.ConsumerConfig{
		Durable: n.consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Minute,
		MaxAckPending: n.prefetch, MaxDeliver: -1,
	}); err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		si, err := st.Info(ctx)
		if err == nil && si.Cluster != nil && si.Cluster.Leader != "" && len(si.Cluster.Replicas) == 2 &&
			allCurrent(si.Cluster.Replicas) {
			if c, err := st.Consumer(ctx, n.consumer); err == nil {
				if ci := c.CachedInfo(); ci.Cluster != nil && ci.Cluster.Leader != "" {
					n.leader = si.Cluster.Leader
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New("stream or consumer without a leader, or followers behind, after 30 s")
		}
		time.Sleep(100 * time.Millisecond) // polling stream info: there is no wait for leadership
	}
}

func allCurrent(peers []*jetstream.PeerInfo) bool {
	for _, p := range peers {
		if !p.Current {
			return false
		}
	}
	return true
}

func (n *natsStream) leaderURL() string {
	if u, ok := n.byName[n.leader]; ok {
		return u
	}
	return n.urls[0]
}

func (n *natsStream) Depth(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := n.js.Stream(ctx, n.name)
	if err != nil {
		return 0, err
	}
	si, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(si.State.Msgs), nil
}

func (n *natsStream) Describe(ctx context.Context) string {
	return fmt.Sprintf("stream %q R=3 file storage, work-queue retention, leader %s; pull consumer %q, "+
		"explicit ack, max ack pending %d; clients connect to the leader at %s",
		n.name, n.leader, n.consumer, n.prefetch, redact(n.leaderURL()))
}

func (n *natsStream) NewSender(ctx context.Context) (sender, error) {
	nc, err := nats.Connect(n.leaderURL())
	if err != nil {
		return nil, err
	}
	// The window is the caller's; keep the library's own limit above it.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsSender{nc: nc, js: js, subject: n.subject}, nil
}

type natsSender struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
}

func (s *natsSender) Send(ctx context.Context, body []byte) (func() error, error) {
	f, err := s.js.PublishAsync(s.subject, body)
	if err != nil {
		return nil, err
	}
	return func() error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

func (s *natsSender) Close() { s.nc.Close() }

func (n *natsStream) NewReceiver(ctx context.Context, prefetch int) (receiver, error) {
	nc, err := nats.Connect(n.leaderURL())
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		var c jetstream.Consumer
		c, err = js.Consumer(ctx, n.name, n.consumer)
		if err == nil {
			var it jetstream.MessagesContext
			it, err = c.Messages(jetstream.PullMaxMessages(prefetch))
			if err == nil {
				return &natsReceiver{nc: nc, it: it}, nil
			}
		}
	}
	nc.Close()
	return nil, err
}

type natsReceiver struct {
	nc *nats.Conn
	it jetstream.MessagesContext
}

func (r *natsReceiver) Next(ctx context.Context) ([]byte, func() error, error) {
	m, err := r.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return nil, nil, err
	}
	return m.Data(), m.Ack, nil
}

func (r *natsReceiver) Close() {
	r.it.Stop()
	r.nc.Flush() // the last acks
	r.nc.Close()
}
