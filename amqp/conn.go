package amqp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
	"github.com/quorumbus/quorumbus/internal/sas"
)

// inFrame is what the reader goroutine hands to the owner.
type inFrame struct {
	typ     uint8
	channel uint16
	body    frames.Body // nil for a heartbeat
	err     error
}

// conn is one AMQP connection. Goroutines (P2/P4/P5):
//   - run (the owner) does the handshake, then owns every field marked
//     "owner" and all sessions and links;
//   - reader parses frames and sends them on in;
//   - writer drains out to the socket;
//   - Backend calls run in goFunc goroutines and report back through post.
//
// All are tracked by wg; cancel stops them and run waits for them.
type conn struct {
	s   *Server
	cfg *Config
	b   Backend
	nc  net.Conn
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	in      chan []inFrame // reader -> owner, in batches of what was already buffered
	results chan func()    // backend goroutines -> owner
	wdone   chan struct{}  // closed when the writer exits

	// Outgoing bytes: the owner appends encoded frames, the writer swaps the
	// buffer out and writes it with one syscall. wmu guards wbuf and wclosed.
	wmu      sync.Mutex
	wbuf     []byte
	wclosed  bool
	wsig     chan struct{} // cap 1: "wbuf has data or wclosed"
	wdrained chan struct{} // cap 1: "the writer emptied wbuf"

	// Bytes queued for the client (outbytes.go; MaxConnOutgoing): queued is
	// updated by the owner, the writer and goFunc goroutines; roomCh (guarded by
	// roomMu) is closed when queued falls under the bound while roomWaiters wait.
	queued      atomic.Int64
	roomMu      sync.Mutex
	roomCh      chan struct{}
	roomWaiters atomic.Int32
	rpcOutMu    sync.Mutex // held by an RPC goroutine while it encodes its response and waits for room

	// owner fields
	peerMaxFrame    uint32
	peerIdle        time.Duration
	hostname        string
	remoteContainer string              // the client's container-id (link resume keys on it)
	sessions        map[uint16]*session // by remote channel
	localChannels   map[uint16]*session
	linksByName     map[linkKey]*link
	replyLinks      map[string]*link    // RPC reply links by target address
	pendingReplies  map[string][][]byte // responses waiting for their reply link
	claims          []claim
	loginRights     Rights      // from SASL PLAIN
	login           plainLogin  // the SASL PLAIN credentials, rechecked like tokens (recheckClaims)
	authenticated   bool        // a token was accepted or SASL PLAIN succeeded
	opened          time.Time   // for UnauthenticatedTimeout
	linkCount       int         // links over all sessions (MaxLinksPerConnection)
	lastRecheck     time.Time   // when the claims were last checked against the rules
	rechecking      bool        // a recheckClaims is running
	overLimit       bool        // MaxConnections was reached: refuse after open (set before run)
	settleQueue     []settleJob // dispositions of the current reader batch
	pendingWrite    bool        // frames queued since the writer was last woken
	ackSessions     []*session  // sessions with accepted deliveries to confirm (flushAcks)
	connCredit      int         // credit granted plus deliveries in flight, over all client senders
	buffered        int64       // bytes of incomplete incoming deliveries (Config.MaxConnBuffered)
	unsettled       int         // counted peek-lock deliveries awaiting the client's outcome, over all links (MaxUnsettledPerConn)
	recvReserved    int         // Max of the peek-lock Backend.Receive calls in flight: they may all become unsettled
	connStalled     bool        // a receiver stopped at MaxUnsettledPerConn
	repump          bool        // the connection went back under MaxUnsettledPerConn: pump every receiver (loop)
	outStalled      bool        // a receiver or RPC link stopped at MaxConnOutgoing (outResume)
	outNeed         int64       // the bytes the largest of them needs
	closeSent       bool
	txns            map[string]*txn // declared transactions by txn-id (txn.go); created on first declare
	txnBytes        int             // message bytes buffered in txns
}

type linkKey struct {
	name string
	role frames.Role
}

