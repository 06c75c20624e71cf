package hosts

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// LinkState is what a Link does to the traffic it forwards. The zero value forwards
// at once.
type LinkState struct {
	// Delay holds every chunk read in either direction this long before writing it.
	Delay time.Duration
	// Jitter adds to Delay a random amount in [0, Jitter) chosen per connection (and
	// changed every time Set is called), so connections overtake one another: the
	// reordering a TCP stream itself never shows.
	Jitter time.Duration
	// Blackhole stops forwarding while keeping the connections (and new ones) open, as
	// a route that silently drops packets does: what is sent waits (the sender's
	// buffers fill up and its writes block), and flows again when the hole closes. No
	// byte is lost from the middle of a stream, which TCP never does either.
	Blackhole bool
}

// Link is a userspace TCP proxy from one host to a peer: it listens inside host from's
// namespace at the address from's hosts file gives the peer's name, and dials the
// peer's real address from that namespace.
type Link struct {
	From, To *Host
	ln       net.Listener
	target   string
	state    atomic.Pointer[LinkState]
	gen      atomic.Uint64 // bumped by Set; connections redraw their jitter
	closed   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, both halves; owner: mu
	wg    sync.WaitGroup
}

// inNamespace runs f on a thread switched into network namespace ns: sockets f opens
// stay in ns for their whole life.
func inNamespace(ns string, f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the wrong namespace: keep it locked, so that it dies
		// with this goroutine instead of running others.
		return fmt.Errorf("setns back from %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func newLink(from, to *Host, port int) (*Link, error) {
	l := &Link{From: from, To: to, target: net.JoinHostPort(to.IP, strconv.Itoa(port)), conns: map[net.Conn]struct{}{}}
	l.state.Store(&LinkState{})
	addr := net.JoinHostPort(proxyIP(to.Index), strconv.Itoa(port))
	err := inNamespace(from.NS, func() error {
		var err error
		l.ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hosts: proxy %s->%s on %s: %w", from.Name, to.Name, addr, err)
	}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Set changes what the link does, for open connections too.
func (l *Link) Set(s LinkState) {
	l.state.Store(&s)
	l.gen.Add(1)
}

// State is what the link does now.
func (l *Link) State() LinkState { return *l.state.Load() }

// Reset closes every open connection (both ends see a reset or EOF).
func (l *Link) Reset() {
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
}

// Close stops the listener and closes every connection.
func (l *Link) Close() {
	l.closed.Store(true)
	l.ln.Close()
	l.Reset()
	l.wg.Wait()
}

func (l *Link) track(c net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		l.conns[c] = struct{}{}
	} else {
		delete(l.conns, c)
	}
	return true
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

func (l *Link) serve(in net.Conn) {
	defer l.wg.Done()
	l.track(in, true)
	defer func() { in.Close(); l.track(in, false) }()
	var out net.Conn
	err := inNamespace(l.From.NS, func() error {
		var err error
		out, err = net.DialTimeout("tcp", l.target, 5*time.Second)
		return err
	})
	if err != nil {
		return
	}
	l.track(out, true)
	defer func() { out.Close(); l.track(out, false) }()
	done := make(chan struct{}, 2)
	go func() { l.pipe(out, in); done <- struct{}{} }()
	go func() { l.pipe(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

// holdWhileBlackhole returns once the link forwards again (or is closed).
func (l *Link) holdWhileBlackhole() {
	for l.state.Load().Blackhole && !l.closed.Load() {
		time.Sleep(20 * time.Millisecond) // polling the link's state
	}
}

// pipe copies src to dst chunk by chunk, each held for the link's delay. Chunks keep
// their order within a connection (TCP's promise); connections differ by jitter.
func (l *Link) pipe(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		var gen uint64 = ^uint64(0)
		var extra time.Duration
		for {
			l.holdWhileBlackhole()
			buf := make([]byte, 32*1024)
			n, err := src.Read(buf)
			if n > 0 {
				s := l.state.Load()
				if g := l.gen.Load(); g != gen {
					gen, extra = g, 0
					if s.Jitter > 0 {
						extra = rand.N(s.Jitter)
					}
				}
				q <- chunk{buf[:n], time.Now().Add(s.Delay + extra)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d) // the injected delay itself
		}
		l.holdWhileBlackhole()
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			for range q { // let the reader finish
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}
