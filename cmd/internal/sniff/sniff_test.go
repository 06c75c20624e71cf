package sniff

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestSplit: a connection opening with the AMQP header reaches the AMQP listener with
// every byte intact; an HTTP request reaches the HTTP listener and is served; a client
// that sends nothing is closed after the timeout.
func TestSplit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, 200*time.Millisecond)
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "admin "+r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(m.HTTP())
	t.Cleanup(func() {
		hs.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	// AMQP: the header and what follows arrive unchanged.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := "AMQP\x00\x01\x00\x00rest"
	if _, err := io.WriteString(c, want); err != nil {
		t.Fatal(err)
	}
	ac, err := m.AMQP().Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = ac.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(ac, got); err != nil || string(got) != want {
		t.Fatalf("AMQP side read %q, %v; want %q", got, err, want)
	}
	ac.Close()

	// HTTP: served by the HTTP server.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ln.Addr().String() + "/q1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "admin /q1" {
		t.Fatalf("HTTP answer %q", b)
	}

	// Silent: closed once the timeout passes.
	s, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(s).ReadByte(); err != io.EOF {
		t.Fatalf("a silent connection: read err = %v, want EOF (closed by the mux)", err)
	}
}
