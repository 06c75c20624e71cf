package fsm

import (
	"cmp"
	"encoding/binary"
	"strings"

	"github.com/quorumbus/quorumbus/fsm/rule"
	"github.com/quorumbus/quorumbus/internal/binenc"
)

// msg is a message as the fsm keeps it in memory. It is deliberately more compact than
// Message (see docs/fsm.md, "Memory cost"): the nine string properties are packed into
// one string (strs) that is sliced, not copied, when a Message is rebuilt, and the lock
// token is kept as its salt and counter (the GroupID is the partition's).
type msg struct {
	seq         int64
	enq         int64 // EnqueuedTime
	expires     int64 // ExpiresAt; NeverMs when it never expires
	lockedUntil int64 // 0 when unlocked; for session messages the session's lock rules
	due         int64 // the key of this message in the deadline heap, when hidx >= 0
	sched       int64 // ScheduledEnqueueTime as sent
	ttl         int64 // TimeToLive as sent
	size        int64 // Properties.Size as sent (bytes counted are msgBytes)
	lockCtr     uint64
	strs        string // packed string properties, see packStrings
	app         []rule.Property
	payload     []byte  // nil when spilled
	sp          Spilled // the body when a Bodies store took it out of memory
	dl          *DeadLetterInfo
	st          *store // the store holding the message
	salt        uint32
	dcount      int32 // DeliveryCount
	hidx        int32 // index in the partition's deadline heap, -1 when absent
	aidx        int32 // index in an availability heap (store's or session's), -1 when absent
	state       MessageState
	flags       uint8
}

// msg flags.
const (
	fLocked    uint8 = 1 << iota // holds a lock (lockCtr, salt valid)
	fSkipCount                   // the next delivery does not increment DeliveryCount (Release)
	fModified                    // Properties changed after the send
	fSession                     // the message belongs to a session store (sessionID non-empty)
	fRing                        // the message is in its availQ's ring
	fPinned                      // locked under a prepared transaction (txn2pc.go): no expiry, no other settlement; derived from the prepared records
)

func (m *msg) locked() bool { return m.flags&fLocked != 0 }

// bytes is what a stored message counts toward MaxSizeBytes.
func (m *msg) bytes() int64 {
	if m.size > 0 {
		return m.size
	}
	if m.sp != nil {
		return int64(m.sp.Len())
	}
	return int64(len(m.payload))
}

// The string properties, in packing order. SessionID and MessageID come first because
// the fsm reads them most.
const (
	psSessionID = iota
	psMessageID
	psCorrelationID
	psTo
	psReplyTo
	psSubject
	psReplyToSessionID
	psContentType
	psPartitionKey
	psCount
)

// packStrings packs the string properties of p as uvarint length + bytes each. It
// builds the string in place (one allocation; a []byte converted at the end would be a
// second one whenever the strings exceed the compiler's 32-byte stack buffer, which a
// 32-digit message-id alone does).
func packStrings(p *rule.Properties) string {
	ss := [psCount]string{p.SessionID, p.MessageID, p.CorrelationID, p.To, p.ReplyTo, p.Subject,
		p.ReplyToSessionID, p.ContentType, p.PartitionKey}
	n := 0
	for _, s := range ss {
		n += binenc.UvarintLen(uint64(len(s))) + len(s)
	}
	if n == psCount { // all empty: share one constant
		return emptyStrs
	}
	var b strings.Builder
	b.Grow(n)
	var lb [binary.MaxVarintLen64]byte
	for _, s := range ss {
		b.Write(binenc.AppendUvarint(lb[:0], uint64(len(s))))
		b.WriteString(s)
	}
	return b.String()
}

var emptyStrs = string(make([]byte, psCount))

// unpackStrings fills p's string properties from a packed string, slicing it without copying.
func unpackStrings(s string, p *rule.Properties) {
	var ss [psCount]string
	for i := range ss {
		ss[i], s = nextPacked(s)
	}
	p.SessionID, p.MessageID, p.CorrelationID, p.To, p.ReplyTo, p.Subject = ss[0], ss[1], ss[2], ss[3], ss[4], ss[5]
	p.ReplyToSessionID, p.ContentType, p.PartitionKey = ss[6], ss[7], ss[8]
}

