package amqp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/test/testutil"
)

// until reads frames until one of type T arrives.
func until[T frames.Body](rc *rawClient) T {
	rc.t.Helper()
	for {
		if b, ok := rc.next().(T); ok {
			return b
		}
	}
}

// resumeReceiver begins a session and attaches a peek-lock receiver named name on q1,
// with unsettled as its unsettled map; it returns the broker's attach.
func (rc *rawClient) resumeReceiver(name string, unsettled encoding.Map) *frames.Attach {
	rc.t.Helper()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	until[*frames.Begin](rc)
	first := frames.RcvFirst
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: name, Role: frames.RoleReceiver, RcvSettleMode: &first,
		Source: &frames.Source{Address: "q1"}, Target: &frames.Target{}, Unsettled: unsettled}, nil)
	return until[*frames.Attach](rc)
}

func (rc *rawClient) credit(n uint32) { rc.creditOn(0, n) }

func (rc *rawClient) creditOn(h, n uint32) {
	rc.t.Helper()
	nid := uint32(0)
	rc.frame(frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: &nid, IncomingWindow: 100, OutgoingWindow: 100, Handle: &h, LinkCredit: &n}, nil)
}

// q1State is what the fake broker holds in q1: body -> locked, delivery count.
func q1State(b *memBackend) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for _, m := range b.entities["q1"].queues[0] {
		for _, body := range []string{"m0", "m1", "m2"} {
			if bytes.Contains(m.m.Raw, []byte(body)) {
				out[body] = fmt.Sprintf("locked=%v count=%d", m.token != UUID{}, m.deliveryCount)
			}
		}
	}
	return out
}

