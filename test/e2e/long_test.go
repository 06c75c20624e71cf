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
	go func() {
		time.Sleep(70 * time.Second) // the connection must stay idle past the SDK's 60 s read deadline
		_ = s.SendMessage(context.Background(), body("after"), nil)
	}()
	m := receiveOne(t, r, 90*time.Second)
	if string(m.Body) != "after" {
		t.Fatalf("got %q", m.Body)
	}
	if err := r.CompleteMessage(testCtx(t), m, nil); err != nil {
		t.Fatal(err)
	}
}
