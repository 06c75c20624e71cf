package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/coder/websocket"

	"github.com/quorumbus/quorumbus/test/harness"
)

// wsDialer is the SDK's documented WebSocket hook (as in its example_websockets_test.go),
// trusting the CA in cfg and recording the URLs it was asked to open.
func wsDialer(cfg *tls.Config, opened *[]string) func(context.Context, azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	return func(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
		*opened = append(*opened, args.Host)
		c, _, err := websocket.Dial(ctx, args.Host, &websocket.DialOptions{
			Subprotocols: []string{"AMQPWSB10"},
			HTTPClient:   &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}},
		})
		if err != nil {
			return nil, err
		}
		return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
	}
}

// TestWebSocketSendReceive: the official SDK with ClientOptions.NewWebSocketConn and a
// normal connection string whose endpoint is the node's HTTPS port sends and receives
// over wss://host/$servicebus/websocket, with plain AMQP off; a WebSocket without the
// AMQPWSB10 subprotocol is refused.
func TestWebSocketSendReceive(t *testing.T) {
	n := harness.Start(t, "--tls-self-signed", "--amqp-addr", "")
	cfg := trusting(t, n.CA)
	q := name("ws")
	if _, err := tlsAdmin(t, n, cfg).CreateQueue(testCtx(t), q, nil); err != nil {
		t.Fatalf("create queue over HTTPS: %v", err)
	}
	var opened []string
	c := tlsClient(t, withEndpoint(t, n.TLSConnectionString, n.Admin), &azservicebus.ClientOptions{
		TLSConfig:        cfg,
		NewWebSocketConn: wsDialer(cfg, &opened),
	})
	sendReceive(t, c, q, "over websockets")
	if len(opened) == 0 || !strings.HasSuffix(opened[0], "/$servicebus/websocket") || !strings.HasPrefix(opened[0], "wss://") {
		t.Fatalf("the SDK opened %v, want wss://.../$servicebus/websocket", opened)
	}

	// A message larger than one frame and than the WebSocket library's default read
	// limit (32 KiB) crosses the adapter intact.
	big := strings.Repeat("0123456789abcdef", 200*1024/16)
	sendReceive(t, c, q, big)

	t.Run("SubprotocolRequired", func(t *testing.T) {
		ws, _, err := websocket.Dial(testCtx(t), opened[0], &websocket.DialOptions{
			HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}},
		})
		if err != nil {
			return // refused at the upgrade: fine
		}
		defer ws.CloseNow()
		_, _, err = ws.Read(testCtx(t))
		if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("read on a WebSocket without AMQPWSB10: err = %v, want close status policy violation", err)
		}
	})
}