// TestLinkResume: a receiver that comes back (here on a new connection with the same
// container-id) with its unsettled map keeps its deliveries' state (part 2 §2.6.13):
// an outcome it lists is applied, a delivery it lists without one stays locked and is
// resent with resume=true under the same tag for it to settle, one it does not list is
// released without counting a delivery.
func TestLinkResume(t *testing.T) {
	srv, b, addr := testServer(t, nil)
	c := dialPlain(t, addr)
	ctx := ctxT(t)
	s, _ := c.NewSession(ctx, nil)
	snd, _ := s.NewSender(ctx, "q1", nil)
	for _, body := range []string{"m0", "m1", "m2"} {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte(body)), nil); err != nil {
			t.Fatal(err)
		}
	}

	a := dialRaw(t, addr)
	a.open()
	if got := a.resumeReceiver("res", nil); len(got.Unsettled) != 0 {
		t.Fatalf("a fresh link got an unsettled map %v", got.Unsettled)
	}
	a.credit(3)
	tags := map[string][]byte{}
	for len(tags) < 3 {
		tr := until[*frames.Transfer](a)
		for _, body := range []string{"m0", "m1", "m2"} {
			if bytes.Contains(tr.Payload, []byte(body)) {
				tags[body] = tr.DeliveryTag
			}
		}
	}
	a.nc.Close() // the connection drops with three deliveries unsettled
	testutil.WaitFor(t, 5*time.Second, func() error {
		srv.suspended.mu.Lock()
		defer srv.suspended.mu.Unlock()
		if len(srv.suspended.links) == 0 {
			return fmt.Errorf("the dropped link is not remembered yet")
		}
		return nil
	})

	bc := dialRaw(t, addr)
	bc.open() // same container-id "raw"
	reply := bc.resumeReceiver("res", encoding.Map{
		{Key: tags["m0"], Value: &encoding.Described{Descriptor: uint64(frames.CodeAccepted), Value: encoding.List{}}},
		{Key: tags["m1"], Value: nil},
		{Key: []byte("never-sent"), Value: nil},
	})
	if len(reply.Unsettled) != 1 || !bytes.Equal(reply.Unsettled[0].Key.([]byte), tags["m1"]) {
		t.Fatalf("broker's unsettled map %v, want just m1's tag %x", reply.Unsettled, tags["m1"])
	}
	// m0 was completed by the outcome the client listed; m1 is still locked; m2 was
	// released without counting its delivery.
	testutil.WaitFor(t, 5*time.Second, func() error {
		got := q1State(b)
		if _, ok := got["m0"]; ok || got["m1"] != "locked=true count=1" || got["m2"] != "locked=false count=0" {
			return fmt.Errorf("q1 holds %v", got)
		}
		return nil
	})

	bc.credit(5)
	tr := until[*frames.Transfer](bc)
	if !tr.Resume || !bytes.Equal(tr.DeliveryTag, tags["m1"]) || !bytes.Contains(tr.Payload, []byte("m1")) {
		t.Fatalf("first transfer after the resume: resume=%v tag %x, want m1 resumed under %x", tr.Resume, tr.DeliveryTag, tags["m1"])
	}
	next := until[*frames.Transfer](bc)
	if next.Resume || !bytes.Contains(next.Payload, []byte("m2")) || bytes.Equal(next.DeliveryTag, tags["m2"]) {
		t.Fatalf("second transfer: resume=%v, want m2 delivered afresh under a new lock", next.Resume)
	}
	// The client settles the resumed delivery like any other.
	bc.frame(frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: *tr.DeliveryID, Settled: true, State: frames.Accepted{}}, nil)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := q1State(b); len(got) != 1 || got["m2"] != "locked=true count=1" {
			return fmt.Errorf("q1 holds %v, want only m2, locked", got)
		}
		return nil
	})

	// On the same connection: a detach without closing, then the same name again.
	first := frames.RcvFirst
	reattach := func(handle uint32) *frames.Attach {
		bc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "res", Handle: handle, Role: frames.RoleReceiver, RcvSettleMode: &first,
			Source: &frames.Source{Address: "q1"}, Target: &frames.Target{},
			Unsettled: encoding.Map{{Key: next.DeliveryTag, Value: nil}}}, nil)
		return until[*frames.Attach](bc)
	}
	bc.frame(frames.TypeAMQP, 0, &frames.Detach{Handle: 0}, nil)
	until[*frames.Detach](bc)
	if got := reattach(1); len(got.Unsettled) != 1 || !bytes.Equal(got.Unsettled[0].Key.([]byte), next.DeliveryTag) {
		t.Fatalf("re-attach on the same connection: broker lists %v, want m2's tag", got.Unsettled)
	}
	bc.creditOn(1, 5)
	if tr := until[*frames.Transfer](bc); !tr.Resume || tr.Handle != 1 || !bytes.Equal(tr.DeliveryTag, next.DeliveryTag) {
		t.Fatalf("resumed transfer on the same connection: resume=%v handle %d tag %x", tr.Resume, tr.Handle, tr.DeliveryTag)
	}

	// A closing detach forgets the link: re-attaching with the same name resumes nothing.
	bc.frame(frames.TypeAMQP, 0, &frames.Detach{Handle: 1, Closed: true}, nil)
	until[*frames.Detach](bc)
	if got := reattach(2); len(got.Unsettled) != 0 {
		t.Fatalf("after a closing detach the broker still lists %v", got.Unsettled)
	}
}

// sendSession sends m0, m1 and m2 to the session queue sq, all in session s1.
func sendSession(t *testing.T, addr string) {
	t.Helper()
	ctx := ctxT(t)
	s, err := dialPlain(t, addr).NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"m0", "m1", "m2"} {
		m := goamqp.NewMessage([]byte(body))
		m.Properties = &goamqp.MessageProperties{GroupID: ptrTo("s1")}
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func (rc *rawClient) begin() {
	rc.t.Helper()
	rc.frame(frames.TypeAMQP, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)
	until[*frames.Begin](rc)
}

// sessionAttach attaches a peek-lock receiver named name on handle h for session s1 of
// sq, with unsettled as its unsettled map. It returns the broker's attach, and its
// detach when the broker refused the link.
func (rc *rawClient) sessionAttach(h uint32, name string, unsettled encoding.Map) (*frames.Attach, *frames.Detach) {
	rc.t.Helper()
	first := frames.RcvFirst
	filter := encoding.Map{{Key: encoding.Symbol(sessionFilterKey), Value: &encoding.Described{Descriptor: sessionFilterCode, Value: "s1"}}}
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: name, Handle: h, Role: frames.RoleReceiver, RcvSettleMode: &first,
		Source: &frames.Source{Address: "sq", Filter: filter}, Target: &frames.Target{}, Unsettled: unsettled}, nil)
	reply := until[*frames.Attach](rc)
	if reply.Source != nil {
		return reply, nil
	}
	return reply, until[*frames.Detach](rc)
}