func newConn(s *Server, nc net.Conn) *conn {
	// Every Backend call derives its ctx from c.ctx, so each carries the connection's
	// identity (ConnectionID: the session-lock holder).
	id := newConnectionID()
	ctx, cancel := context.WithCancel(WithConnectionID(s.ctx, id))
	now := s.cfg.now()
	return &conn{
		opened:      now,
		lastRecheck: now,
		s:           s, cfg: s.cfg, b: s.backend, nc: nc,
		log:            s.log.With("remote", nc.RemoteAddr().String(), "conn", id),
		ctx:            ctx,
		cancel:         cancel,
		in:             make(chan []inFrame, 2),
		results:        make(chan func(), 256),
		wdone:          make(chan struct{}),
		wsig:           make(chan struct{}, 1),
		wdrained:       make(chan struct{}, 1),
		sessions:       map[uint16]*session{},
		localChannels:  map[uint16]*session{},
		linksByName:    map[linkKey]*link{},
		replyLinks:     map[string]*link{},
		pendingReplies: map[string][][]byte{},
	}
}

// goFunc runs f in a tracked goroutine.
func (c *conn) goFunc(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// post hands f to the owner goroutine; it is dropped once the connection ends.
func (c *conn) post(f func()) {
	select {
	case c.results <- f:
	case <-c.ctx.Done():
	}
}

func (c *conn) now() time.Time { return c.cfg.now() }

// run serves the connection until it ends.
func (c *conn) run() {
	defer func() {
		c.cancel()
		c.nc.Close()
		c.wg.Wait()
		c.s.stats.outQueued.Add(-c.queued.Load()) // never written
	}()
	br := frames.NewReader(c.nc, c.cfg.MaxFrameSize)
	if err := c.handshake(br); err != nil {
		c.log.Info("amqp: connection refused at handshake", "err", err)
		return
	}
	c.goFunc(func() { c.reader(br) })
	c.goFunc(c.writer)
	if c.overLimit {
		c.log.Info("amqp: connection refused: too many connections", "max", c.cfg.MaxConnections)
		c.writeDirect(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Close{Error: newError(condResourceLimit,
			fmt.Sprintf("This node serves at most %d connections; try again later or another node.", c.cfg.MaxConnections),
			c.cfg.Namespace, c.now())}, nil))
		return
	}
	err := c.loop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.log.Debug("connection ended", "err", err)
	}
	c.shutdownSessions()
	c.wmu.Lock()
	c.wclosed = true
	c.wmu.Unlock()
	c.signal(c.wsig)
	select {
	case <-c.wdone:
	case <-time.After(time.Second):
	}
}

// handshake runs protocol headers, SASL and open (part 2 §2.2, part 5 §5.3).
func (c *conn) handshake(br *frames.Reader) error {
	_ = c.nc.SetDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	stop := context.AfterFunc(c.ctx, func() { c.nc.Close() })
	defer stop()

	h, err := br.ReadProtoHeader()
	if err != nil {
		return err
	}
	switch h {
	case frames.ProtoSASL:
		if _, err := c.nc.Write(frames.ProtoSASL[:]); err != nil {
			return err
		}
		if err := c.sasl(br); err != nil {
			return err
		}
		if h, err = br.ReadProtoHeader(); err != nil {
			return err
		}
		if h != frames.ProtoAMQP {
			_, _ = c.nc.Write(frames.ProtoAMQP[:])
			return fmt.Errorf("unexpected protocol header %q after SASL", h[:])
		}
	case frames.ProtoAMQP:
		// No SASL: anonymous; entity access then needs CBS.
	default:
		// Part 2 §2.2: answer with the header we support, then close.
		_, _ = c.nc.Write(frames.ProtoSASL[:])
		return fmt.Errorf("unsupported protocol header %q", h[:])
	}
	if _, err := c.nc.Write(frames.ProtoAMQP[:]); err != nil {
		return err
	}
	fr, err := br.ReadFrame()
	if err != nil {
		return err
	}
	var body frames.Body
	if fr.Type == frames.TypeAMQP && len(fr.Body) > 0 {
		body, err = frames.Parse(fr.Body)
	}
	open, ok := body.(*frames.Open)
	if err != nil || !ok {
		c.writeDirect(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Open{ContainerID: c.cfg.ContainerID}, nil))
		c.writeDirect(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Close{Error: &frames.Error{
			Condition: condFramingError, Description: fmt.Sprintf("expected open, got %v (%v)", body, err)}}, nil))
		return fmt.Errorf("expected open: %v", err)
	}
	c.peerMaxFrame = min(max(open.MaxFrameSize, frames.MinMaxFrameSize), c.cfg.MaxFrameSize)
	c.peerIdle = open.IdleTimeout
	c.hostname = open.Hostname
	c.remoteContainer = open.ContainerID
	reply := &frames.Open{
		ContainerID:  c.cfg.ContainerID,
		Hostname:     open.Hostname,
		MaxFrameSize: c.cfg.MaxFrameSize,
		ChannelMax:   min(c.cfg.ChannelMax, open.ChannelMax),
		IdleTimeout:  c.cfg.IdleTimeout,
	}
	return c.writeDirect(frames.AppendFrame(nil, frames.TypeAMQP, 0, reply, nil))
}

