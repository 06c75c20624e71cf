package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/test/harness"
)

// Link resume (AMQP 1.0 part 2 §2.6.13, docs/protocol.md §6.5) through a real node. No
// SDK resumes links (go-amqp never sends an unsettled map), so the receiver here is a
// bare AMQP client (rawamqp_test.go) that drops its connection with deliveries
// unsettled and re-attaches from a new connection with the same container-id and link
// name; the SDK sends the messages and checks what a user then sees.

// TestLinkResume: a peek-lock receiver whose connection drops, or that detaches without
// closing, keeps its deliveries. On the re-attach, an outcome listed in its unsettled
// map is applied, deliveries listed without one are resent with resume=true under their
// tags and completing them on the new link works; nothing is redelivered.
func TestLinkResume(t *testing.T) {
	e := newEnv(t)

	// The subtests run one after the other: each awaits the node's count of receiver
	// links, which other subtests' receivers would move.
	t.Run("Queue", func(t *testing.T) { resumeQueue(t, e, false) })
	t.Run("QueueDetached", func(t *testing.T) { resumeQueue(t, e, true) })
	t.Run("Session", func(t *testing.T) { resumeSession(t, e) })
}

// TestLinkResumeCluster: the same on a 3-node cluster, the client resuming on the node
// it was on while the queue's partition is led by another node.
func TestLinkResumeCluster(t *testing.T) {
	resumeQueue(t, newClusterEnv(t), false)
}

// resumeQueue drops the connection, or with detached detaches the link without closing
// it and re-attaches on the same connection.
func resumeQueue(t *testing.T, e *env, detached bool) {
	q := e.queue(t, "resume", nil) // LockDuration 60 s: nothing here waits for a lock to expire
	send(t, e.sender(t, q), body("m0"), body("m1"), body("m2"))
	container := name("resume-client")

	a := dialResume(t, e, container)
	a.attach(0, "rcv", q, "", nil)
	got := a.receive(0, 3)
	b, h := a, uint32(1)
	if detached {
		a.detach(0, false)
	} else {
		a.drop(e)
		b, h = dialResume(t, e, container), 0
	}
	// m0 is settled by the outcome the client lists; m1 and m2 are listed without one.
	theirs := b.attach(h, "rcv", q, "", mapOf(
		bin(got["m0"].tag), list(codeAccepted),
		bin(got["m1"].tag), null(),
		bin(got["m2"].tag), null()))
	if want := [][]byte{got["m1"].tag, got["m2"].tag}; !sameTags(theirs, want) {
		t.Fatalf("the node's unsettled map lists %x, want m1's and m2's tags %x", theirs, want)
	}
	resent := b.receive(h, 2)
	for _, m := range []string{"m1", "m2"} {
		d := resent[m]
		if !d.resume || !bytes.Equal(d.tag, got[m].tag) {
			t.Fatalf("%s sent again with resume=%v under tag %x, want resumed under %x", m, d.resume, d.tag, got[m].tag)
		}
		b.complete(d.id)
	}
	if left := bodies(peekAll(t, e.receiver(t, q, nil))); len(left) != 0 {
		t.Fatalf("after the resumed deliveries were completed the queue holds %v", left)
	}
	// Had the resume not kept them, the dropped deliveries would come back once their
	// locks expired, counted a second time; nothing is left to.
	expectNothing(t, e.receiver(t, q, nil), time.Second)
}

func resumeSession(t *testing.T, e *env) {
	q := e.queue(t, "resume-sess", sessionQueue(""))
	send(t, e.sender(t, q), sessMsg("s1", "m0"), sessMsg("s1", "m1"), sessMsg("s1", "m2"), sessMsg("s1", "m3"))
	container := name("resume-client")

	a := dialResume(t, e, container)
	a.attach(0, "srcv", q, "s1", nil)
	got := a.receive(0, 3) // m3 waits for more credit
	a.drop(e)

	// While the link is suspended the session is still the client's: the SDK cannot
	// take it. (An isolated client: the refused link closes the SDK's connection.)
	_, err := e.isolated(t).c.AcceptSessionForQueue(testCtx(t), q, "s1", nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:session-cannot-be-locked" {
		t.Fatalf("AcceptSession during the suspension: %v, want com.microsoft:session-cannot-be-locked", err)
	}

	b := dialResume(t, e, container)
	theirs := b.attach(0, "srcv", q, "s1", mapOf(
		bin(got["m0"].tag), list(codeAccepted),
		bin(got["m1"].tag), null(),
		bin(got["m2"].tag), null()))
	if want := [][]byte{got["m1"].tag, got["m2"].tag}; !sameTags(theirs, want) {
		t.Fatalf("the node's unsettled map lists %x, want m1's and m2's tags %x", theirs, want)
	}
	// The resumed deliveries come first, in their order, then the session's next message.
	order := b.receiveInOrder(0, 3)
	for i, m := range []string{"m1", "m2", "m3"} {
		d := order[i]
		if d.body != m {
			t.Fatalf("delivery %d after the resume is %s, want %s (order %v)", i, d.body, m, order)
		}
		if resumed := m != "m3"; d.resume != resumed || resumed && !bytes.Equal(d.tag, got[m].tag) {
			t.Fatalf("%s sent with resume=%v under tag %x, want resume=%v (tag before the drop %x)", m, d.resume, d.tag, resumed, got[m].tag)
		}
		b.complete(d.id)
	}
	// Closing the link frees the session: the SDK takes it and finds nothing left.
	b.detach(0, true)
	r := e.accept(t, q, "s1")
	if left := bodies(peekAll(t, r)); len(left) != 0 {
		t.Fatalf("after completing on the resumed link session s1 holds %v", left)
	}
	expectNothing(t, r, time.Second)
}

