package amqp

import (
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// Stats is a point-in-time view of the server for monitoring (cmd/quorumbus exports it
// to Prometheus; this package imports no metrics library). Links and credit are named
// from the client's side, as operators think of them.
type Stats struct {
	Connections int64 // open connections
	// SenderLinks are client senders (we receive on them), ReceiverLinks client
	// receivers, $management and $cbs links included.
	SenderLinks, ReceiverLinks int64
	// SenderCredit is the credit granted to client senders and not yet used;
	// ReceiverCredit the credit client receivers granted us that no delivery has used.
	SenderCredit, ReceiverCredit int64
	// Unsettled counts peek-lock deliveries sent to clients that await their outcome
	// (lock not expired); UnsettledStalls counts the times a receiver with credit got
	// nothing more because it or its connection held MaxUnsettledPerLink/PerConn.
	Unsettled       int64
	UnsettledStalls uint64
	// OutgoingQueued is the bytes held for clients and not yet written to their
	// sockets, over all connections; OutgoingQueuedPeak the most one connection
	// ever held (Config.MaxConnOutgoing bounds it); OutgoingStalls the times a
	// receiver or request link waited for a connection's writer to make room.
	OutgoingQueued     int64
	OutgoingQueuedPeak int64
	OutgoingStalls     uint64
	// Errors counts the AMQP errors sent to clients by condition ("amqp:not-found",
	// "com.microsoft:message-lock-lost", ...): link detaches, session ends, connection
	// closes, rejected deliveries and dispositions, and refused $management and $cbs
	// requests. The conditions are the package's fixed set, so the map stays small.
	Errors map[string]uint64
	// Entities are the attached entity links by entity path ("jobs",
	// "orders/Subscriptions/eu"; a dead-letter sub-queue counts on its entity), with the
	// connections they come over. Only entities with a link are present.
	Entities map[string]EntityLinks
}

// EntityLinks is the clients attached to one entity on this node.
type EntityLinks struct {
	// SenderLinks are client senders to the entity, ReceiverLinks client receivers.
	SenderLinks, ReceiverLinks int64
	// Connections is how many connections hold at least one of those links.
	Connections int64
}

// entityLinks is one entity's running totals: links by client role, and the links each
// connection holds.
type entityLinks struct {
	links [2]int64
	conns map[*conn]int
}

// serverStats is the server's running totals. Connection owner goroutines update
// them; Stats reads them from any goroutine.
type serverStats struct {
	conns  atomic.Int64
	links  [2]atomic.Int64 // by client role: 0 sender, 1 receiver
	credit [2]atomic.Int64
	// unsettled and stalls back Stats.Unsettled and Stats.UnsettledStalls.
	unsettled atomic.Int64
	stalls    atomic.Uint64
	// outQueued, outPeak and outStalls back the Outgoing* fields of Stats.
	outQueued atomic.Int64
	outPeak   atomic.Int64
	outStalls atomic.Uint64
	errMu     sync.Mutex
	errs      map[string]uint64 // owner: errMu
	// entities backs Stats.Entities, by entity path.
	entMu    sync.Mutex
	entities map[string]*entityLinks // owner: entMu
}

// Stats returns the server's current counts.
func (s *Server) Stats() Stats {
	st := &s.stats
	out := Stats{
		Connections:        st.conns.Load(),
		SenderLinks:        st.links[0].Load(),
		ReceiverLinks:      st.links[1].Load(),
		SenderCredit:       st.credit[0].Load(),
		ReceiverCredit:     st.credit[1].Load(),
		Unsettled:          st.unsettled.Load(),
		UnsettledStalls:    st.stalls.Load(),
		OutgoingQueued:     st.outQueued.Load(),
		OutgoingQueuedPeak: st.outPeak.Load(),
		OutgoingStalls:     st.outStalls.Load(),
	}
	st.errMu.Lock()
	out.Errors = maps.Clone(st.errs)
	st.errMu.Unlock()
	if out.Errors == nil {
		out.Errors = map[string]uint64{}
	}
	st.entMu.Lock()
	out.Entities = make(map[string]EntityLinks, len(st.entities))
	for name, e := range st.entities {
		out.Entities[name] = EntityLinks{SenderLinks: e.links[0], ReceiverLinks: e.links[1], Connections: int64(len(e.conns))}
	}
	st.entMu.Unlock()
	return out
}

// countEntity adds the attached entity link l to its entity's totals. Owner goroutine
// only; uncountLink removes it.
func (l *link) countEntity() {
	if l.node != nodeEntity || l.entityCounted {
		return
	}
	name := l.entityPath()
	if name == "" {
		return
	}
	st := &l.s.c.s.stats
	st.entMu.Lock()
	defer st.entMu.Unlock()
	if st.entities == nil {
		st.entities = map[string]*entityLinks{}
	}
	e := st.entities[name]
	if e == nil {
		e = &entityLinks{conns: map[*conn]int{}}
		st.entities[name] = e
	}
	e.links[roleIndex(l.role)]++
	e.conns[l.s.c]++
	l.entityCounted = true
}

// uncountEntity removes l from its entity's totals, if countEntity added it.
func (l *link) uncountEntity() {
	if !l.entityCounted {
		return
	}
	l.entityCounted = false
	name := l.entityPath()
	st := &l.s.c.s.stats
	st.entMu.Lock()
	defer st.entMu.Unlock()
	e := st.entities[name]
	if e == nil {
		return
	}
	e.links[roleIndex(l.role)]--
	if e.conns[l.s.c]--; e.conns[l.s.c] <= 0 {
		delete(e.conns, l.s.c)
	}
	if e.links[0] <= 0 && e.links[1] <= 0 {
		delete(st.entities, name)
	}
}

// entityPath is the entity l's messages go to or come from: a send-via link's
// destination, the entity of a dead-letter sub-queue.
func (l *link) entityPath() string { return l.addr.Entity }

// notePeak raises outPeak to v, one connection's queued bytes.
func (st *serverStats) notePeak(v int64) {
	for {
		p := st.outPeak.Load()
		if v <= p || st.outPeak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (st *serverStats) noteError(cond string) {
	st.errMu.Lock()
	if st.errs == nil {
		st.errs = map[string]uint64{}
	}
	st.errs[cond]++
	st.errMu.Unlock()
}

// roleIndex is the stats slot of a link by our role on it: a client sender is our
// receiver.
func roleIndex(r frames.Role) int {
	if r == frames.RoleSender { // the client's role on the attach
		return 0
	}
	return 1
}

// syncCredit reports l's credit change since the last call to the server's totals.
// Owner goroutine only; call after every change of l.credit.
func (l *link) syncCredit() {
	if l.counted {
		l.s.c.s.stats.credit[roleIndex(l.role)].Add(int64(l.credit) - int64(l.reported))
		l.reported = l.credit
	}
}

// countLink adds l to the server's totals (at attach).
func (l *link) countLink() {
	l.counted = true
	l.s.c.s.stats.links[roleIndex(l.role)].Add(1)
	l.syncCredit()
}

// uncountLink removes l and its unused credit from the server's totals (when dropped).
func (l *link) uncountLink() {
	l.uncountEntity()
	if !l.counted {
		return
	}
	st := &l.s.c.s.stats
	i := roleIndex(l.role)
	st.links[i].Add(-1)
	st.credit[i].Add(-int64(l.reported))
	l.counted, l.reported = false, 0
}

// condOf is the condition of a refused request: its own, or for a $cbs answer, which
// carries only a status code, the condition errorTable gives that status.
func condOf(r rpcResponse) string {
	if r.cond != "" {
		return r.cond
	}
	for _, e := range errorTable {
		if e.status == r.status {
			return e.condition
		}
	}
	if r.status == 408 {
		return condTimeout
	}
	return condInternal
}

// refused logs an AMQP error sent to the client at the default level, with its
// condition and TrackingId as their own attributes, and counts it by condition.
func (c *conn) refused(msg string, e *frames.Error, attrs ...any) {
	c.s.stats.noteError(string(e.Condition))
	attrs = append(attrs, "condition", string(e.Condition), "description", e.Description)
	if id := trackingOf(e.Description); id != "" {
		attrs = append(attrs, "tracking_id", id)
	}
	c.log.LogAttrs(c.ctx, slog.LevelInfo, msg, argsToAttrs(attrs)...)
}

func argsToAttrs(args []any) []slog.Attr {
	var r slog.Record
	r.Add(args...)
	out := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool { out = append(out, a); return true })
	return out
}

// trackingOf extracts the TrackingId from a description written by trackingID.
func trackingOf(desc string) string {
	i := strings.Index(desc, "TrackingId:")
	if i < 0 {
		return ""
	}
	id := desc[i+len("TrackingId:"):]
	if j := strings.IndexAny(id, ", "); j >= 0 {
		id = id[:j]
	}
	return id
}