func (c *conn) writeDirect(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

// sasl is the SASL server exchange (part 5 §5.3.2).
func (c *conn) sasl(br *frames.Reader) error {
	mechs := &frames.SASLMechanisms{Mechanisms: []Symbol{"MSSBCBS", "PLAIN", "ANONYMOUS"}}
	if err := c.writeDirect(frames.AppendFrame(nil, frames.TypeSASL, 0, mechs, nil)); err != nil {
		return err
	}
	fr, err := br.ReadFrame()
	if err != nil {
		return err
	}
	if fr.Type != frames.TypeSASL || len(fr.Body) == 0 {
		return errors.New("expected sasl-init")
	}
	body, err := frames.Parse(fr.Body)
	if err != nil {
		return err
	}
	init, ok := body.(*frames.SASLInit)
	if !ok {
		return fmt.Errorf("expected sasl-init, got %v", body)
	}
	code := frames.SASLOK
	switch init.Mechanism {
	case "ANONYMOUS", "MSSBCBS":
	case "PLAIN":
		login, rights, err := c.plainLogin(init.InitialResponse)
		if err != nil {
			code = frames.SASLAuth
		} else {
			c.login, c.loginRights = login, rights
			c.authenticated = true
		}
	default:
		code = frames.SASLAuth
	}
	if err := c.writeDirect(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLOutcome{Code: code}, nil)); err != nil {
		return err
	}
	if code != frames.SASLOK {
		return fmt.Errorf("sasl %s failed", init.Mechanism)
	}
	return nil
}

// plainLogin is what a SASL PLAIN login presented: a key name and a key.
type plainLogin struct {
	keyName, key string
}

// plainLogin checks "authzid NUL authcid NUL passwd" where authcid is a key
// name and passwd the key (as real Service Bus accepts).
func (c *conn) plainLogin(resp []byte) (plainLogin, Rights, error) {
	parts := strings.SplitN(string(resp), "\x00", 3)
	if len(parts) != 3 {
		return plainLogin{}, 0, ErrUnauthorized
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.HandshakeTimeout)
	defer cancel()
	login := plainLogin{keyName: parts[1], key: parts[2]}
	rights, err := login.check(ctx, c.b)
	if err != nil {
		return plainLogin{}, 0, err
	}
	return login, rights, nil
}

// check returns the rights the login has under the keys the Backend holds now:
// ErrUnauthorized when the key name is unknown or neither of its keys matches.
// Another Backend error is returned as it is.
func (p plainLogin) check(ctx context.Context, b Backend) (Rights, error) {
	k, err := b.SASKey(ctx, p.keyName)
	if errors.Is(err, ErrNotFound) {
		return 0, ErrUnauthorized
	}
	if err != nil {
		return 0, err
	}
	primary := subtle.ConstantTimeCompare([]byte(k.Key), []byte(p.key))
	secondary := subtle.ConstantTimeCompare([]byte(k.SecondaryKey), []byte(p.key))
	if primary != 1 && (k.SecondaryKey == "" || secondary != 1) { // either key, as for tokens (rotation)
		return 0, ErrUnauthorized
	}
	return k.Rights, nil
}

