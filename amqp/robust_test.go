package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// rawClient speaks AMQP frame by frame, to send what well-behaved clients never do.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *frames.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, nc: nc, r: frames.NewReader(nc, 1<<20)}
}

func (rc *rawClient) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawClient) frame(typ uint8, ch uint16, body frames.Body, payload []byte) {
	rc.t.Helper()
	rc.write(frames.AppendFrame(nil, typ, ch, body, payload))
}

func (rc *rawClient) next() frames.Body {
	rc.t.Helper()
	for {
		fr, err := rc.r.ReadFrame()
		if err != nil {
			rc.t.Fatalf("read frame: %v", err)
		}
		if len(fr.Body) == 0 {
			continue
		}
		b, err := frames.Parse(fr.Body)
		if err != nil {
			rc.t.Fatalf("parse: %v", err)
		}
		return b
	}
}

// open performs SASL (PLAIN with the root key) and open, as container "raw".
func (rc *rawClient) open() {
	rc.t.Helper()
	rc.openAs("raw")
}

// openAs is open with container-id container.
func (rc *rawClient) openAs(container string) {
	rc.t.Helper()
	rc.write(frames.ProtoSASL[:])
	if h, _ := rc.r.ReadProtoHeader(); h != frames.ProtoSASL {
		rc.t.Fatalf("header %q", h)
	}
	if _, ok := rc.next().(*frames.SASLMechanisms); !ok {
		rc.t.Fatal("no mechanisms")
	}
	rc.frame(frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00RootManageSharedAccessKey\x00secret-key")}, nil)
	if o, ok := rc.next().(*frames.SASLOutcome); !ok || o.Code != frames.SASLOK {
		rc.t.Fatalf("outcome %v", o)
	}
	rc.write(frames.ProtoAMQP[:])
	if h, _ := rc.r.ReadProtoHeader(); h != frames.ProtoAMQP {
		rc.t.Fatalf("header %q", h)
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Open{ContainerID: container, MaxFrameSize: 65536, ChannelMax: 10}, nil)
	if _, ok := rc.next().(*frames.Open); !ok {
		rc.t.Fatal("no open")
	}
}

// expectClose reads until a close frame and checks its condition, then EOF.
func (rc *rawClient) expectClose(cond string) {
	rc.t.Helper()
	for {
		b := rc.next()
		if c, ok := b.(*frames.Close); ok {
			if c.Error == nil || string(c.Error.Condition) != cond {
				rc.t.Fatalf("close error %v, want %s", c.Error, cond)
			}
			if _, err := rc.r.ReadFrame(); err == nil {
				rc.t.Fatal("connection still open after close")
			}
			return
		}
	}
}

// checkHealthy proves the server still serves other connections.
func checkHealthy(t *testing.T, addr string) {
	t.Helper()
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("ok")), nil); err != nil {
		t.Fatal(err)
	}
}