// receive3 grants credit on h and reads the three deliveries: body -> transfer.
func (rc *rawClient) receive3(h uint32) map[string]*frames.Transfer {
	rc.t.Helper()
	rc.creditOn(h, 3)
	got := map[string]*frames.Transfer{}
	for len(got) < 3 {
		tr := until[*frames.Transfer](rc)
		for _, body := range []string{"m0", "m1", "m2"} {
			if bytes.Contains(tr.Payload, []byte(body)) {
				got[body] = tr
			}
		}
	}
	return got
}

// sqState is what the fake broker holds in sq: body -> lock token, delivery count;
// and session s1's lock: its holder (a ConnectionID, "" when free) and expiry.
func sqState(b *memBackend) (msgs map[string]string, holder string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs = map[string]string{}
	e := b.entities["sq"]
	for _, m := range e.queues[0] {
		for _, body := range []string{"m0", "m1", "m2"} {
			if bytes.Contains(m.m.Raw, []byte(body)) {
				msgs[body] = fmt.Sprintf("token=%x count=%d", m.token[:2], m.deliveryCount)
			}
		}
	}
	if s := e.sessions["s1"]; s != nil && s.held {
		holder, until = s.holder, s.lockedUntil
	}
	return msgs, holder, until
}

// suspendedCount is how many links the server remembers for a resume.
func suspendedCount(srv *Server) int {
	srv.suspended.mu.Lock()
	defer srv.suspended.mu.Unlock()
	return len(srv.suspended.links)
}

func wantRefused(t *testing.T, what string, d *frames.Detach) {
	t.Helper()
	if d == nil || d.Error == nil || string(d.Error.Condition) != condSessionCannotLock {
		t.Fatalf("%s: detach %v, want %s", what, d, condSessionCannotLock)
	}
}

