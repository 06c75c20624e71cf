package amqpws

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRoute: the WebSocket endpoint answers with and without a trailing slash (the
// Python SDK, through uamqp, asks for /$servicebus/websocket/); every other path,
// including longer ones under it, goes on to the next handler.
func TestRoute(t *testing.T) {
	mark := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Route", name) })
	}
	h := Route(mark("ws"), mark("next"))
	for path, want := range map[string]string{
		"/$servicebus/websocket":     "ws",
		"/$servicebus/websocket/":    "ws",
		"/$servicebus/websocket/x":   "next",
		"/$servicebus/websocketx":    "next",
		"/q1":                        "next",
		"/$servicebus/websocket?x=1": "ws",
		"/%24servicebus/websocket/":  "ws",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://h"+path, nil))
		if got := rec.Header().Get("X-Route"); got != want {
			t.Errorf("%s went to %q, want %q", path, got, want)
		}
	}
}