// TestRobustness: hostile input gets a clear AMQP error or a clean close,
// never a panic, and other connections are unaffected.
func TestRobustness(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.MaxFrameSize = 4096 })
	// A healthy connection open throughout.
	healthy := dialPlain(t, addr)

	t.Run("wrong protocol header", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.write([]byte("GET / HTTP/1.1\r\n\r\n"))
		h, err := rc.r.ReadProtoHeader()
		if err != nil || h != frames.ProtoSASL {
			t.Fatalf("got %q %v; want the supported header", h, err)
		}
		if _, err := rc.r.ReadFrame(); err == nil {
			t.Fatal("connection not closed")
		}
	})
	t.Run("oversize frame", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 10, OutgoingWindow: 10}, nil)
		rc.next() // begin
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0}, make([]byte, 5000))
		rc.expectClose(condFramingError)
	})
	t.Run("malformed performative", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.write([]byte{0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x11, 0xff})
		rc.expectClose(condDecodeError)
	})
	t.Run("unknown performative", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.write([]byte{0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x99, 0x45})
		rc.expectClose(condNotImplemented)
	})
	t.Run("frame on a channel without session", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 7, &frames.Detach{Handle: 0}, nil)
		rc.expectClose(condFramingError)
	})
	t.Run("transfer without credit", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 10, OutgoingWindow: 10}, nil)
		rc.next()
		id := uint32(0)
		// The transfer is written together with the attach, so the server
		// reads it before it has granted any credit.
		b := frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Attach{Name: "x", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
		b = frames.AppendFrame(b, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{1}}, []byte{0x00, 0x53, 0x75, 0xa0, 0x00})
		rc.write(b)
		for {
			b := rc.next()
			if d, ok := b.(*frames.Detach); ok {
				if d.Error == nil || d.Error.Condition != condTransferLimit {
					t.Fatalf("detach %v", d.Error)
				}
				return
			}
		}
	})
	t.Run("transfer on unattached handle", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 10, OutgoingWindow: 10}, nil)
		rc.next()
		id := uint32(0)
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 5, DeliveryID: &id, DeliveryTag: []byte{1}}, nil)
		for {
			if e, ok := rc.next().(*frames.End); ok {
				if e.Error == nil || e.Error.Condition != condUnattachedHandle {
					t.Fatalf("end %v", e.Error)
				}
				return
			}
		}
	})
	t.Run("transfer crossing our detach", func(t *testing.T) {
		// The server refuses a link (here: no such entity) with an attach and a detach;
		// a transfer the client sent before reading them is dropped, not a session
		// error. Once the client has answered the detach, the handle is unattached.
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 10, OutgoingWindow: 10}, nil)
		rc.next()
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "gone", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "no-such-queue"}, Source: &frames.Source{}}, nil)
		for {
			if _, ok := rc.next().(*frames.Attach); ok {
				break // the refusal's attach; its detach follows on the wire
			}
		}
		id := uint32(0)
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{1}}, []byte{0x00, 0x53, 0x77, 0xa1, 0x01, 'x'})
		rc.frame(frames.TypeAMQP, 0, &frames.Flow{Handle: ptrTo(uint32(0)), IncomingWindow: 10, OutgoingWindow: 10, NextIncomingID: ptrTo(uint32(0))}, nil)
		for detached := false; !detached; {
			switch f := rc.next().(type) {
			case *frames.End:
				t.Fatalf("session ended over frames that crossed the server's detach: %v", f.Error)
			case *frames.Detach:
				if f.Error == nil || f.Error.Condition != condNotFound {
					t.Fatalf("detach %v, want not-found", f.Error)
				}
				detached = true
			}
		}
		rc.frame(frames.TypeAMQP, 0, &frames.Detach{Handle: 0, Closed: true}, nil)
		// The session still serves: a new link on it is attached.
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "fine", Handle: 1, Role: frames.RoleSender, Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
		for attached := false; !attached; {
			switch f := rc.next().(type) {
			case *frames.End:
				t.Fatalf("session ended over frames that crossed the server's detach: %v", f.Error)
			case *frames.Attach:
				attached = f.Target != nil
			}
		}
		id++
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{2}}, nil)
		for {
			if e, ok := rc.next().(*frames.End); ok {
				if e.Error == nil || e.Error.Condition != condUnattachedHandle {
					t.Fatalf("end %v, want unattached-handle once the detach was answered", e.Error)
				}
				return
			}
		}
	})
	t.Run("session window is topped up for long deliveries", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 10, OutgoingWindow: 10}, nil)
		rc.next()
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "w", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
		rc.next() // attach
		rc.next() // flow with credit
		// 6000 transfer frames of one multi-frame delivery: beyond the 5000 window
		// unless the server tops it up, which it does; so the session must survive.
		id := uint32(0)
		var buf bytes.Buffer
		for i := range 6000 {
			tr := &frames.Transfer{Handle: 0, More: i < 5999}
			if i == 0 {
				tr.DeliveryID, tr.DeliveryTag = &id, []byte{1}
			}
			buf.Write(frames.AppendFrame(nil, frames.TypeAMQP, 0, tr, []byte{0x00}))
		}
		rc.write(buf.Bytes())
		for {
			switch b := rc.next().(type) {
			case *frames.Disposition:
				// The 6000-byte "message" of zero bytes is not a valid
				// message: rejected, but the session and link live on.
				if _, ok := b.State.(*frames.Rejected); !ok {
					t.Fatalf("state %v", b.State)
				}
				return
			case *frames.End:
				t.Fatalf("session ended: %v", b.Error)
			}
		}
	})
	t.Run("aborted and oversized deliveries", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.open()
		rc.frame(frames.TypeAMQP, 0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 100, OutgoingWindow: 100}, nil)
		rc.next()
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "a", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
		rc.next()
		rc.next()
		id0, id1 := uint32(0), uint32(1)
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: &id0, DeliveryTag: []byte{1}, More: true}, []byte{1, 2})
		rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, Aborted: true}, nil)
		chunk := make([]byte, 3500)
		for i := range 80 { // 280 KB > 256 KiB max-message-size
			tr := &frames.Transfer{Handle: 0, More: i < 79}
			if i == 0 {
				tr.DeliveryID, tr.DeliveryTag = &id1, []byte{2}
			}
			rc.frame(frames.TypeAMQP, 0, tr, chunk)
		}
		for {
			if d, ok := rc.next().(*frames.Disposition); ok {
				r, ok := d.State.(*frames.Rejected)
				if d.First != 1 || !ok || r.Error.Condition != condMessageSizeExceeded {
					t.Fatalf("disposition %v", d)
				}
				return
			}
		}
	})

	ctx := ctxT(t)
	if _, err := healthy.NewSession(ctx, nil); err != nil {
		t.Fatalf("healthy connection broken: %v", err)
	}
	checkHealthy(t, addr)
}