// TestLinkResumeSession: a session receiver whose connection drops comes back on a new
// connection (same container-id, link name and session) with its unsettled map and
// keeps its session lock: same holder and expiry as the Backend sees them, the
// deliveries it lists stay locked under their lock tokens and are resent with
// resume=true, and settling one after the resume applies. Meanwhile no other receiver
// gets the session.
func TestLinkResumeSession(t *testing.T) {
	srv, b, addr := testServer(t, nil)
	sendSession(t, addr)

	a := dialRaw(t, addr)
	a.open()
	a.begin()
	if reply, d := a.sessionAttach(0, "sres", nil); d != nil || len(reply.Unsettled) != 0 {
		t.Fatalf("fresh session link: detach %v, unsettled %v", d, reply.Unsettled)
	}
	got := a.receive3(0)
	before, holder, lockedUntil := sqState(b)
	if holder == "" {
		t.Fatal("session s1 is not locked after the accept")
	}
	a.nc.Close() // the connection drops with three deliveries unsettled
	testutil.WaitFor(t, 5*time.Second, func() error {
		if suspendedCount(srv) == 0 {
			return fmt.Errorf("the dropped link is not remembered yet")
		}
		return nil
	})

	// While suspended, the session is the client's: another container is refused, as
	// for any locked session.
	other := dialRaw(t, addr)
	other.openAs("other")
	other.begin()
	_, d := other.sessionAttach(0, "someone-else", nil)
	wantRefused(t, "another link during the suspension", d)

	bc := dialRaw(t, addr)
	bc.open() // same container-id "raw"
	bc.begin()
	reply, d := bc.sessionAttach(0, "sres", encoding.Map{
		{Key: got["m0"].DeliveryTag, Value: &encoding.Described{Descriptor: uint64(frames.CodeAccepted), Value: encoding.List{}}},
		{Key: got["m1"].DeliveryTag, Value: nil},
		{Key: got["m2"].DeliveryTag, Value: nil},
	})
	if d != nil {
		t.Fatalf("resume refused: %v", d.Error)
	}
	if len(reply.Unsettled) != 2 {
		t.Fatalf("broker's unsettled map %v, want m1's and m2's tags", reply.Unsettled)
	}
	// m0 was completed by the outcome listed; m1 and m2 keep their locks; the session
	// lock is the one taken before the drop.
	testutil.WaitFor(t, 5*time.Second, func() error {
		msgs, h, until := sqState(b)
		if _, ok := msgs["m0"]; ok || msgs["m1"] != before["m1"] || msgs["m2"] != before["m2"] {
			return fmt.Errorf("sq holds %v, want m1 %s and m2 %s", msgs, before["m1"], before["m2"])
		}
		if h != holder || !until.Equal(lockedUntil) {
			return fmt.Errorf("session lock held by %q until %v, want %q until %v", h, until, holder, lockedUntil)
		}
		return nil
	})
	_, d = other.sessionAttach(1, "someone-else-again", nil)
	wantRefused(t, "another link after the resume", d)

	bc.creditOn(0, 5)
	resent := map[string]*frames.Transfer{}
	for len(resent) < 2 {
		tr := until[*frames.Transfer](bc)
		for _, body := range []string{"m1", "m2"} {
			if bytes.Contains(tr.Payload, []byte(body)) {
				if !tr.Resume || !bytes.Equal(tr.DeliveryTag, got[body].DeliveryTag) {
					t.Fatalf("%s sent again with resume=%v under tag %x, want resumed under %x", body, tr.Resume, tr.DeliveryTag, got[body].DeliveryTag)
				}
				resent[body] = tr
			}
		}
	}
	// A settlement after the resume applies.
	bc.frame(frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: *resent["m1"].DeliveryID, Settled: true, State: frames.Accepted{}}, nil)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if msgs, _, _ := sqState(b); len(msgs) != 1 || msgs["m2"] != before["m2"] {
			return fmt.Errorf("sq holds %v, want only m2, still locked", msgs)
		}
		return nil
	})

	// $management requests for the resumed link act for the lock's holder too.
	if st := bc.renewSessionLock(1, "sres"); st != 200 {
		t.Fatalf("renew-session-lock after the resume: status %d, want 200", st)
	}
	if _, h, until := sqState(b); h != holder || !until.After(lockedUntil) {
		t.Fatalf("after renewing, the session is held by %q until %v, want %q after %v", h, until, holder, lockedUntil)
	}

	// A closing detach ends the hold as a session receiver's close does: the session is
	// free for the other container.
	bc.frame(frames.TypeAMQP, 0, &frames.Detach{Handle: 0, Closed: true}, nil)
	until[*frames.Detach](bc)
	if _, d := other.sessionAttach(2, "someone-else-at-last", nil); d != nil {
		t.Fatalf("after the close the session is still refused: %v", d.Error)
	}
}

