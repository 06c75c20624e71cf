package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// connectionString resolves the connection string: flag, then environment, then the file
// the node writes into its data directory.
func (g *globals) connectionString() (string, error) {
	if g.connStr != "" {
		return g.connStr, nil
	}
	if v := os.Getenv("QUORUMBUS_CONNECTION_STRING"); v != "" {
		return v, nil
	}
	path := filepath.Join(g.data, "connection-string")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no connection string: pass --connection-string, set QUORUMBUS_CONNECTION_STRING, or run next to the node's data directory (%s: %v)", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// adminFromEndpoints points qbctl at the admin address the node wrote to
// <data>/endpoints.json, when qbctl reads that node's connection string from the same
// directory (no --connection-string, no QUORUMBUS_CONNECTION_STRING) and no admin
// address is given (no --admin-addr, no QUORUMBUS_ADMIN_ADDR): next to a node started
// on other ports, no flag is needed. A wildcard address (0.0.0.0, [::]) becomes the
// loopback one.
func (g *globals) adminFromEndpoints(adminAddrGiven bool) {
	if adminAddrGiven || os.Getenv("QUORUMBUS_ADMIN_ADDR") != "" || g.connStr != "" || os.Getenv("QUORUMBUS_CONNECTION_STRING") != "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(g.data, "endpoints.json"))
	if err != nil {
		return
	}
	var ep struct {
		Admin string `json:"admin"`
	}
	if json.Unmarshal(b, &ep) != nil || ep.Admin == "" {
		return
	}
	host, port, err := net.SplitHostPort(ep.Admin)
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	g.adminAddr = net.JoinHostPort(host, port)
}

// rewriteTransport sends the admin client's requests to the node's admin listener. The
// admin client always builds https://<endpoint host>/... from the connection string; the
// request is still signed for that URL, which the node accepts (it authorizes by path).
type rewriteTransport struct {
	addr, scheme string
	client       *http.Client
}

func scheme(c *tls.Config) string {
	if c != nil {
		return "https"
	}
	return "http"
}

func (t *rewriteTransport) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme = t.scheme
	req.URL.Host = t.addr
	req.Host = t.addr
	return t.client.Do(req)
}

func (g *globals) adminClient() (*admin.Client, error) {
	cs, err := g.connectionString()
	if err != nil {
		return nil, err
	}
	return admin.NewClientFromConnectionString(cs, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: &rewriteTransport{addr: g.adminAddr, scheme: scheme(g.adminTLS), client: g.httpClient(30 * time.Second)},
			Retry:     policy.RetryOptions{MaxRetries: 1, RetryDelay: 200 * time.Millisecond},
		},
	})
}

func (g *globals) dataClient() (*azservicebus.Client, error) {
	cs, err := g.connectionString()
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if !strings.Contains(cs, "UseDevelopmentEmulator=true") && g.adminTLS != nil {
		tc = g.adminTLS // AMQPS to the node: the same trust as its admin API
	}
	return azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		TLSConfig:    tc,
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 200 * time.Millisecond},
	})
}

// entityPath is a queue name or TOPIC/Subscriptions/SUB.
type entityPath struct {
	queue, topic, sub string
}

func parseEntity(s string) (entityPath, error) {
	parts := strings.Split(strings.Trim(s, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return entityPath{queue: parts[0]}, nil
	case len(parts) == 3 && strings.EqualFold(parts[1], "Subscriptions") && parts[0] != "" && parts[2] != "":
		return entityPath{topic: parts[0], sub: parts[2]}, nil
	}
	return entityPath{}, errors.New("entity must be QUEUE or TOPIC/Subscriptions/SUB, got " + fmt.Sprintf("%q", s))
}

// target names e in error messages.
func (e entityPath) target() target {
	if e.queue != "" {
		return target{kind: "queue", name: e.queue, list: "qbctl queue list"}
	}
	return target{kind: "subscription", name: e.String(), list: "qbctl subscription list " + e.topic}
}

func (e entityPath) String() string {
	if e.queue != "" {
		return e.queue
	}
	return e.topic + "/Subscriptions/" + e.sub
}

func (e entityPath) receiver(c *azservicebus.Client, opts *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
	if e.queue != "" {
		return c.NewReceiverForQueue(e.queue, opts)
	}
	return c.NewReceiverForSubscription(e.topic, e.sub, opts)
}

// acceptSession accepts the named session of e (S-SES-2): a session receiver holding
// its lock.
func (e entityPath) acceptSession(ctx context.Context, c *azservicebus.Client, id string) (*azservicebus.SessionReceiver, error) {
	if e.queue != "" {
		return c.AcceptSessionForQueue(ctx, e.queue, id, nil)
	}
	return c.AcceptSessionForSubscription(ctx, e.topic, e.sub, id, nil)
}

// acceptNextSession accepts the next available session of e, waiting for one as long
// as ctx lets it (the SDK passes the deadline on to the node).
func (e entityPath) acceptNextSession(ctx context.Context, c *azservicebus.Client) (*azservicebus.SessionReceiver, error) {
	if e.queue != "" {
		return c.AcceptNextSessionForQueue(ctx, e.queue, nil)
	}
	return c.AcceptNextSessionForSubscription(ctx, e.topic, e.sub, nil)
}