// TestIdleTimeoutAndHeartbeat: the server sends empty frames well inside
// the peer's idle timeout, and drops a silent peer after its own.
func TestIdleTimeoutAndHeartbeat(t *testing.T) {
	_, _, addr := testServer(t, func(c *Config) { c.IdleTimeout = time.Second; c.HeartbeatInterval = 100 * time.Millisecond })
	rc := dialRaw(t, addr)
	rc.open()
	start := time.Now()
	fr, err := rc.r.ReadFrame()
	if err != nil || len(fr.Body) != 0 {
		t.Fatalf("want a heartbeat: %v %v", fr, err)
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Fatalf("heartbeat after %v", d)
	}
	// Now stay silent: the server closes within about its idle timeout.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		fr, err := rc.r.ReadFrame()
		if err != nil {
			if err == io.EOF || isClosed(err) {
				return
			}
			t.Fatalf("read: %v", err)
		}
		if len(fr.Body) > 0 {
			b, _ := frames.Parse(fr.Body)
			if c, ok := b.(*frames.Close); ok && c.Error != nil && c.Error.Condition == condResourceLimit {
				return
			}
		}
	}
	t.Fatal("silent peer not disconnected")
}

// isClosed reports a connection the server closed (not our read deadline).
func isClosed(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && !ne.Timeout()
}

// FuzzConn feeds arbitrary bytes after a valid handshake to an in-process
// server over net.Pipe: it must never panic or hang.
func FuzzConn(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 2, 0, 0, 0})
	f.Add(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil))
	f.Add(append(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil),
		frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Attach{Name: "x", Role: frames.RoleReceiver, Source: &frames.Source{Address: "q1"}}, nil)...))
	b := newMemBackend()
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "q1"})
	cfg := DefaultConfig()
	cfg.RequireAuth = false
	cfg.HandshakeTimeout = time.Second
	s, err := New(cfg, b)
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		s.ServeConn(server)
		_ = client.SetDeadline(time.Now().Add(5 * time.Second))
		done := make(chan struct{})
		go func() { // drain everything the server writes
			defer close(done)
			_, _ = io.Copy(io.Discard, client)
		}()
		var in []byte
		in = append(in, frames.ProtoAMQP[:]...)
		in = frames.AppendFrame(in, frames.TypeAMQP, 0, &frames.Open{ContainerID: "f", MaxFrameSize: 65536}, nil)
		in = append(in, data...)
		in = frames.AppendFrame(in, frames.TypeAMQP, 0, &frames.Close{}, nil)
		go func() { _, _ = client.Write(in) }() // unblocked by Close below at the latest
		// A hostile frame may leave the server waiting for bytes that never
		// come; hang up after a moment, as a real peer would.
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			client.Close()
			<-done
		}
	})
}

