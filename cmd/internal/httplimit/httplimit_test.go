package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs h behind c's server and listener on 127.0.0.1 and returns its address.
func serve(t *testing.T, c Config, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := c.Server(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(c.Listen(ln))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestLongOperationOutlivesTheTimeouts: the read timeout bounds the arrival of a
// request, not the handler: a handler that reads its body and then works for longer
// than both timeouts, streaming its progress, keeps its context and is answered in
// full.
func TestLongOperationOutlivesTheTimeouts(t *testing.T) {
	c := Config{MaxConnections: 10, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, IdleTimeout: time.Second}
	addr := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		for i := 0; i < 4; i++ {
			// A long operation is what is tested: it works past both timeouts.
			select {
			case <-time.After(200 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "step %d\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintln(w, "done")
	}))
	for _, body := range []string{"", "some body"} {
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(string(b), "done\n") {
			t.Fatalf("body %q: got %q, %v", body, b, err)
		}
	}
}

// TestSlowReaderIsDropped: a client that stops reading a large response is dropped
// once a write has waited WriteTimeout.
func TestSlowReaderIsDropped(t *testing.T) {
	c := Config{MaxConnections: 10, ReadTimeout: time.Second, WriteTimeout: 200 * time.Millisecond, IdleTimeout: time.Second}
	ended := make(chan error, 1)
	addr := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	}))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing.
	select {
	case err := <-ended:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the write ended with %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client that reads nothing held the handler for 30 s")
	}
}

// TestListenerRefusesBeyondMax: a connection beyond the bound is closed before it is
// served, and counted; closing one makes room again.
func TestListenerRefusesBeyondMax(t *testing.T) {
	c := Config{MaxConnections: 2, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listen(ln)
	srv := c.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	defer func() { srv.Close(); <-done }()

	get := func(conn net.Conn) error {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var held []net.Conn
	for i := 0; i < 2; i++ {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := get(conn); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := get(extra); err == nil {
		t.Fatal("a third connection was served with a bound of 2")
	}
	if l.Refused() != 1 || l.Open() != 2 {
		t.Fatalf("refused %d, open %d; want 1, 2", l.Refused(), l.Open())
	}
	held[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for l.Open() != 1 { // the server notices the close at its next read
		select {
		case <-ctx.Done():
			t.Fatalf("open %d after a close", l.Open())
		case <-time.After(5 * time.Millisecond): // polling a counter
		}
	}
	again, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := get(again); err != nil {
		t.Fatalf("a connection after one closed: %v", err)
	}
}
