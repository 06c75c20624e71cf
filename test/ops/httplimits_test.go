package ops

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/internal/sas"
	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// httpPort is one port of a node that speaks HTTP, dialled raw so that a test controls
// every byte and sees when the node closes the connection.
type httpPort struct {
	name string
	addr string
	tls  *tls.Config // nil for plain HTTP
}

func (p httpPort) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := p.tryDial()
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (p httpPort) tryDial() (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if p.tls != nil {
		return tls.DialWithDialer(d, "tcp", p.addr, p.tls)
	}
	return d.Dial("tcp", p.addr)
}

// roundTrip writes req on c and reads one response, within 10 s.
func roundTrip(c net.Conn, br *bufio.Reader, req string) (*http.Response, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

const getHealthz = "GET /healthz HTTP/1.1\r\nHost: quorumbus\r\n\r\n"

// closedWithin reads c until the node closes it and reports how long that took; it
// fails the test if c is still open after limit.
func closedWithin(t *testing.T, what string, c net.Conn, br *bufio.Reader, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, br)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection was still open after %v", what, limit)
	}
	return took
}

func tlsTo(t *testing.T, n *harness.Node) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(n.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// TestHTTPIdleAndSlowConnectionsAreClosed: on every port that speaks HTTP (the admin
// port, and the AMQP and AMQPS ports' HTTP side), a keep-alive connection left idle
// after a request is closed after --http-idle-timeout, and a request whose body never
// finishes arriving is answered (401 without a token, at once) or closed within
// --http-read-timeout; both stayed open for good. The timeouts are made
// small through the node's flags.
func TestHTTPIdleAndSlowConnectionsAreClosed(t *testing.T) {
	n := harness.Start(t, "--tls-self-signed", "--http-idle-timeout", "1s", "--http-read-timeout", "1s")
	tc := tlsTo(t, n)
	ports := []httpPort{{"admin", n.Admin, tc}, {"amqp", n.AMQP, nil}, {"amqps", n.AMQPS, tc}}
	keyName, key := connKey(t, n.ConnectionString)
	token := sas.Format("sb://"+n.Admin+"/", keyName, key, time.Now().Add(time.Hour))
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			// Idle after one request.
			c := p.dial(t)
			br := bufio.NewReader(c)
			resp, err := roundTrip(c, br, getHealthz)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET /healthz: %v %v", resp, err)
			}
			if took := closedWithin(t, "idle keep-alive connection", c, br, 15*time.Second); took < 500*time.Millisecond {
				t.Errorf("the idle connection was closed after %v, before the idle timeout (1s)", took)
			}

			// A slow body without a token: the 401 comes at once, and the connection
			// ends by the read timeout.
			c = p.dial(t)
			br = bufio.NewReader(c)
			slow := "PUT /slowq HTTP/1.1\r\nHost: quorumbus\r\nContent-Type: application/atom+xml\r\nContent-Length: 1000\r\n\r\n<en"
			start := time.Now()
			resp, err = roundTrip(c, br, slow)
			if err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a slow body without a token: %v %v", resp, err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the 401 took %v", took)
			}
			closedWithin(t, "a slow body without a token", c, br, 15*time.Second)

			// A slow body with a valid token: the node gives up reading it after the
			// read timeout and answers or closes.
			c = p.dial(t)
			br = bufio.NewReader(c)
			slow = "PUT /slowq HTTP/1.1\r\nHost: quorumbus\r\nAuthorization: " + token +
				"\r\nContent-Type: application/atom+xml\r\nContent-Length: 1000\r\n\r\n<en"
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.WriteString(c, slow); err != nil {
				t.Fatal(err)
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				resp.Body.Close()
				if resp.StatusCode < 400 {
					t.Fatalf("a body that never arrived was answered %d", resp.StatusCode)
				}
			} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("a slow body with a token: neither answered nor closed within 15 s")
			}
			closedWithin(t, "a slow body with a token", c, br, 15*time.Second)

			// A connection that sends nothing at all.
			c = p.dial(t)
			closedWithin(t, "a silent connection", c, bufio.NewReader(c), 15*time.Second)
		})
	}
}

// TestHTTPConnectionLimitRefusesTheExcess: with --http-max-connections 3, a fourth
// HTTP connection on a port is closed without an answer while three are open, and one
// is served again once one of the three has closed, on the admin port and the AMQP
// port's HTTP side (only AMQP connections were bounded before).
func TestHTTPConnectionLimitRefusesTheExcess(t *testing.T) {
	const max = 3
	n := harness.Start(t, "--http-max-connections", fmt.Sprint(max))
	for _, p := range []httpPort{{"admin", n.Admin, nil}, {"amqp", n.AMQP, nil}} {
		t.Run(p.name, func(t *testing.T) {
			http.DefaultClient.CloseIdleConnections() // the harness's probes of the node
			var held []net.Conn
			closeHeld := func() {
				for _, c := range held {
					c.Close()
				}
				held = nil
			}
			defer closeHeld()
			// Until the node has let go of connections closed before (it notices a
			// client's close when it next reads), a try may be refused early.
			testutil.WaitFor(t, 30*time.Second, func() error {
				closeHeld()
				for i := 0; i < max; i++ {
					c, err := p.tryDial()
					if err != nil {
						return err
					}
					held = append(held, c)
					if _, err := roundTrip(c, bufio.NewReader(c), getHealthz); err != nil {
						return fmt.Errorf("connection %d of %d: %v", i+1, max, err)
					}
				}
				return nil
			})
			extra := p.dial(t)
			if resp, err := roundTrip(extra, bufio.NewReader(extra), getHealthz); err == nil {
				t.Fatalf("connection %d of at most %d was served: %s", max+1, max, resp.Status)
			} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection %d of at most %d was neither served nor closed: %v", max+1, max, err)
			}
			if p.name == "amqp" { // the admin port has room: count the refusal there
				resp, err := http.Get("http://" + n.Admin + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !regexp.MustCompile(`quorumbus_http_connections_refused_total\{port="amqp"\} [1-9]`).Match(b) {
					t.Errorf("/metrics does not count the refused connection:\n%s", b)
				}
			}
			held[0].Close()
			testutil.WaitFor(t, 30*time.Second, func() error {
				c, err := p.tryDial()
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = roundTrip(c, bufio.NewReader(c), getHealthz)
				return err
			})
		})
	}
}

// connKey is the key name and key of a connection string.
func connKey(t *testing.T, cs string) (name, key string) {
	t.Helper()
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "SharedAccessKeyName":
			name = v
		case "SharedAccessKey":
			key = v
		}
	}
	if name == "" || key == "" {
		t.Fatalf("no key in %q", cs)
	}
	return name, key
}