// resumeConn is a bare client holding receiver links, one session (channel 0).
type resumeConn struct {
	*rawConn
	credit map[uint32]uint32 // delivery-count by handle, as the client tracks it
	nextIn uint32            // next incoming transfer id
}

// delivery is a transfer as the test reads it.
type delivery struct {
	id     uint32
	tag    []byte
	body   string
	resume bool
}

func (d delivery) String() string { return fmt.Sprintf("%s(resume=%v)", d.body, d.resume) }

func dialResume(t *testing.T, e *env, container string) *resumeConn {
	t.Helper()
	c := &resumeConn{rawConn: dialRaw(t, e.n.AMQP, e.n.ConnectionString, container), credit: map[uint32]uint32{}}
	c.frame(0, list(codeBegin, null(), u32(0), u32(1000), u32(1000)), nil)
	c.expect(codeBegin)
	return c
}

// attach attaches a peek-lock receiver (rcv-settle first) named linkName on handle h
// for q, for session when it is not "", with unsettled as its unsettled map (nil: none).
// It returns the tags of the node's unsettled map.
func (c *resumeConn) attach(h uint32, linkName, q, session string, unsettled []byte) [][]byte {
	c.t.Helper()
	src := list(codeSource, str(q))
	if session != "" {
		src = list(codeSource, str(q), null(), null(), null(), null(), null(), null(),
			mapOf(sym("com.microsoft:session-filter"), u64Described(0x00000137000000C, str(session))))
	}
	if unsettled == nil {
		unsettled = null()
	}
	c.frame(0, list(codeAttach, str(linkName), u32(h), boolean(true), ubyte(0), ubyte(0), src, list(codeTarget), unsettled), nil)
	f := c.expect(codeAttach)
	if len(f) < 6 || f[5] == nil {
		c.t.Fatalf("attach of %s refused: %v", linkName, f)
	}
	if len(f) > 9 {
		if n, ok := f[9].(uint32); ok {
			c.credit[h] = n
		}
	}
	var tags [][]byte
	if len(f) > 7 {
		m, _ := f[7].(amqpMap)
		for i := 0; i+1 < len(m); i += 2 {
			tag, _ := m[i].([]byte)
			tags = append(tags, tag)
		}
	}
	return tags
}

// receiveInOrder grants n credit on h and returns the n deliveries in the order sent.
func (c *resumeConn) receiveInOrder(h, n uint32) []delivery {
	c.t.Helper()
	c.frame(0, list(codeFlow, u32(c.nextIn), u32(1000), u32(0), u32(1000), u32(h), u32(c.credit[h]), u32(n)), nil)
	var out []delivery
	for uint32(len(out)) < n {
		f, payload := c.expectFrame(codeTransfer)
		if f[0] != h {
			continue
		}
		c.nextIn++
		c.credit[h]++
		d := delivery{id: f[1].(uint32)}
		d.tag, _ = f[2].([]byte)
		if len(f) > 8 {
			d.resume, _ = f[8].(bool)
		}
		for _, m := range []string{"m0", "m1", "m2", "m3"} {
			if bytes.Contains(payload, []byte(m)) {
				d.body = m
			}
		}
		out = append(out, d)
	}
	return out
}

// receive is receiveInOrder by body.
func (c *resumeConn) receive(h, n uint32) map[string]delivery {
	c.t.Helper()
	out := map[string]delivery{}
	for _, d := range c.receiveInOrder(h, n) {
		out[d.body] = d
	}
	return out
}

// complete accepts delivery id, unsettled, and waits for the node's settled answer.
func (c *resumeConn) complete(id uint32) {
	c.t.Helper()
	c.frame(0, list(codeDisposition, boolean(true), u32(id), null(), boolean(false), list(codeAccepted)), nil)
	for {
		f := c.expect(codeDisposition)
		if f[0] != false {
			continue
		}
		first, _ := f[1].(uint32)
		last := first
		if len(f) > 2 {
			if l, ok := f[2].(uint32); ok {
				last = l
			}
		}
		if first <= id && id <= last {
			if st := stateOf(f); st.code != codeAccepted {
				c.t.Fatalf("complete of delivery %d answered %v", id, st)
			}
			return
		}
	}
}

// detach detaches link h, closing it or not, and waits for the node's detach.
func (c *resumeConn) detach(h uint32, closed bool) {
	c.t.Helper()
	c.frame(0, list(codeDetach, u32(h), boolean(closed)), nil)
	for {
		code, f, _ := c.next()
		if code == codeDetach && f[0] == h {
			if len(f) > 2 && f[2] != nil {
				c.t.Fatalf("the node detached link %d with error %v", h, f[2])
			}
			return
		}
	}
}

// drop closes the connection without detaching or closing anything, and waits until
// the node has dropped its links (its count of receiver links falls): they are then
// suspended, if resumable.
func (c *resumeConn) drop(e *env) {
	c.t.Helper()
	before := receiverLinks(c.t, e.n)
	c.nc.Close()
	harness.WaitFor(c.t, 20*time.Second, func() error {
		if n := receiverLinks(c.t, e.n); n >= before {
			return fmt.Errorf("the node counts %v receiver links, %v before the drop", n, before)
		}
		return nil
	})
}

var receiverLinksRE = regexp.MustCompile(`(?m)^quorumbus_amqp_links\{role="receiver"\} (\S+)$`)

// receiverLinks is the node's count of attached receiver links (its /metrics).
func receiverLinks(t *testing.T, n *harness.Node) float64 {
	t.Helper()
	b := scrape(t, n)
	m := receiverLinksRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no receiver link count:\n%s", b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameTags reports whether got lists exactly the tags of want, in any order.
func sameTags(got, want [][]byte) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || bytes.Equal(g, w)
		}
		if !found {
			return false
		}
	}
	return true
}