// TestAnonymousNeedsClaim: without SASL PLAIN or a CBS token an entity
// attach is refused with a null source and amqp:unauthorized-access.
func TestAnonymousNeedsClaim(t *testing.T) {
	_, _, addr := testServer(t, nil)
	rc := dialRaw(t, addr)
	rc.write(frames.ProtoAMQP[:]) // no SASL: anonymous
	if h, _ := rc.r.ReadProtoHeader(); h != frames.ProtoAMQP {
		t.Fatalf("header %q", h)
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Open{ContainerID: "anon", MaxFrameSize: 512, ChannelMax: 1}, nil)
	if o, ok := rc.next().(*frames.Open); !ok || o.MaxFrameSize != 65536 {
		t.Fatalf("open %v", o)
	}
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	second := frames.RcvSecond
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "r", Role: frames.RoleReceiver, RcvSettleMode: &second,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	if a, ok := rc.next().(*frames.Attach); !ok || a.Source != nil {
		t.Fatalf("want a refusing attach with a null source, got %v", a)
	}
	if d, ok := rc.next().(*frames.Detach); !ok || d.Error == nil || d.Error.Condition != condUnauthorized || !d.Closed {
		t.Fatalf("want detach with unauthorized-access, got %v", d)
	}
}

// TestMaxFrameSizeNegotiation: a peer with max-frame-size 512 receives a
// 3000-byte message in frames that each fit (part 2 §2.7.1, §2.6.14).
func TestMaxFrameSizeNegotiation(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	snd, _ := s.NewSender(ctx, "q1", nil)
	body := make([]byte, 3000)
	for i := range body {
		body[i] = byte(i)
	}
	if err := snd.Send(ctx, goamqp.NewMessage(body), nil); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, addr)
	rc.write(frames.ProtoSASL[:])
	rc.r.ReadProtoHeader()
	rc.next()
	rc.frame(frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00RootManageSharedAccessKey\x00secret-key")}, nil)
	rc.next()
	rc.write(frames.ProtoAMQP[:])
	rc.r.ReadProtoHeader()
	rc.frame(frames.TypeAMQP, 0, &frames.Open{ContainerID: "small", MaxFrameSize: 512, ChannelMax: 1}, nil)
	rc.next()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	first, settled := frames.RcvFirst, frames.SndSettled
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "r", Role: frames.RoleReceiver, SndSettleMode: &settled, RcvSettleMode: &first,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	rc.next()
	h, credit := uint32(0), uint32(1)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, LinkCredit: &credit}, nil)
	var msg []byte
	nframes := 0
	for {
		fr, err := rc.r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if len(fr.Body) == 0 {
			continue
		}
		if size := frames.HeaderSize + len(fr.Body); size > 512 {
			t.Fatalf("frame of %d bytes exceeds the peer's 512", size)
		}
		b, err := frames.Parse(fr.Body)
		if err != nil {
			t.Fatal(err)
		}
		tr, ok := b.(*frames.Transfer)
		if !ok {
			continue
		}
		nframes++
		msg = append(msg, tr.Payload...)
		if !tr.More {
			break
		}
	}
	var got goamqp.Message
	if err := got.UnmarshalBinary(msg); err != nil || string(got.GetData()) != string(body) {
		t.Fatalf("reassembled message: %v", err)
	}
	if nframes < 7 {
		t.Fatalf("only %d frames for a 3000-byte message", nframes)
	}
}

