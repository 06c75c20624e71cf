// Package amqpws serves AMQP 1.0 over WebSockets (the Service Bus SDKs' "AMQP over
// WebSockets" transport, for networks that block port 5671): an http.Handler for
// wss://host/$servicebus/websocket that accepts the "AMQPWSB10" subprotocol and hands
// the connection, adapted to a net.Conn (binary messages), to the AMQP server.
//
// It lives under cmd because amqp imports only the standard library: the WebSocket
// framing comes from github.com/coder/websocket, the maintained successor of
// nhooyr.io/websocket that the azservicebus SDK's own WebSocket example uses, so the
// client and server sides share one implementation of the framing.
//
// Goroutine model: none of its own. Each upgraded connection is served by the AMQP
// server's per-connection goroutines; it ends when that connection closes.
package amqpws

import (
	"context"
	"log/slog"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// Path is where the SDKs open the WebSocket (NewWebSocketConnArgs.Host ends with it).
const Path = "/$servicebus/websocket"

// Subprotocol is the WebSocket subprotocol of AMQP 1.0 (OASIS AMQP WebSocket Binding
// 1.0, section 2.1).
const Subprotocol = "AMQPWSB10"

// Handler serves the WebSocket endpoint. serve takes over each accepted connection
// (amqp.Server.ServeConn); readLimit bounds one WebSocket message, i.e. what the peer
// may make the server buffer at once.
func Handler(serve func(net.Conn), readLimit int64, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
		if err != nil {
			log.Debug("amqpws: upgrade refused", "remote", r.RemoteAddr, "err", err)
			return // Accept has answered the request
		}
		if c.Subprotocol() != Subprotocol {
			c.Close(websocket.StatusPolicyViolation, "the AMQPWSB10 subprotocol is required")
			return
		}
		c.SetReadLimit(readLimit)
		// The AMQP server closes the net.Conn when the connection ends (also on its
		// Close), so the adapter's context needs no other end.
		serve(websocket.NetConn(context.Background(), c, websocket.MessageBinary))
	})
}

// Route sends requests for Path, with or without a trailing slash (the Python SDK's
// uamqp asks for "/$servicebus/websocket/"), to ws and every other request to next.
func Route(ws, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == Path || p == Path+"/" {
			ws.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