// TestLinkResumeSessionSameConnection: a session link detached without closing keeps its
// session from every other acceptor, another link of the same connection included
// (the Backend holds session locks per connection, so only the broker's own check
// stops that one) and the same link name on another connection while this one is
// open, until it re-attaches and resumes.
func TestLinkResumeSessionSameConnection(t *testing.T) {
	_, b, addr := testServer(t, nil)
	b.mu.Lock()
	b.ownerReaccepts = true
	b.mu.Unlock()
	sendSession(t, addr)
	a := dialRaw(t, addr)
	a.open()
	a.begin()
	if _, d := a.sessionAttach(0, "sres", nil); d != nil {
		t.Fatalf("fresh session link refused: %v", d.Error)
	}
	got := a.receive3(0)
	before, holder, _ := sqState(b)
	a.frame(frames.TypeAMQP, 0, &frames.Detach{Handle: 0}, nil)
	until[*frames.Detach](a)

	_, d := a.sessionAttach(1, "sibling", nil)
	wantRefused(t, "another link of the same connection", d)
	other := dialRaw(t, addr)
	other.openAs("other")
	other.begin()
	_, d = other.sessionAttach(0, "elsewhere", nil)
	wantRefused(t, "another connection", d)
	// While the connection that suspended the link is open, only it may resume the link:
	// the same container and link name on another connection would make two holders.
	twin := dialRaw(t, addr)
	twin.open()
	twin.begin()
	_, d = twin.sessionAttach(0, "sres", encoding.Map{{Key: got["m0"].DeliveryTag, Value: nil}})
	wantRefused(t, "the same link name on another connection", d)
	if msgs, h, _ := sqState(b); h != holder || msgs["m0"] != before["m0"] {
		t.Fatalf("the refusals changed the session: holder %q (want %q), sq %v", h, holder, msgs)
	}

	reply, d := a.sessionAttach(2, "sres", encoding.Map{
		{Key: got["m0"].DeliveryTag, Value: nil},
		{Key: got["m1"].DeliveryTag, Value: nil},
		{Key: got["m2"].DeliveryTag, Value: nil},
	})
	if d != nil || len(reply.Unsettled) != 3 {
		t.Fatalf("resume on the same connection: detach %v, unsettled %v", d, reply.Unsettled)
	}
	a.creditOn(2, 5)
	tr := until[*frames.Transfer](a)
	if !tr.Resume || tr.Handle != 2 || !bytes.Contains(tr.Payload, []byte("m0")) || !bytes.Equal(tr.DeliveryTag, got["m0"].DeliveryTag) {
		t.Fatalf("first transfer after the resume: resume=%v handle %d tag %x, want m0 resumed", tr.Resume, tr.Handle, tr.DeliveryTag)
	}
	a.frame(frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: *tr.DeliveryID, Settled: true, State: frames.Accepted{}}, nil)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if msgs, _, _ := sqState(b); len(msgs) != 2 {
			return fmt.Errorf("sq holds %v, want m0 completed", msgs)
		}
		return nil
	})
}

// TestLinkResumeSessionWindow: past the session lock's expiry there is nothing to
// resume: the re-attach accepts the session afresh, lists nothing, and the messages
// come back with their expired locks counted as deliveries.
func TestLinkResumeSessionWindow(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	srv, b, addr := testServer(t, func(c *Config) { c.Clock = clk })
	sendSession(t, addr)
	a := dialRaw(t, addr)
	a.open()
	a.begin()
	if _, d := a.sessionAttach(0, "sres", nil); d != nil {
		t.Fatalf("fresh session link refused: %v", d.Error)
	}
	got := a.receive3(0)
	_, holder, _ := sqState(b)
	a.nc.Close()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if suspendedCount(srv) == 0 {
			return fmt.Errorf("the dropped link is not remembered yet")
		}
		return nil
	})
	clk.Advance(31 * time.Second) // past sq's 30 s lock duration

	bc := dialRaw(t, addr)
	bc.open()
	bc.begin()
	reply, d := bc.sessionAttach(0, "sres", encoding.Map{{Key: got["m0"].DeliveryTag, Value: nil}})
	if d != nil || len(reply.Unsettled) != 0 {
		t.Fatalf("re-attach after the window: detach %v, unsettled %v, want a fresh accept", d, reply.Unsettled)
	}
	if _, h, _ := sqState(b); h == "" || h == holder {
		t.Fatalf("session held by %q after the window, want the new connection (not %q)", h, holder)
	}
	again := bc.receive3(0)
	for body, tr := range again {
		if tr.Resume || bytes.Equal(tr.DeliveryTag, got[body].DeliveryTag) {
			t.Fatalf("%s came back resumed (tag %x) after the window", body, tr.DeliveryTag)
		}
	}
	msgs, _, _ := sqState(b)
	for _, body := range []string{"m0", "m1", "m2"} {
		if !strings.HasSuffix(msgs[body], " count=2") {
			t.Fatalf("sq holds %v, want each delivered twice", msgs)
		}
	}
}

