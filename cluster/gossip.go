package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/partition/transport"
)

// Membership: hashicorp/memberlist says which nodes are alive and what they advertise.
// It suggests; the metadata group decides (placement and Raft membership change only
// through metadata commands proposed by its leader). Gossip packets travel over UDP on
// the cluster port's number, memberlist's streams over the cluster port's TCP mux
// (transport.TypeGossip), so a node needs one port number for everything.

// memberMeta is what each node gossips about itself (memberlist node metadata, at most
// memberlist.MetaMaxSize bytes).
type memberMeta struct {
	ID      string `json:"id"`
	Cluster string `json:"c"`           // advertised cluster address
	AMQP    string `json:"a,omitempty"` // client-facing AMQP address
	Admin   string `json:"h,omitempty"` // admin API address
	Zone    string `json:"z,omitempty"`
	// Formed: this node has metadata state (it is, or was, part of a formed cluster).
	// A forming node never bootstraps while any member says Formed.
	Formed bool   `json:"f,omitempty"`
	Inc    string `json:"i,omitempty"` // incarnation of the node's data directory
}

// member is a live node as gossip sees it.
type member struct {
	memberMeta
	State string // "alive" or "suspect"
}

type gossip struct {
	ml      *memberlist.Memberlist
	tr      *gossipTransport
	changed func()
	log     *slog.Logger // members joining, dying and leaving, at info

	mu    sync.Mutex
	self  memberMeta            // owner: mu; memberlist reads it through NodeMeta
	alive map[string]memberMeta // live members by name, from memberlist's events; owner: mu
}

func startGossip(mux *transport.Mux, self memberMeta, key []byte, acceptKeys [][]byte, changed func(), logger *log.Logger, events *slog.Logger) (*gossip, error) {
	g := &gossip{self: self, changed: changed, alive: map[string]memberMeta{}, log: events}
	tr, err := newGossipTransport(mux, self.Cluster)
	if err != nil {
		return nil, err
	}
	g.tr = tr
	mc := memberlist.DefaultLANConfig()
	mc.Name = self.ID
	mc.Transport = tr
	mc.Delegate = g
	mc.Events = g
	mc.Logger = logger
	mc.AdvertiseAddr = tr.advIP.String()
	mc.AdvertisePort = tr.advPort
	// With a key every packet and stream is AES-GCM sealed with it, and memberlist
	// drops what opens with no key of its keyring (GossipVerifyIncoming defaults to
	// true): the primary key, then the accepted ones.
	if len(key) > 0 {
		kr, err := memberlist.NewKeyring(acceptKeys, key)
		if err != nil {
			tr.Shutdown()
			return nil, fmt.Errorf("cluster: memberlist keyring: %w", err)
		}
		mc.Keyring = kr
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		return nil, fmt.Errorf("cluster: memberlist: %w", err)
	}
	g.ml = ml
	return g, nil
}

// join contacts the given cluster addresses; it succeeds once one of them answered.
func (g *gossip) join(addrs []string) error {
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

// members returns the live members (this node included), sorted by ID. It reads the
// copies taken in memberlist's event callbacks: the nodes memberlist.Members returns are
// its own, written while it gossips.
func (g *gossip) members() []member {
	g.mu.Lock()
	out := []member{{memberMeta: g.self, State: "alive"}}
	for name, m := range g.alive {
		if name != g.self.ID {
			out = append(out, member{memberMeta: m, State: "alive"})
		}
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// setFormed marks this node as part of a formed cluster and gossips it.
func (g *gossip) setFormed() {
	g.mu.Lock()
	was := g.self.Formed
	g.self.Formed = true
	g.mu.Unlock()
	if !was {
		_ = g.ml.UpdateNode(5 * time.Second)
	}
}

func (g *gossip) leave(timeout time.Duration) {
	_ = g.ml.Leave(timeout)
}

func (g *gossip) close() error {
	return g.ml.Shutdown()
}

// memberlist.Delegate.
func (g *gossip) NodeMeta(limit int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := json.Marshal(g.self)
	if len(b) > limit {
		return nil
	}
	return b
}
func (g *gossip) NotifyMsg([]byte)                           {}
func (g *gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *gossip) LocalState(join bool) []byte                { return nil }
func (g *gossip) MergeRemoteState(buf []byte, join bool)     {}

// memberlist.EventDelegate. The callbacks run while memberlist holds the node, so they
// copy what they need.
func (g *gossip) NotifyJoin(n *memberlist.Node)   { g.note(n, true) }
func (g *gossip) NotifyLeave(n *memberlist.Node)  { g.note(n, false) }
func (g *gossip) NotifyUpdate(n *memberlist.Node) { g.note(n, true) }

func (g *gossip) note(n *memberlist.Node, alive bool) {
	var m memberMeta
	ok := json.Unmarshal(n.Meta, &m) == nil && m.ID != ""
	g.mu.Lock()
	_, had := g.alive[n.Name]
	self := n.Name == g.self.ID
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
	g.changed()
}

// gossipTransport is memberlist's Transport: packets over UDP bound to the cluster port's
// host and number, streams over the cluster port's mux.
type gossipTransport struct {
	udp     *net.UDPConn
	layer   *transport.Layer
	advIP   net.IP
	advPort int

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	closing  chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func newGossipTransport(mux *transport.Mux, advertise string) (*gossipTransport, error) {
	bound := mux.Addr().(*net.TCPAddr)
	host, portStr, err := net.SplitHostPort(advertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: advertise address %q: %w", advertise, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("cluster: advertise address %q: bad port", advertise)
	}
	ip, err := resolveIP(host)
	if err != nil {
		return nil, fmt.Errorf("cluster: advertise address %q: %w", advertise, err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: bound.IP, Port: bound.Port})
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip UDP on %s: %w", bound, err)
	}
	layer, err := mux.Route(transport.TypeGossip, 0)
	if err != nil {
		udp.Close()
		return nil, err
	}
	t := &gossipTransport{udp: udp, layer: layer, advIP: ip, advPort: port,
		packetCh: make(chan *memberlist.Packet, 64), streamCh: make(chan net.Conn, 16),
		closing: make(chan struct{})}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
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

func (t *gossipTransport) readPackets() {
	defer t.wg.Done()
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

func (t *gossipTransport) acceptStreams() {
	defer t.wg.Done()
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

func (t *gossipTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.advIP, t.advPort, nil
}

func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

func (t *gossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.layer.Dial(raft.ServerAddress(addr), timeout)
}

func (t *gossipTransport) StreamCh() <-chan net.Conn { return t.streamCh }

func (t *gossipTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.closing)
		t.udp.Close()
		t.layer.Close()
		t.wg.Wait()
	})
	return nil
}

var _ memberlist.Transport = (*gossipTransport)(nil)