// reader parses frames and hands them to the owner, batching the frames
// that are already buffered so the owner wakes once per read syscall.
func (c *conn) reader(br *frames.Reader) {
	var lastDeadline time.Time
	batch := make([]inFrame, 0, 16)
	batchBytes := 0
	for {
		if c.cfg.IdleTimeout > 0 {
			// Refreshing the deadline on every frame costs; refreshing
			// after a quarter of the timeout keeps at least 3/4 of it.
			if now := time.Now(); now.Sub(lastDeadline) > c.cfg.IdleTimeout/4 {
				_ = c.nc.SetReadDeadline(now.Add(c.cfg.IdleTimeout))
				lastDeadline = now
			}
		}
		fr, err := br.ReadFrame()
		var f inFrame
		if err != nil {
			f.err = err
		} else {
			f.typ, f.channel = fr.Type, fr.Channel
			if len(fr.Body) > 0 {
				f.body, f.err = frames.Parse(fr.Body)
			}
		}
		batch = append(batch, f)
		batchBytes += len(fr.Body)
		if f.err == nil && len(batch) < 64 && batchBytes < maxBatchBytes && br.Buffered() >= frames.HeaderSize {
			continue
		}
		select {
		case c.in <- batch:
		case <-c.ctx.Done():
			return
		}
		if f.err != nil {
			return
		}
		batch = make([]inFrame, 0, 16)
		batchBytes = 0
	}
}

// maxBatchBytes bounds the frame bytes in one reader batch; with the in
// channel's capacity it bounds what a connection buffers ahead of its owner.
const maxBatchBytes = 256 << 10

func (c *conn) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// maxUnwritten bounds the bytes queued for a peer that does not read; the
// owner waits (and so stops reading) beyond it.
const maxUnwritten = 4 << 20

// writer writes whatever the owner queued, one syscall per swap.
func (c *conn) writer() {
	defer close(c.wdone)
	var spare []byte
	for {
		select {
		case <-c.wsig:
		case <-c.ctx.Done():
			return
		}
		c.wmu.Lock()
		b, closed := c.wbuf, c.wclosed
		c.wbuf = spare[:0]
		c.wmu.Unlock()
		if len(b) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
			if _, err := c.nc.Write(b); err != nil {
				c.cancel()
				return
			}
			c.addQueued(-int64(len(b)))
		}
		spare = b
		if cap(spare) > maxUnwritten {
			spare = nil
		}
		c.signal(c.wdrained)
		if closed {
			return
		}
	}
}

// kickWriter wakes the writer if frames were queued since the last kick.
// The owner kicks once per loop iteration, so frames produced together
// leave in one write.
func (c *conn) kickWriter() {
	if c.pendingWrite {
		c.pendingWrite = false
		c.signal(c.wsig)
	}
}

// send queues a frame for the writer. A nil body is an empty (heartbeat)
// frame.
func (c *conn) send(channel uint16, body frames.Body, payload []byte) {
	c.wmu.Lock()
	before := len(c.wbuf)
	c.wbuf = frames.AppendFrame(c.wbuf, frames.TypeAMQP, channel, body, payload)
	n := len(c.wbuf)
	c.wmu.Unlock()
	c.addQueued(int64(n - before))
	c.pendingWrite = true
	limit := min(maxUnwritten, int(c.cfg.MaxConnOutgoing))
	if n > limit/4 {
		c.kickWriter()
	}
	for n > limit {
		select {
		case <-c.wdrained:
		case <-c.ctx.Done():
			return
		}
		c.wmu.Lock()
		n = len(c.wbuf)
		c.wmu.Unlock()
	}
}

// errClose asks the loop to close the connection with an error.
type errClose struct{ e *frames.Error }

func (e *errClose) Error() string { return e.e.Error() }

func (c *conn) heartbeatInterval() time.Duration {
	iv := c.cfg.HeartbeatInterval
	if c.peerIdle > 0 && c.peerIdle/2 < iv {
		iv = c.peerIdle / 2
	}
	return max(iv, 50*time.Millisecond)
}