// TestLinkResumeSessionMismatch: a re-attach whose unsettled map names none of the
// suspended link's deliveries does not resume: the broker does what a session
// receiver's detach does (releases the deliveries without counting them and the
// session lock), and the attach accepts the session afresh.
func TestLinkResumeSessionMismatch(t *testing.T) {
	srv, b, addr := testServer(t, nil)
	sendSession(t, addr)
	a := dialRaw(t, addr)
	a.open()
	a.begin()
	if _, d := a.sessionAttach(0, "sres", nil); d != nil {
		t.Fatalf("fresh session link refused: %v", d.Error)
	}
	got := a.receive3(0)
	_, holder, _ := sqState(b)
	a.nc.Close()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if suspendedCount(srv) == 0 {
			return fmt.Errorf("the dropped link is not remembered yet")
		}
		return nil
	})

	bc := dialRaw(t, addr)
	bc.open()
	bc.begin()
	reply, d := bc.sessionAttach(0, "sres", encoding.Map{{Key: []byte("not-a-tag-of-it"), Value: nil}})
	if d != nil || len(reply.Unsettled) != 0 {
		t.Fatalf("mismatched re-attach: detach %v, unsettled %v, want a fresh accept", d, reply.Unsettled)
	}
	msgs, h, _ := sqState(b)
	if h == "" || h == holder {
		t.Fatalf("session held by %q, want the new connection (not %q)", h, holder)
	}
	if len(msgs) != 3 {
		t.Fatalf("sq holds %v, want all three", msgs)
	}
	for body, st := range msgs {
		if st != "token=0000 count=0" {
			t.Fatalf("%s is %s, want released without counting a delivery", body, st)
		}
	}
	again := bc.receive3(0)
	for body, tr := range again {
		if tr.Resume || bytes.Equal(tr.DeliveryTag, got[body].DeliveryTag) {
			t.Fatalf("%s came back resumed (tag %x)", body, tr.DeliveryTag)
		}
	}
}

// renewSessionLock sends renew-session-lock for the receiver link assoc over a
// $management link pair on handles h and h+1 of channel 0 and returns the status code.
func (rc *rawClient) renewSessionLock(h uint32, assoc string) int32 {
	rc.t.Helper()
	first := frames.RcvFirst
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "mgmt-snd", Handle: h, Role: frames.RoleSender,
		Target: &frames.Target{Address: "sq/$management"}, Source: &frames.Source{}}, nil)
	rc.waitFor(func(b frames.Body) bool { f, ok := b.(*frames.Flow); return ok && f.Handle != nil && *f.Handle == h })
	rc.frame(frames.TypeAMQP, 0, &frames.Attach{Name: "mgmt-rcv", Handle: h + 1, Role: frames.RoleReceiver, RcvSettleMode: &first,
		Source: &frames.Source{Address: "sq/$management"}, Target: &frames.Target{Address: "reply"}}, nil)
	rc.waitFor(func(b frames.Body) bool { a, ok := b.(*frames.Attach); return ok && a.Name == "mgmt-rcv" })
	rc.creditOn(h+1, 1)

	p := encoding.AppendDescriptor(nil, secProperties)
	p, lo := encoding.ListStart(p)
	p, _ = encoding.Append(p, uint64(1)) // message-id
	for range 3 {
		p = encoding.AppendNull(p)
	}
	p = encoding.AppendString(p, "reply") // reply-to
	p = encoding.ListEnd(p, lo, 5)
	p = encoding.AppendDescriptor(p, secAppProperties)
	p, mo := encoding.MapStart(p)
	for _, s := range []string{"operation", "com.microsoft:renew-session-lock", "associated-link-name", assoc} {
		p = encoding.AppendString(p, s)
	}
	p = encoding.MapEnd(p, mo, 4)
	p = append(p, amqpValue(encoding.Map{{Key: "session-id", Value: "s1"}})...)
	id := uint32(0)
	rc.frame(frames.TypeAMQP, 0, &frames.Transfer{Handle: h, DeliveryID: &id, DeliveryTag: []byte("renew"), Settled: true}, p)

	tr := rc.waitFor(func(b frames.Body) bool { t, ok := b.(*frames.Transfer); return ok && t.Handle == h+1 }).(*frames.Transfer)
	key := encoding.AppendString(nil, "statusCode")
	i := bytes.Index(tr.Payload, key)
	if i < 0 || len(tr.Payload) < i+len(key)+5 || tr.Payload[i+len(key)] != 0x71 {
		rc.t.Fatalf("response without an int statusCode: %x", tr.Payload)
	}
	v := tr.Payload[i+len(key)+1:]
	return int32(uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3]))
}