// TestSessionWindowHoldsTransfers: the server never sends more transfer
// frames than the client's session incoming-window allows, and resumes
// when the window opens (part 2 §2.5.6).
func TestSessionWindowHoldsTransfers(t *testing.T) {
	_, _, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	snd, _ := s.NewSender(ctx, "q1", nil)
	for range 5 {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte("m")), nil); err != nil {
			t.Fatal(err)
		}
	}
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 2, OutgoingWindow: 100}, nil)
	rc.next()
	first, settled := frames.RcvFirst, frames.SndSettled
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "w", Role: frames.RoleReceiver, SndSettleMode: &settled, RcvSettleMode: &first,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}}, nil)
	rc.next()
	h, credit, nid := uint32(0), uint32(10), uint32(0)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &nid, IncomingWindow: 2, OutgoingWindow: 100, Handle: &h, LinkCredit: &credit}, nil)
	count := func(want int, within time.Duration) int {
		got := 0
		_ = rc.nc.SetReadDeadline(time.Now().Add(within))
		defer rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for got < want+1 {
			fr, err := rc.r.ReadFrame()
			if err != nil {
				break // deadline: nothing more came
			}
			if len(fr.Body) == 0 {
				continue
			}
			if b, _ := frames.Parse(fr.Body); b != nil {
				if _, ok := b.(*frames.Transfer); ok {
					got++
				}
			}
		}
		return got
	}
	if n := count(2, 500*time.Millisecond); n != 2 {
		t.Fatalf("%d transfers with an incoming window of 2", n)
	}
	nid = 2 // we received transfers 0 and 1
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &nid, IncomingWindow: 100, OutgoingWindow: 100}, nil)
	if n := count(3, 700*time.Millisecond); n != 3 {
		t.Fatalf("%d more transfers after opening the window, want 3", n)
	}
}

// TestReceiverDetachedWhenEntityGoes: a Backend error that ends the link
// (the entity was deleted) detaches the receiver with that condition.
func TestReceiverDetachedWhenEntityGoes(t *testing.T) {
	_, b, addr := testServer(t, func(c *Config) { c.ReceiveWait = 100 * time.Millisecond })
	b.addEntity(EntityInfo{Kind: KindQueue, Path: "doomed"})
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	r, err := s.NewReceiver(ctx, "doomed", nil)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	delete(b.entities, "doomed")
	b.mu.Unlock()
	_, err = r.Receive(ctx, nil)
	var le *goamqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != condNotFound {
		t.Fatalf("receive on a deleted entity: %v", err)
	}
}

// TestConnectionCreditPool: credit over all sending links of a connection
// is bounded by MaxConnCredit plus a small per-link floor, so every link
// makes progress even when idle links hold credit.
func TestConnectionCreditPool(t *testing.T) {
	_, b, addr := testServer(t, func(c *Config) { c.MaxConnCredit = 3 })
	rc := dialRaw(t, addr)
	rc.open()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	rc.next()
	granted := map[uint32]uint32{}
	for h := range uint32(3) {
		rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: fmt.Sprint("p", h), Handle: h, Role: frames.RoleSender,
			Target: &frames.Target{Address: "q1"}, Source: &frames.Source{}}, nil)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	_ = rc.nc.SetReadDeadline(deadline)
	for {
		fr, err := rc.r.ReadFrame()
		if err != nil {
			break // quiet: all grants seen
		}
		if len(fr.Body) == 0 {
			continue
		}
		if f, ok := mustParse(t, fr.Body).(*frames.Flow); ok && f.Handle != nil && f.LinkCredit != nil {
			granted[*f.Handle] = *f.LinkCredit
		}
	}
	total := uint32(0)
	for _, c := range granted {
		total += c
	}
	// The first link gets the pool's 3 raised to the per-link floor; the
	// others only the floor.
	if total != 3*minLinkCredit {
		t.Fatalf("granted %v (total %d) with MaxConnCredit 3", granted, total)
	}

	// go-amqp senders on one connection: more links than the pool has credit.
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := range 5 {
		snd, err := s.NewSender(ctx, "q1", &goamqp.SenderOptions{Name: fmt.Sprint("s", i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				if err := snd.Send(ctx, goamqp.NewMessage([]byte("m")), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b.mu.Lock()
	n := len(b.entities["q1"].queues[0])
	b.mu.Unlock()
	if n != 20 {
		t.Fatalf("%d stored, want 20", n)
	}
}

func mustParse(t *testing.T, body []byte) frames.Body {
	t.Helper()
	b, err := frames.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