// loop is the owner loop.
func (c *conn) loop() error {
	hb := time.NewTicker(c.heartbeatInterval())
	defer hb.Stop()
	auth := time.NewTicker(c.cfg.AuthCheckInterval)
	defer auth.Stop()
	for {
		c.flushAcks()
		if c.repump {
			c.pumpAllLinks()
		}
		c.outResume()
		c.kickWriter()
		select {
		case batch := <-c.in:
			for _, f := range batch {
				err := f.err
				if err == nil {
					err = c.handleFrame(f)
				}
				if err != nil {
					// What the peer settled before its close (or before a bad
					// frame) still counts: settled=true dispositions are final
					// for the client, which will not send them again.
					c.flushSettles()
					c.closeWith(err)
					return err
				}
			}
			c.flushSettles()
		case fn := <-c.results:
			fn()
			// Run every result that is already waiting before waking the
			// writer, so their frames (e.g. send dispositions) share a syscall.
			for more := true; more; {
				select {
				case fn := <-c.results:
					fn()
				default:
					more = false
				}
			}
		case <-c.wdrained: // the writer made room: outResume may restart receivers
		case <-hb.C:
			c.send(0, nil, nil) // empty frame: heartbeat (part 2 §2.4.5)
		case <-auth.C:
			if err := c.checkAuth(); err != nil {
				c.closeWith(err)
				return err
			}
			c.txnTick()
			c.expireUnsettled()
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
}

// closeWith sends close with the error that ended the connection.
func (c *conn) closeWith(err error) {
	if c.closeSent {
		return
	}
	var e *frames.Error
	var ec *errClose
	var ne net.Error
	switch {
	case errors.As(err, &ec):
		e = ec.e
	case errors.Is(err, frames.ErrFrameTooLarge):
		e = newError(condFramingError, err.Error(), c.cfg.Namespace, c.now())
	case errors.Is(err, frames.ErrUnknown):
		e = newError(condNotImplemented, err.Error(), c.cfg.Namespace, c.now())
	case errors.Is(err, frames.ErrMalformed):
		e = newError(condDecodeError, err.Error(), c.cfg.Namespace, c.now())
	case errors.As(err, &ne) && ne.Timeout():
		e = newError(condResourceLimit, "idle timeout exceeded", c.cfg.Namespace, c.now())
	case errors.Is(err, errPeerClosed):
		e = nil
	default:
		return // socket gone
	}
	c.closeSent = true
	if e != nil { // every refusal is visible at the default level
		c.refused("amqp: closing connection with an error", e)
	}
	c.send(0, &frames.Close{Error: e}, nil)
}

var errPeerClosed = errors.New("peer closed the connection")

func (c *conn) handleFrame(f inFrame) error {
	if f.typ != frames.TypeAMQP {
		return &errClose{newError(condFramingError, "SASL frame after SASL completed", c.cfg.Namespace, c.now())}
	}
	if f.body == nil {
		return nil // heartbeat
	}
	switch b := f.body.(type) {
	case *frames.Begin:
		return c.handleBegin(f.channel, b)
	case *frames.Close:
		return errPeerClosed
	case *frames.Open:
		return &errClose{newError(condNotAllowed, "open received twice", c.cfg.Namespace, c.now())}
	}
	s := c.sessions[f.channel]
	if s == nil {
		return &errClose{newError(condFramingError, fmt.Sprintf("%v on channel %d without a session", f.body, f.channel), c.cfg.Namespace, c.now())}
	}
	var err error
	switch b := f.body.(type) {
	case *frames.Attach:
		err = s.handleAttach(b)
	case *frames.Flow:
		err = s.handleFlow(b)
	case *frames.Transfer:
		err = s.handleTransfer(b)
	case *frames.Disposition:
		s.handleDisposition(b)
	case *frames.Detach:
		s.handleDetach(b)
	case *frames.End:
		c.endSession(s, nil)
	default:
		return &errClose{newError(condFramingError, fmt.Sprintf("unexpected %v", f.body), c.cfg.Namespace, c.now())}
	}
	if se, ok := err.(*sessionError); ok {
		c.endSession(s, se.e)
		return nil
	}
	return err
}

// sessionError ends one session with an error.
type sessionError struct{ e *frames.Error }

func (e *sessionError) Error() string { return e.e.Error() }

func (c *conn) handleBegin(ch uint16, b *frames.Begin) error {
	if b.RemoteChannel != nil {
		return &errClose{newError(condNotAllowed, "the server does not begin sessions", c.cfg.Namespace, c.now())}
	}
	if c.sessions[ch] != nil {
		return &errClose{newError(condFramingError, fmt.Sprintf("channel %d already in use", ch), c.cfg.Namespace, c.now())}
	}
	if ch > c.cfg.ChannelMax || len(c.sessions) >= c.cfg.MaxSessions {
		return &errClose{newError(condResourceLimit, "too many sessions", c.cfg.Namespace, c.now())}
	}
	var local uint16
	for c.localChannels[local] != nil {
		local++
	}
	s := newSession(c, ch, local, b)
	c.sessions[ch] = s
	c.localChannels[local] = s
	rc := ch
	c.send(local, &frames.Begin{
		RemoteChannel:  &rc,
		NextOutgoingID: s.nextOutgoingID,
		IncomingWindow: s.incomingWindow,
		OutgoingWindow: c.cfg.SessionWindow,
		HandleMax:      uint32(c.cfg.MaxLinks - 1),
	}, nil)
	return nil
}

// endSession drops every link of s (without detach frames; part 2 §2.7.8)
// and sends end.
func (c *conn) endSession(s *session, e *frames.Error) {
	if c.sessions[s.remoteChannel] != s {
		return
	}
	for _, l := range s.links {
		l.suspend = e == nil // the client ended the session: its links may be resumed
		if release := s.dropLink(l, true); release != nil {
			c.goFunc(release)
		}
	}
	for _, d := range s.queue { // never framed
		c.addQueued(-int64(len(d.payload) - d.off))
	}
	s.queue = nil
	delete(c.sessions, s.remoteChannel)
	delete(c.localChannels, s.localChannel)
	if e != nil {
		c.refused("amqp: ending session with an error", e)
	}
	c.send(s.localChannel, &frames.End{Error: e}, nil)
}

func (c *conn) shutdownSessions() {
	for _, s := range c.sessions {
		for _, l := range s.links {
			l.suspend = true // the connection went: its links may be resumed
			s.dropLink(l, false)
		}
	}
}

// hasClaim reports whether the connection may use path with want rights.
func (c *conn) hasClaim(path string, want Rights) bool {
	if !c.cfg.RequireAuth || c.loginRights.Has(want) {
		return true
	}
	now := c.now()
	for _, cl := range c.claims {
		if !now.After(cl.expires) && cl.rights.Has(want) && sas.Covers(cl.path, path) {
			return true
		}
	}
	return false
}

func (c *conn) addClaim(cl claim) {
	c.authenticated = true
	now := c.now()
	kept := c.claims[:0]
	for _, old := range c.claims {
		if now.Before(old.expires) && !(old.path == cl.path && old.rights == cl.rights) {
			kept = append(kept, old)
		}
	}
	c.claims = append(kept, cl)
	if len(c.claims) > 4096 { // bound a hostile client's state
		c.claims = c.claims[len(c.claims)-4096:]
	}
}

// deliverReply routes an RPC response to the reply link for addr, or keeps
// it (bounded) until that link attaches or gets credit.
func (c *conn) deliverReply(addr string, msg []byte) {
	if l := c.replyLinks[addr]; l != nil && l.credit > 0 && len(c.pendingReplies[addr]) == 0 {
		l.s.sendDelivery(l, nil, msg, true)
		return
	}
	q := c.pendingReplies[addr]
	if len(q) >= c.cfg.MaxPendingReplies {
		c.addQueued(-int64(len(q[0])))
		q = q[1:]
	}
	if len(c.pendingReplies) >= c.cfg.MaxPendingReplies && q == nil {
		c.addQueued(-int64(len(msg)))
		return // too many distinct reply addresses; drop
	}
	c.pendingReplies[addr] = append(q, msg)
	if l := c.replyLinks[addr]; l != nil {
		c.flushReplies(l)
	}
}

func (c *conn) flushReplies(l *link) {
	addr := l.replyAddr
	q := c.pendingReplies[addr]
	for len(q) > 0 && l.credit > 0 {
		l.s.sendDelivery(l, nil, q[0], true)
		q = q[1:]
	}
	if len(q) == 0 {
		delete(c.pendingReplies, addr)
	} else {
		c.pendingReplies[addr] = q
	}
}
