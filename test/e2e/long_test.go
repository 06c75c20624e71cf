//go:build long

package e2e

import (
	"context"
	"testing"
	"time"
)

// protocol.md §2: the SDK drops a connection after 60 s without frames, so the broker
// must heartbeat. A sender and a receiver idle for 70 s keep working on the same links,
// and a receive that waits 70 s gets a message sent at its end.
func TestLongIdleConnectionSurvives(t *testing.T) {
	e := newEnv(t)
	q := e.queue(t, "idle", nil)
	s := e.sender(t, q)
	send(t, s, body("before"))
	r := e.receiver(t, q, nil)
	if m := receiveOne(t, r, 10*time.Second); string(m.Body) != "before" {
		t.Fatalf("got %q", m.Body)
	} else if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		time.Sleep(70 * time.Second) // the connection must stay idle past the SDK's 60 s read deadline
		sent <- s.SendMessage(context.Background(), body("after"), nil)
	}()
	got := receiveUpTo(t, r, 1, 90*time.Second)
	if err := <-sent; err != nil {
		t.Fatalf("send after 70 s idle: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("received %d messages after 70 s idle, want 1", len(got))
	}
	m := got[0]
	if string(m.Body) != "after" {
		t.Fatalf("got %q", m.Body)
	}
	if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
		t.Fatal(err)
	}
}
