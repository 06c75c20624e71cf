package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// connIDKey is the context key of ConnectionID.
type connIDKey struct{}

// ConnectionID returns the identity of the AMQP connection on whose behalf a Backend
// method is called: 128 random bits in hex, unique per accepted connection, the same for
// every call the connection makes (link attach, receive, settle, and its $cbs and
// $management requests). A Backend uses it as the holder of session locks (S-SES-2), so
// that only the connection that accepted a session can receive from, settle in, renew,
// set the state of or release it. It is "" when ctx carries none (a call not made by this
// package).
func ConnectionID(ctx context.Context) string {
	id, _ := ctx.Value(connIDKey{}).(string)
	return id
}

// WithConnectionID returns a copy of ctx whose ConnectionID is id: for a Backend that
// carries a call to another process and for tests. amqp sets it on every connection.
func WithConnectionID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, connIDKey{}, id)
}

func newConnectionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
