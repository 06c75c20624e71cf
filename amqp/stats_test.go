package amqp

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// TestStatsCountConnectionsLinksCreditAndErrors: Stats follows what SDK clients open
// and close, the credit a waiting receiver granted, and the conditions of refusals,
// whose log lines carry the TrackingId as an attribute of its own.
func TestStatsCountConnectionsLinksCreditAndErrors(t *testing.T) {
	var logs syncBuffer
	s, _, addr := testServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	if st := s.Stats(); st.Connections != 0 || st.SenderLinks != 0 || st.ReceiverLinks != 0 || len(st.Errors) != 0 {
		t.Fatalf("idle server: %+v", st)
	}
	c := rootClient(t, addr)
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // a receive that waits: its credit stays outstanding
		defer close(done)
		_, _ = r.ReceiveMessages(ctx, 7, nil)
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		st := s.Stats()
		if st.Connections != 1 || st.ReceiverLinks < 1 || st.ReceiverCredit < 7 {
			return fmt.Errorf("stats %+v, want 1 connection and a receiver link with 7 credit", st)
		}
		return nil
	})
	cancel()
	<-done
	_ = r.Close(context.Background())

	// A refusal: a plain receive on a session queue is detached with amqp:not-allowed.
	sr, err := c.NewReceiverForQueue("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sr.ReceiveMessages(ctxT(t), 1, nil); err == nil {
		t.Fatal("a non-session receive from a session queue succeeded")
	}
	_ = sr.Close(context.Background())
	if got := s.Stats().Errors["amqp:not-allowed"]; got < 1 {
		t.Errorf("errors %v, want amqp:not-allowed counted", s.Stats().Errors)
	}
	if out := logs.String(); !strings.Contains(out, `"tracking_id":"`) || !strings.Contains(out, `"condition":"amqp:not-allowed"`) {
		t.Errorf("refusal log lacks tracking_id or condition:\n%s", out)
	}

	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		st := s.Stats()
		if st.Connections != 0 || st.SenderLinks != 0 || st.ReceiverLinks != 0 || st.SenderCredit != 0 || st.ReceiverCredit != 0 {
			return fmt.Errorf("after close: %+v", st)
		}
		return nil
	})
}

func TestTrackingOf(t *testing.T) {
	d := "Boom. " + trackingID("q1", time.Unix(0, 0))
	if id := trackingOf(d); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}_G[0-9]+$`).MatchString(id) {
		t.Errorf("trackingOf(%q) = %q", d, id)
	}
	if trackingOf("no id here") != "" {
		t.Error("found an id in a description without one")
	}
}
