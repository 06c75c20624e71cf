package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Meta is what each node gossips about itself (memberlist node metadata, at most
// memberlist.MetaMaxSize bytes). Its JSON is the wire: nodes of different releases read
// each other's, so fields are only added, with new short names.
type Meta struct {
	ID      string `json:"id"`
	Cluster string `json:"c"`           // advertised cluster address
	AMQP    string `json:"a,omitempty"` // client-facing AMQP address
	Admin   string `json:"h,omitempty"` // admin API address
	Zone    string `json:"z,omitempty"`
	// Formed: this node has metadata state (it is, or was, part of a formed cluster).
	// A forming node never bootstraps while any member says Formed.
	Formed bool   `json:"f,omitempty"`
	Inc    string `json:"i,omitempty"` // incarnation of the node's data directory
	// Stopping: the node is stopping gracefully (SIGTERM) and hands its leaderships
	// over; no other node hands a leadership to it. Older releases ignore the field.
	Stopping bool `json:"s,omitempty"`
	// Level is the newest replicated-data feature this node's release reads: a leader
	// proposes an entry of a newer kind only when every replica's node advertises it,
	// so that no replica of an older release (a rolling upgrade) skips it. Older
	// releases gossip none (0).
	Level int `json:"l,omitempty"`
}

// Member is a live node as gossip sees it.
type Member struct {
	Meta
	State string // "alive" or "suspect"
}

// Streams is the stream layer memberlist's streams travel over: a listener of the
// cluster port's mux and a dialer to the same layer on other nodes.
type Streams interface {
	Accept() (net.Conn, error)
	Dial(addr string, timeout time.Duration) (net.Conn, error)
	Close() error
}

// Config is what Start needs. Self, Bind and Streams are required.
type Config struct {
	Self    Meta         // this node; Self.Cluster is the address others reach it at
	Bind    *net.UDPAddr // where gossip packets are received: the cluster port's host and number
	Streams Streams      // closed by Close
	// Key, when set, seals every packet and stream (AES-GCM); AcceptKeys are also
	// accepted from others (key rotation).
	Key        []byte
	AcceptKeys [][]byte
	// Changed is called, on memberlist's event goroutine, after a member joined, left,
	// died or changed what it advertises; it must not block. Nil: not called.
	Changed func()
	// Gone is called, on memberlist's event goroutine, with what a member last
	// advertised when it dies or leaves, and the live members' IDs after; it must not
	// block. Nil: not called.
	Gone   func(gone Meta, alive map[string]bool)
	Logger *log.Logger  // memberlist's own lines; nil: discarded
	Events *slog.Logger // members joining, dying and leaving, at info; nil: slog.Default()
}

// Gossip is this node's membership.
type Gossip struct {
	ml      *memberlist.Memberlist
	tr      *transport
	changed func()
	gone    func(Meta, map[string]bool)
	log     *slog.Logger

	mu    sync.Mutex
	self  Meta            // owner: mu; memberlist reads it through NodeMeta
	alive map[string]Meta // live members by name, from memberlist's events; owner: mu
	seen  map[string]Meta // the last meta of every member seen since Start, gone ones too; owner: mu
}

// Start starts gossiping as c.Self; Join then contacts other nodes.
func Start(c Config) (*Gossip, error) {
	g := &Gossip{self: c.Self, changed: c.Changed, alive: map[string]Meta{}, seen: map[string]Meta{}, log: c.Events}
	if g.changed == nil {
		g.changed = func() {}
	}
	g.gone = c.Gone
	if g.log == nil {
		g.log = slog.Default()
	}
	tr, err := newTransport(c.Bind, c.Streams, c.Self.Cluster)
	if err != nil {
		c.Streams.Close()
		return nil, err
	}
	g.tr = tr
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.Self.ID
	mc.Transport = tr
	mc.Delegate = g
	mc.Events = g
	mc.Logger = c.Logger
	if mc.Logger == nil {
		mc.Logger = log.New(io.Discard, "", 0)
	}
	mc.AdvertiseAddr = tr.advIP.String()
	mc.AdvertisePort = tr.advPort
	// With a key every packet and stream is AES-GCM sealed with it, and memberlist
	// drops what opens with no key of its keyring (GossipVerifyIncoming defaults to
	// true): the primary key, then the accepted ones.
	if len(c.Key) > 0 {
		kr, err := memberlist.NewKeyring(c.AcceptKeys, c.Key)
		if err != nil {
			tr.Shutdown()
			return nil, fmt.Errorf("gossip: memberlist keyring: %w", err)
		}
		mc.Keyring = kr
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		return nil, fmt.Errorf("gossip: memberlist: %w", err)
	}
	g.ml = ml
	return g, nil
}

// Join contacts the given cluster addresses; it succeeds once one of them answered.
func (g *Gossip) Join(addrs []string) error {
	if len(addrs) == 0 {
		return nil
	}
	n, err := g.ml.Join(addrs)
	if n > 0 {
		return nil
	}
	if err == nil {
		err = errors.New("no node answered")
	}
	return err
}

// Members returns the live members (this node included), sorted by ID. It reads the
// copies taken in memberlist's event callbacks: the nodes memberlist.Members returns are
// its own, written while it gossips.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	out := []Member{{Meta: g.self, State: "alive"}}
	for name, m := range g.alive {
		if name != g.self.ID {
			out = append(out, Member{Meta: m, State: "alive"})
		}
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Alive is the set of live members' IDs, this node included.
func (g *Gossip) Alive() map[string]bool {
	alive := map[string]bool{}
	for _, m := range g.Members() {
		alive[m.ID] = true
	}
	return alive
}

// Member returns the live member id (this node included), if gossip sees it.
func (g *Gossip) Member(id string) (Member, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id == g.self.ID {
		return Member{Meta: g.self, State: "alive"}, true
	}
	m, ok := g.alive[id]
	return Member{Meta: m, State: "alive"}, ok
}

// LastSeen returns what member id last advertised (this node: what it advertises now),
// alive or not, if gossip has seen it since Start.
func (g *Gossip) LastSeen(id string) (Meta, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id == g.self.ID {
		return g.self, true
	}
	m, ok := g.seen[id]
	return m, ok
}

// KeepJoined contacts addrs() (resolved again on every try) until gossip reaches one of
// them, with backoff, and again whenever this node sees no peer (a whole cluster
// restarted with new addresses finds itself again), until ctx ends.
func (g *Gossip) KeepJoined(ctx context.Context, addrs func() []string) {
	backoff := 100 * time.Millisecond
	joined := false
	for {
		if !joined || len(g.Members()) <= 1 {
			if err := g.Join(addrs()); err != nil {
				g.log.Debug("join", "addrs", addrs(), "err", err)
				joined = false
			} else {
				if !joined {
					g.log.Info("joined the cluster's gossip", "via", addrs())
				}
				joined = true
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !joined {
			backoff = min(backoff*2, 5*time.Second)
		} else {
			backoff = 5 * time.Second
		}
	}
}

// HealthScore is memberlist's awareness score: 0 when this node keeps up with its
// probes, higher when it is slow to answer them (overloaded, or its network is).
func (g *Gossip) HealthScore() int { return g.ml.GetHealthScore() }

// SetFormed marks this node as part of a formed cluster and gossips it.
func (g *Gossip) SetFormed() {
	g.mu.Lock()
	was := g.self.Formed
	g.self.Formed = true
	g.mu.Unlock()
	if !was {
		_ = g.ml.UpdateNode(5 * time.Second)
	}
}

// SetStopping marks this node as stopping and gossips it, waiting at most timeout for
// the news to leave this node: the others then hand no leadership to it.
func (g *Gossip) SetStopping(timeout time.Duration) {
	g.mu.Lock()
	was := g.self.Stopping
	g.self.Stopping = true
	g.mu.Unlock()
	if !was {
		_ = g.ml.UpdateNode(timeout)
	}
}

// Leave tells the other nodes this one leaves, waiting at most timeout for the news to
// spread.
func (g *Gossip) Leave(timeout time.Duration) {
	_ = g.ml.Leave(timeout)
}

// Close stops gossiping at once, and the transport with it.
func (g *Gossip) Close() error {
	return g.ml.Shutdown()
}

// memberlist.Delegate.
func (g *Gossip) NodeMeta(limit int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := json.Marshal(g.self)
	if len(b) > limit {
		return nil
	}
	return b
}
func (g *Gossip) NotifyMsg([]byte)                           {}
func (g *Gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *Gossip) LocalState(join bool) []byte                { return nil }
func (g *Gossip) MergeRemoteState(buf []byte, join bool)     {}

// memberlist.EventDelegate. The callbacks run while memberlist holds the node, so they
// copy what they need.
func (g *Gossip) NotifyJoin(n *memberlist.Node)   { g.note(n, true) }
func (g *Gossip) NotifyLeave(n *memberlist.Node)  { g.note(n, false) }
func (g *Gossip) NotifyUpdate(n *memberlist.Node) { g.note(n, true) }

func (g *Gossip) note(n *memberlist.Node, alive bool) {
	var m Meta
	ok := json.Unmarshal(n.Meta, &m) == nil && m.ID != ""
	g.mu.Lock()
	before, had := g.alive[n.Name]
	self := n.Name == g.self.ID
	if ok {
		g.seen[n.Name] = m
	}
	if alive && ok {
		g.alive[n.Name] = m
	} else {
		delete(g.alive, n.Name)
	}
	g.mu.Unlock()
	switch {
	case self:
	case alive && ok && !had:
		g.log.Info("member joined", "node", n.Name, "addr", n.Address(), "zone", m.Zone)
	case !alive && n.State == memberlist.StateLeft:
		g.log.Info("member left", "node", n.Name, "addr", n.Address())
	case !alive:
		g.log.Info("member died", "node", n.Name, "addr", n.Address(), "why", "no answer to gossip probes")
	}
	if !alive && had && !self && g.gone != nil {
		g.gone(before, g.Alive())
	}
	g.changed()
}

// transport is memberlist's Transport: packets over UDP bound to the cluster port's
// host and number, streams over the cluster port's mux.
type transport struct {
	udp     *net.UDPConn
	layer   Streams
	advIP   net.IP
	advPort int

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	closing  chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func newTransport(bind *net.UDPAddr, layer Streams, advertise string) (*transport, error) {
	host, portStr, err := net.SplitHostPort(advertise)
	if err != nil {
		return nil, fmt.Errorf("gossip: advertise address %q: %w", advertise, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("gossip: advertise address %q: bad port", advertise)
	}
	ip, err := resolveIP(host)
	if err != nil {
		return nil, fmt.Errorf("gossip: advertise address %q: %w", advertise, err)
	}
	udp, err := net.ListenUDP("udp", bind)
	if err != nil {
		return nil, fmt.Errorf("gossip: UDP on %s: %w", bind, err)
	}
	t := &transport{udp: udp, layer: layer, advIP: ip, advPort: port,
		packetCh: make(chan *memberlist.Packet, 64), streamCh: make(chan net.Conn, 16),
		closing: make(chan struct{})}
	t.wg.Go(t.readPackets)
	t.wg.Go(t.acceptStreams)
	return t, nil
}

// resolveIP turns a host (name or literal) into one IP, preferring IPv4.
func resolveIP(host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	return ips[0], nil
}

func (t *transport) readPackets() {
	buf := make([]byte, 65536)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		ts := time.Now()
		if err != nil {
			select {
			case <-t.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n == 0 {
			continue
		}
		select {
		case t.packetCh <- &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: from, Timestamp: ts}:
		case <-t.closing:
			return
		}
	}
}

func (t *transport) acceptStreams() {
	for {
		c, err := t.layer.Accept()
		if err != nil {
			return
		}
		select {
		case t.streamCh <- c:
		case <-t.closing:
			c.Close()
			return
		}
	}
}

func (t *transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.advIP, t.advPort, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.layer.Dial(addr, timeout)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

func (t *transport) Shutdown() error {
	t.once.Do(func() {
		close(t.closing)
		t.udp.Close()
		t.layer.Close()
		t.wg.Wait()
	})
	return nil
}

var _ memberlist.Transport = (*transport)(nil)