// packedField returns field i of a packed string.
func packedField(s string, i int) string {
	var f string
	for ; i >= 0; i-- {
		f, s = nextPacked(s)
	}
	return f
}

func nextPacked(s string) (string, string) {
	var n uint64
	var shift uint
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		n |= uint64(c&0x7f) << shift
		shift += 7
		if c < 0x80 {
			i++
			break
		}
	}
	if n > uint64(len(s)-i) {
		return "", ""
	}
	return s[i : i+int(n)], s[i+int(n):]
}

// validPacked reports whether s is a well-formed packed string (snapshot restore).
func validPacked(s string) bool {
	for i := 0; i < psCount; i++ {
		n, k := uvarintString(s)
		if k <= 0 || n > uint64(len(s)-k) {
			return false
		}
		s = s[k+int(n):]
	}
	return s == ""
}

func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < 10; i++ {
		c := s[i]
		if c < 0x80 {
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

func (m *msg) sessionID() string {
	if m.flags&fSession == 0 {
		return ""
	}
	return packedField(m.strs, psSessionID)
}

// msgStore keeps the messages of one target ordered by sequence number. It is the seam
// for another storage engine; seqIndex is the in-memory one.
type msgStore interface {
	Put(m *msg) // m.seq must not be present
	Get(seq int64) *msg
	Delete(seq int64) *msg
	Ascend(from int64, fn func(*msg) bool) // in sequence order, from the first seq >= from
	Len() int
}

var _ msgStore = (*seqIndex)(nil)

// chunkMax bounds a chunk of seqIndex: inserts and deletes move at most this many
// pointers, and lookups are two binary searches.
const chunkMax = 512

// seqIndex is a sorted list of chunks of message pointers (a two-level B+-tree). Sends
// append to the last chunk; dead-lettering inserts into the middle of a DLQ's index.
type seqIndex struct {
	chunks [][]*msg
	n      int
}

func (x *seqIndex) Len() int { return x.n }

// chunkFor returns the index of the first chunk whose last seq is >= seq (len(chunks) if none).
func (x *seqIndex) chunkFor(seq int64) int {
	lo, hi := 0, len(x.chunks)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		c := x.chunks[h]
		if c[len(c)-1].seq < seq {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

func searchChunk(c []*msg, seq int64) int {
	lo, hi := 0, len(c)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if c[h].seq < seq {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

func (x *seqIndex) Put(m *msg) {
	x.n++
	nc := len(x.chunks)
	if nc == 0 {
		c := make([]*msg, 1, 16)
		c[0] = m
		x.chunks = append(x.chunks, c)
		return
	}
	ci := x.chunkFor(m.seq)
	if ci == nc { // after everything: append to the last chunk
		ci = nc - 1
		if len(x.chunks[ci]) >= chunkMax {
			c := make([]*msg, 1, 16)
			c[0] = m
			x.chunks = append(x.chunks, c)
			return
		}
		x.chunks[ci] = append(x.chunks[ci], m)
		return
	}
	c := x.chunks[ci]
	i := searchChunk(c, m.seq)
	c = append(c, nil)
	copy(c[i+1:], c[i:])
	c[i] = m
	if len(c) > chunkMax { // split in halves
		h := len(c) / 2
		right := make([]*msg, len(c)-h, chunkMax)
		copy(right, c[h:])
		clear(c[h:])
		c = c[:h]
		x.chunks = append(x.chunks, nil)
		copy(x.chunks[ci+2:], x.chunks[ci+1:])
		x.chunks[ci+1] = right
	}
	x.chunks[ci] = c
}

func (x *seqIndex) Get(seq int64) *msg {
	ci := x.chunkFor(seq)
	if ci == len(x.chunks) {
		return nil
	}
	c := x.chunks[ci]
	if i := searchChunk(c, seq); i < len(c) && c[i].seq == seq {
		return c[i]
	}
	return nil
}

func (x *seqIndex) Delete(seq int64) *msg {
	ci := x.chunkFor(seq)
	if ci == len(x.chunks) {
		return nil
	}
	c := x.chunks[ci]
	i := searchChunk(c, seq)
	if i == len(c) || c[i].seq != seq {
		return nil
	}
	m := c[i]
	x.n--
	if i == 0 { // front deletion (FIFO consumption): reslice, no copying
		c[0] = nil
		x.chunks[ci] = c[1:]
	} else {
		copy(c[i:], c[i+1:])
		c[len(c)-1] = nil
		x.chunks[ci] = c[:len(c)-1]
	}
	c = x.chunks[ci]
	switch {
	case len(c) == 0:
		copy(x.chunks[ci:], x.chunks[ci+1:])
		x.chunks[len(x.chunks)-1] = nil
		x.chunks = x.chunks[:len(x.chunks)-1]
	case len(c) < chunkMax/4 && ci+1 < len(x.chunks) && len(c)+len(x.chunks[ci+1]) <= chunkMax/2:
		merged := make([]*msg, 0, chunkMax/2)
		merged = append(append(merged, c...), x.chunks[ci+1]...)
		x.chunks[ci] = merged
		copy(x.chunks[ci+1:], x.chunks[ci+2:])
		x.chunks[len(x.chunks)-1] = nil
		x.chunks = x.chunks[:len(x.chunks)-1]
	}
	return m
}

func (x *seqIndex) Ascend(from int64, fn func(*msg) bool) {
	ci := x.chunkFor(from)
	for ; ci < len(x.chunks); ci++ {
		c := x.chunks[ci]
		i := 0
		if c[0].seq < from {
			i = searchChunk(c, from)
		}
		for ; i < len(c); i++ {
			if !fn(c[i]) {
				return
			}
		}
	}
}

// seqHeap is a min-heap of messages by sequence number, with each message's position in
// m.aidx so any message can be removed in O(log n). It holds the available messages of a
// target or of a session (S-RCV-2, S-SES-3).
type seqHeap []*msg

func (h *seqHeap) push(m *msg) {
	*h = append(*h, m)
	m.aidx = int32(len(*h) - 1)
	h.up(len(*h) - 1)
}

func (h seqHeap) peek() *msg {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

func (h *seqHeap) remove(m *msg) {
	i := int(m.aidx)
	old := *h
	n := len(old) - 1
	if i < 0 || i > n || old[i] != m {
		return
	}
	if i != n {
		old[i] = old[n]
		old[i].aidx = int32(i)
	}
	old[n] = nil
	*h = old[:n]
	m.aidx = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h seqHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].seq <= h[i].seq {
			break
		}
		h[p], h[i] = h[i], h[p]
		h[p].aidx, h[i].aidx = int32(p), int32(i)
		i = p
	}
}

func (h seqHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].seq < h[l].seq {
			j = r
		}
		if h[i].seq <= h[j].seq {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].aidx, h[j].aidx = int32(i), int32(j)
		i = j
	}
	return i > start
}

// idxHeap is a binary min-heap whose entries know their owner's position field, so
// that an owner is moved or removed in O(log n). An entry is a value holding the keys it
// is ordered by, copied from its owner, and a pointer to the owner's position field: a
// comparison reads neither owner, and neither it nor a position update goes through the
// type parameter. deadlineHeap and sessionHeap are its two uses.
//
// It replaced two hand-copied heaps of *msg and *session, kept because a generic heap
// with methods on T (or on an order type per heap) was measured 35% and then 2x slower
// on BenchmarkTick100k, every comparison and position update going through a
// dictionary call. With the keys in the entry none does, and it is as fast as the
// copies (Go 1.26, 2 shared cores at load 1.5, -count 6 alternating: Tick100k median
// 568 ns/op against 595; CPU in runDeadlines over 10^6 ticks 0.48 s against 0.54 s,
// median of 3 profiles). A comparison reads the array, not the two owners. The price is
// memory: 40 bytes an entry (a message with a deadline) instead of 8, with two pointers
// for the garbage collector to scan, which made the whole benchmark process 6% busier.
type idxHeap[T any, K cmp.Ordered] []hent[T, K]

// hent is one entry of an idxHeap, ordered by (due, tie, ord). K is int64 (a message's
// seq) or string (a session's id): each is a shape of its own, so comparing ties
// compiles to a plain comparison, not a dictionary call.
type hent[T any, K cmp.Ordered] struct {
	due int64  // the deadline
	tie K      // then a message's seq, or a session's id
	ord int32  // then the owner's store.ord, so that the order is total
	pos *int32 // the owner's position field: its index here, -1 when absent
	p   *T     // the owner
}

func hless[T any, K cmp.Ordered](a, b *hent[T, K]) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.ord < b.ord
}

// fix puts e in the heap, or gives the owner's entry (at *e.pos) e's keys.
func (h *idxHeap[T, K]) fix(e hent[T, K]) {
	if i := int(*e.pos); i >= 0 {
		(*h)[i] = e
		if !h.down(i) {
			h.up(i)
		}
		return
	}
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// remove takes out the entry of the owner whose position field is pos, if it is here.
func (h *idxHeap[T, K]) remove(pos *int32) {
	i := int(*pos)
	old := *h
	n := len(old) - 1
	if i < 0 || i > n || old[i].pos != pos {
		return
	}
	if i != n {
		old[i] = old[n]
		*old[i].pos = int32(i)
	}
	old[n] = hent[T, K]{}
	*h = old[:n]
	*pos = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// init restores the heap order after keys changed in place (reorder).
func (h idxHeap[T, K]) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// disorder returns the first position whose entry is smaller than its parent, or -1
// when the heap is in order (invariants and tests).
func (h idxHeap[T, K]) disorder() int {
	for i := 1; i < len(h); i++ {
		if hless(&h[i], &h[(i-1)/2]) || *h[i].pos != int32(i) {
			return i
		}
	}
	return -1
}

// up moves the entry at i towards the root until its parent is smaller, shifting the
// parents down into the hole, and writes the positions of what moved.
func (h idxHeap[T, K]) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !hless(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		*h[i].pos = int32(i)
		i = p
	}
	h[i] = e
	*e.pos = int32(i)
}

// down moves the entry at i towards the leaves until its children are larger and
// reports whether it moved.
func (h idxHeap[T, K]) down(i int) bool {
	start, n := i, len(h)
	e := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && hless(&h[r], &h[l]) {
			j = r
		}
		if !hless(&h[j], &e) {
			break
		}
		h[i] = h[j]
		*h[i].pos = int32(i)
		i = j
	}
	h[i] = e
	*e.pos = int32(i)
	return i > start
}

// deadlineHeap orders messages by due time (then seq, then store order, for a total
// order), with each message's position in m.hidx and its key in m.due.
type deadlineHeap struct{ h idxHeap[msg, int64] }

func (d *deadlineHeap) len() int { return len(d.h) }

// next is the message due first and its due time; len() > 0.
func (d *deadlineHeap) next() (*msg, int64) { return d.h[0].p, d.h[0].due }

func (d *deadlineHeap) set(m *msg, due int64) {
	if m.hidx >= 0 && due == m.due {
		return
	}
	if due == NeverMs {
		d.h.remove(&m.hidx)
		return
	}
	m.due = due
	d.h.fix(hent[msg, int64]{due: due, tie: m.seq, ord: m.st.ord, pos: &m.hidx, p: m})
}

func (d *deadlineHeap) remove(m *msg) { d.h.remove(&m.hidx) }

// reorder takes the stores' new order (a configuration renumbers store.ord).
func (d *deadlineHeap) reorder() {
	for i := range d.h {
		d.h[i].ord = d.h[i].p.st.ord
	}
	d.h.init()
}

// sessionHeap orders held sessions by lock expiry (then id, then store order), with
// each session's position in s.hidx; its key is s.lockedUntil, given by fix.
type sessionHeap struct{ h idxHeap[session, string] }

func (sh *sessionHeap) len() int { return len(sh.h) }

// next is the session whose lock ends first and that time; len() > 0.
func (sh *sessionHeap) next() (*session, int64) { return sh.h[0].p, sh.h[0].due }

// fix puts s in the heap, or moves it after s.lockedUntil changed.
func (sh *sessionHeap) fix(s *session) {
	sh.h.fix(hent[session, string]{due: s.lockedUntil, tie: s.id, ord: s.st.ord, pos: &s.hidx, p: s})
}

func (sh *sessionHeap) remove(s *session) { sh.h.remove(&s.hidx) }

// reorder takes the stores' new order (a configuration renumbers store.ord).
func (sh *sessionHeap) reorder() {
	for i := range sh.h {
		sh.h[i].ord = sh.h[i].p.st.ord
	}
	sh.h.init()
}

// availQ holds the available messages of a target or a session in sequence order
// (S-RCV-2, S-SES-3). Sends arrive in sequence order, so most messages go to a FIFO
// ring that receive pops in O(1); messages that come back out of order (abandoned,
// released, activated, dead-lettered into a DLQ) go to a heap. A message removed from
// the middle of the ring (expiry) is dropped lazily: it loses fRing or moves to another
// store, and peek skips it. A message never re-enters a ring it left that way (it left
// its store), so the ring never holds two live entries for one message.
type availQ struct {
	owner *store
	ring  []*msg
	head  int
	heap  seqHeap
	n     int // live entries
}

func (a *availQ) liveRing(m *msg) bool { return m.flags&fRing != 0 && m.st == a.owner }

func (a *availQ) push(m *msg) {
	a.n++
	if k := len(a.ring); k == a.head || m.seq > a.ring[k-1].seq {
		m.flags |= fRing
		a.ring = append(a.ring, m)
		return
	}
	a.heap.push(m)
}

// peek returns the available message with the lowest sequence number, or nil.
func (a *availQ) peek() *msg {
	for a.head < len(a.ring) && !a.liveRing(a.ring[a.head]) {
		a.ring[a.head] = nil
		a.head++
	}
	a.compact()
	var r *msg
	if a.head < len(a.ring) {
		r = a.ring[a.head]
	}
	if h := a.heap.peek(); h != nil && (r == nil || h.seq < r.seq) {
		r = h
	}
	return r
}

func (a *availQ) empty() bool { return a.n == 0 }

func (a *availQ) remove(m *msg) {
	if m.flags&fRing != 0 {
		m.flags &^= fRing
		a.n--
		if a.head < len(a.ring) && a.ring[a.head] == m {
			a.ring[a.head] = nil
			a.head++
			a.compact()
		}
		return
	}
	if m.aidx >= 0 {
		a.n--
		a.heap.remove(m)
	}
}

func (a *availQ) compact() {
	if a.head == len(a.ring) {
		clear(a.ring[:a.head])
		a.ring, a.head = a.ring[:0], 0
		return
	}
	if a.head > 64 && a.head*2 > len(a.ring) {
		n := copy(a.ring, a.ring[a.head:])
		clear(a.ring[n:])
		a.ring, a.head = a.ring[:n], 0
	}
}

// freeEnt is a candidate for the next available session: its first available seq when
// it was offered.
type freeEnt struct {
	seq int64
	s   *session
}

// freeHeap is a min-heap of freeEnt by seq (then session id, for a total order).
type freeHeap []freeEnt

func freeLess(a, b freeEnt) bool {
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.s.id < b.s.id
}

func (h *freeHeap) push(x freeEnt) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !freeLess(a[i], a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *freeHeap) pop() {
	a := *h
	n := len(a) - 1
	a[0] = a[n]
	a[n] = freeEnt{}
	a = a[:n]
	*h = a
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && freeLess(a[r], a[l]) {
			j = r
		}
		if !freeLess(a[j], a[i]) {
			break
		}
		a[i], a[j] = a[j], a[i]
		i = j
	}
}
