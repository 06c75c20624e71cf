package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// Snapshot format (docs/fsm.md): the magic "QBFS", a version byte, then framed records
// (uvarint length + body), then the CRC-32C of everything before it, big-endian.
//
//	header:   config, now, lastSeq, lastSend, lockCtr, entity count
//	per entity, in config order:
//	  entity: name, lastReceive, main count, DLQ count, session count
//	  one record per main message, in sequence order; then per DLQ message
//	  one record per session, in id order (version 2 adds the state's update time)
//	dedupe:   count, then (id, at, seq) in arrival order
//
// The same state always gives the same bytes: stores are written in sequence order,
// sessions in id order, and no map is iterated unsorted.
//
// Versions: 1 is the first layout; 2 appends stateAt to each session record; 3 appends
// one record after the dedupe record: the prepared transactions and the decision
// records of two-phase commit (txn2pc.go). A state without either is written as
// version 2, byte for byte as before, so a release that reads only version 2 can still
// restore it; a state with them needs a release that reads version 3. Version 4 adds,
// after the version 3 record (which may then be empty), a record with the count of
// pending chunked bodies (upload.go) and one record per upload in id order; it is
// written only while an upload is pending, so a state without one is written as
// version 2 or 3, byte for byte as before. Restore
// reads every version from snapOldest; a version 1 session with state restores with
// the snapshot's time as stateAt (its update time is unknown; that is the latest it
// can have been, so a listing by update time includes it rather than misses it).
const (
	snapMagic   = "QBFS"
	snapVersion = 4
	// snapVersionNoUpload is the version written when no chunked body is pending.
	snapVersionNoUpload = 3
	// snapVersionNoTxn is the version written when, besides, no transaction is prepared
	// or decided.
	snapVersionNoTxn = 2
	// snapOldest is the oldest version Restore still reads.
	snapOldest = 1
	// maxRecord bounds one record (a message with a 100 MiB body and its properties).
	maxRecord = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptSnapshot marks a snapshot that Restore cannot read.
var ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

type snapWriter struct {
	w   *bufio.Writer
	crc uint32
	buf []byte
	err error
	len [binary.MaxVarintLen64]byte
}

func (s *snapWriter) write(p []byte) {
	if s.err != nil {
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, p)
	_, s.err = s.w.Write(p)
}

// msg writes m's record, using b as its buffer.
func (s *snapWriter) msg(b []byte, m *msg) []byte {
	b, err := appendMsg(b[:0], m)
	if err != nil && s.err == nil {
		s.err = err
	}
	s.record(b)
	return b
}

func (s *snapWriter) record(body []byte) {
	s.write(s.len[:binary.PutUvarint(s.len[:], uint64(len(body)))])
	s.write(body)
}

// Snapshot writes the whole state to w. It is deterministic: two FSMs that applied the
// same entries write the same bytes. It reads the live state, so the FSM must not change
// until it returns; Freeze gives a copy to write while the FSM goes on.
func (f *FSM) Snapshot(w io.Writer) error {
	v := f.view(false)
	_, err := v.WriteTo(w)
	return err
}

// Frozen is a point-in-time copy of an FSM's state that can be written as a snapshot
// while the FSM keeps applying entries (raft's FSMSnapshot.Persist runs concurrently with
// Apply). Freezing copies each message's fixed-size record (192 bytes) but shares payloads,
// property strings and application properties, which the fsm never writes into.
type Frozen struct {
	cfg      Config
	now      int64
	lastSeq  int64
	lastSend int64
	lockCtr  uint64
	ents     []snapEnt
	dup      []dupEnt
	txn      txnState
	up       []upload
}

type snapEnt struct {
	name        string
	lastReceive int64
	live        [2]msgStore // main, DLQ: the live stores (Snapshot)
	main, dlq   []msg       // or frozen copies (Freeze)
	sess        []snapSess
}

type snapSess struct {
	id, holder    string
	held          bool
	lockedUntil   int64
	expireThrough int64
	state         []byte
	stateAt       int64
}

// Freeze returns a copy of the state for WriteTo. It costs O(messages) memory copies and
// one allocation per target.
func (f *FSM) Freeze() *Frozen { return f.view(true) }

func (f *FSM) view(freeze bool) *Frozen {
	v := &Frozen{cfg: f.cfg, now: f.now, lastSeq: f.lastSeq, lastSend: f.lastSend, lockCtr: f.lockCtr,
		ents: make([]snapEnt, len(f.ents)), dup: slices.Clone(f.dupq[f.duph:]), txn: f.txnView(),
		up: f.uploadView()}
	if freeze {
		v.cfg.Subscriptions = slices.Clone(v.cfg.Subscriptions)
	}
	for i, e := range f.ents {
		se := &v.ents[i]
		se.name, se.lastReceive = e.name, e.lastReceive
		if freeze {
			for j, st := range []*store{e.main, e.dlq} {
				ms := make([]msg, 0, st.idx.Len())
				st.idx.Ascend(0, func(m *msg) bool { ms = append(ms, *m); return true })
				if j == 0 {
					se.main = ms
				} else {
					se.dlq = ms
				}
			}
		} else {
			se.live = [2]msgStore{e.main.idx, e.dlq.idx}
		}
		for _, id := range sortedKeys(e.sessions) {
			s := e.sessions[id]
			se.sess = append(se.sess, snapSess{id: s.id, holder: s.holder, held: s.held, lockedUntil: s.lockedUntil,
				expireThrough: s.expireThrough, state: s.state, stateAt: s.stateAt})
		}
	}
	return v
}

// WriteTo writes the snapshot bytes, the same Snapshot would have written at Freeze.
func (v *Frozen) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	s := &snapWriter{w: bufio.NewWriterSize(cw, 64<<10)}
	version := byte(snapVersion)
	switch {
	case len(v.up) > 0:
	case v.txn.empty():
		version = snapVersionNoTxn
	default:
		version = snapVersionNoUpload
	}
	s.write(append([]byte(snapMagic), version))
	b := appendConfig(s.buf[:0], &v.cfg)
	b = binary.AppendVarint(b, v.now)
	b = binary.AppendVarint(b, v.lastSeq)
	b = binary.AppendVarint(b, v.lastSend)
	b = binenc.AppendUvarint(b, v.lockCtr)
	b = binenc.AppendUvarint(b, uint64(len(v.ents)))
	s.record(b)
	for i := range v.ents {
		e := &v.ents[i]
		nmain, ndlq := len(e.main), len(e.dlq)
		if e.live[0] != nil {
			nmain, ndlq = e.live[0].Len(), e.live[1].Len()
		}
		b = binenc.AppendString(b[:0], e.name)
		b = binary.AppendVarint(b, e.lastReceive)
		b = binenc.AppendUvarint(b, uint64(nmain))
		b = binenc.AppendUvarint(b, uint64(ndlq))
		b = binenc.AppendUvarint(b, uint64(len(e.sess)))
		s.record(b)
		for j, frozen := range [][]msg{e.main, e.dlq} {
			if e.live[j] != nil {
				e.live[j].Ascend(0, func(m *msg) bool {
					b = s.msg(b, m)
					return s.err == nil
				})
				continue
			}
			for k := range frozen {
				b = s.msg(b, &frozen[k])
			}
		}
		for _, ss := range e.sess {
			b = binenc.AppendString(b[:0], ss.id)
			b = binenc.AppendBool(b, ss.held)
			b = binenc.AppendString(b, ss.holder)
			b = binary.AppendVarint(b, ss.lockedUntil)
			b = binenc.AppendBool(b, ss.state != nil)
			b = binenc.AppendBytes(b, ss.state)
			b = binary.AppendVarint(b, ss.expireThrough)
			b = binary.AppendVarint(b, ss.stateAt) // since version 2
			s.record(b)
		}
	}
	b = binenc.AppendUvarint(b[:0], uint64(len(v.dup)))
	for _, d := range v.dup {
		b = binenc.AppendString(b, d.id)
		b = binary.AppendVarint(b, d.at)
		b = binary.AppendVarint(b, d.seq)
	}
	s.record(b)
	if version >= 3 {
		b = appendTxnState(b[:0], v.txn)
		s.record(b)
	}
	if version >= 4 {
		b = binenc.AppendUvarint(b[:0], uint64(len(v.up)))
		s.record(b)
		for i := range v.up {
			b = appendUpload(b[:0], &v.up[i])
			s.record(b)
		}
	}
	s.buf = b
	if s.err != nil {
		return cw.n, s.err
	}
	var tr [4]byte
	binary.BigEndian.PutUint32(tr[:], s.crc)
	if _, err := s.w.Write(tr[:]); err != nil {
		return cw.n, err
	}
	err := s.w.Flush()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// appendMsg encodes a stored message. Derived fields (heap positions, due) are rebuilt
// on restore.
func appendMsg(b []byte, m *msg) ([]byte, error) {
	b = binary.AppendVarint(b, m.seq)
	b = binary.AppendVarint(b, m.enq)
	b = binary.AppendVarint(b, m.expires)
	b = binary.AppendVarint(b, m.lockedUntil)
	b = binary.AppendVarint(b, m.sched)
	b = binary.AppendVarint(b, m.ttl)
	b = binary.AppendVarint(b, m.size)
	b = binenc.AppendUvarint(b, m.lockCtr)
	b = binary.BigEndian.AppendUint32(b, m.salt)
	b = binary.AppendVarint(b, int64(m.dcount))
	b = append(b, byte(m.state), m.flags&^(fRing|fPinned)) // fRing and fPinned are derived
	b = binenc.AppendString(b, m.strs)
	b = appendProps(b, m.app)
	payload := m.payload
	if m.sp != nil {
		var err error
		if payload, err = m.sp.Read(); err != nil {
			return b, fmt.Errorf("fsm: message %d: reading its spilled body: %w", m.seq, err)
		}
	}
	b = binenc.AppendBytes(b, payload)
	if m.dl != nil {
		b = append(b, 1)
		b = binenc.AppendString(b, m.dl.Reason)
		b = binenc.AppendString(b, m.dl.Description)
		b = binenc.AppendString(b, m.dl.Source)
	} else {
		b = append(b, 0)
	}
	return b, nil
}

// Digest returns the SHA-256 of the snapshot bytes: equal digests mean equal state. It
// panics if a spilled body cannot be read back; DigestErr returns the error instead.
func (f *FSM) Digest() [32]byte {
	d, err := f.DigestErr()
	if err != nil {
		panic(err)
	}
	return d
}

// DigestErr is Digest, with the error of reading a spilled body back.
func (f *FSM) DigestErr() ([32]byte, error) {
	h := sha256.New()
	var d [32]byte
	if err := f.Snapshot(h); err != nil { // a hash never fails to write; a spilled body's read can
		return d, err
	}
	h.Sum(d[:0])
	return d, nil
}

type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	buf []byte
	one [1]byte
	// slab holds the restored payloads (records are read into buf, which is reused).
	slab Slab
}

func (s *snapReader) ReadByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err == nil {
		s.one[0] = c
		s.crc.Write(s.one[:])
	}
	return c, err
}

// readFull reads n bytes into s.buf, growing it in steps of at most 1 MiB so that a
// corrupt length cannot make us allocate much more than the input holds.
func (s *snapReader) readFull(n int) ([]byte, error) {
	s.buf = s.buf[:0]
	for len(s.buf) < n {
		step := min(n-len(s.buf), 1<<20)
		s.buf = append(s.buf, make([]byte, step)...)
		if _, err := io.ReadFull(s.r, s.buf[len(s.buf)-step:]); err != nil {
			return nil, err
		}
	}
	s.crc.Write(s.buf)
	return s.buf, nil
}

func (s *snapReader) record() (dec, error) {
	n, err := binary.ReadUvarint(s)
	if err != nil {
		return dec{}, err
	}
	if n > maxRecord {
		return dec{}, fmt.Errorf("record of %d bytes", n)
	}
	b, err := s.readFull(int(n))
	if err != nil {
		return dec{}, err
	}
	return *newDec(b, &s.slab), nil
}

// Restore replaces the whole state with a snapshot written by Snapshot. On any error
// (which wraps ErrCorruptSnapshot) the FSM is unchanged; it never panics.
func (f *FSM) Restore(r io.Reader) error {
	nf, err := restore(r, f.bodies)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	*f = *nf
	return nil
}

func restore(r io.Reader, bodies Bodies) (*FSM, error) {
	s := &snapReader{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli)}
	hdr, err := s.readFull(len(snapMagic) + 1)
	if err != nil {
		return nil, err
	}
	if string(hdr[:4]) != snapMagic || hdr[4] < snapOldest || hdr[4] > snapVersion {
		return nil, fmt.Errorf("bad magic or version %q", hdr)
	}
	version := hdr[4]
	d, err := s.record()
	if err != nil {
		return nil, err
	}
	var cfg Config
	d.config(&cfg)
	now, lastSeq, lastSend, lockCtr := d.Varint(), d.Varint(), d.Varint(), d.Uvarint()
	nents := d.Uvarint()
	if err := d.end(); err != nil {
		return nil, err
	}
	if cfg.Kind != KindQueue && cfg.Kind != KindTopic {
		return nil, fmt.Errorf("entity kind %d", cfg.Kind)
	}
	f := New(cfg)
	f.now, f.lastSeq, f.lastSend, f.lockCtr = now, lastSeq, lastSend, lockCtr
	f.bodies = bodies
	var spilled map[int64]Spilled // a topic's copies of one message share its body (its seq)
	if bodies != nil && cfg.Kind == KindTopic && len(cfg.Subscriptions) > 1 {
		spilled = map[int64]Spilled{}
	}
	if nents != uint64(len(f.ents)) {
		return nil, fmt.Errorf("%d entities for a config with %d", nents, len(f.ents))
	}
	for _, e := range f.ents {
		d, err := s.record()
		if err != nil {
			return nil, err
		}
		name := d.Str()
		e.lastReceive = d.Varint()
		nmain, ndlq, nsess := d.Uvarint(), d.Uvarint(), d.Uvarint()
		if err := d.end(); err != nil {
			return nil, err
		}
		if name != e.name {
			return nil, fmt.Errorf("entity %q where %q was expected", name, e.name)
		}
		for i, st := range []*store{e.main, e.dlq} {
			n := nmain
			if i == 1 {
				n = ndlq
			}
			prev := int64(-1 << 63)
			for ; n > 0; n-- {
				d, err := s.record()
				if err != nil {
					return nil, err
				}
				m, err := f.readMsg(&d, st)
				if err != nil {
					return nil, err
				}
				if m.seq <= prev || m.seq < 1 || m.seq > lastSeq {
					return nil, fmt.Errorf("sequence number %d out of order", m.seq)
				}
				prev = m.seq
				if sp, ok := spilled[m.seq]; ok && sp.Len() == len(m.payload) {
					m.sp, m.payload = sp, nil
				} else if f.spill(m); spilled != nil && m.sp != nil {
					spilled[m.seq] = m.sp
				}
				f.insertRestored(st, m)
			}
		}
		for ; nsess > 0; nsess-- {
			d, err := s.record()
			if err != nil {
				return nil, err
			}
			if err := f.readSession(&d, e, version); err != nil {
				return nil, err
			}
		}
	}
	d, err = s.record()
	if err != nil {
		return nil, err
	}
	ndup := d.Count(3)
	for i := 0; i < ndup && d.Err() == nil; i++ {
		de := dupEnt{id: d.Str(), at: d.Varint(), seq: d.Varint()}
		f.dupq = append(f.dupq, de)
		f.dup[de.id] = dupRec{seq: de.seq, at: de.at}
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	if version >= 3 {
		d, err := s.record()
		if err != nil {
			return nil, err
		}
		if err := f.readTxnState(&d, version); err != nil {
			return nil, err
		}
	}
	if version >= 4 {
		d, err := s.record()
		if err != nil {
			return nil, err
		}
		n := d.Uvarint()
		if err := d.end(); err != nil {
			return nil, err
		}
		if n > 1<<20 {
			return nil, fmt.Errorf("%d uploads", n)
		}
		if n == 0 {
			return nil, errors.New("version 4 without uploads (written as version 2 or 3)")
		}
		last := ""
		for ; n > 0; n-- {
			d, err := s.record()
			if err != nil {
				return nil, err
			}
			if last, err = f.readUpload(&d, last); err != nil {
				return nil, err
			}
		}
	}
	want := s.crc.Sum32()
	var tr [4]byte
	if _, err := io.ReadFull(s.r, tr[:]); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(tr[:]) != want {
		return nil, errors.New("checksum mismatch")
	}
	if _, err := s.r.ReadByte(); err != io.EOF {
		return nil, errors.New("trailing bytes")
	}
	// Locks of sessions no longer held would be a corrupt snapshot; check the invariants
	// the fsm relies on.
	for ctr, m := range f.locks {
		if m.flags&fSession != 0 && m.flags&fPinned == 0 { // a pinned message is the transaction's, not the session's
			s := f.session(m)
			if s == nil || !s.held {
				return nil, fmt.Errorf("lock %d in a session that is not held", ctr)
			}
			if s.locked == nil {
				s.locked = map[uint64]*msg{}
			}
			s.locked[ctr] = m
		}
	}
	return f, nil
}

// end checks that a record was read completely and correctly.
func (d *dec) end() error {
	if d.Err() == nil && len(d.Rest()) != 0 {
		d.Failf("%d trailing bytes in record", len(d.Rest()))
	}
	return d.Err()
}

func (f *FSM) readMsg(d *dec, st *store) (*msg, error) {
	m := &msg{hidx: -1, aidx: -1}
	m.seq, m.enq, m.expires, m.lockedUntil = d.Varint(), d.Varint(), d.Varint(), d.Varint()
	m.sched, m.ttl, m.size = d.Varint(), d.Varint(), d.Varint()
	m.lockCtr = d.Uvarint()
	m.salt = d.Uint32()
	m.dcount = int32(d.Varint())
	m.state = MessageState(d.Byte())
	m.flags = d.Byte()
	m.strs = d.Str()
	m.app = d.props()
	m.payload = d.payload()
	if d.Bool() {
		m.dl = &DeadLetterInfo{Reason: d.Str(), Description: d.Str(), Source: d.Str()}
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	switch {
	case m.state > StateScheduled:
		return nil, fmt.Errorf("message %d: state %d", m.seq, m.state)
	case m.flags > fSession<<1-1:
		return nil, fmt.Errorf("message %d: flags %#x", m.seq, m.flags)
	case !validPacked(m.strs):
		return nil, fmt.Errorf("message %d: bad string properties", m.seq)
	case (m.flags&fSession != 0) != (!st.dlq && st.ent.cfg.RequiresSession) || (m.flags&fSession != 0 && m.sessionID() == ""):
		return nil, fmt.Errorf("message %d: session flag does not match its store", m.seq)
	case m.locked() && (m.lockCtr == 0 || m.lockCtr > f.lockCtr || f.locks[m.lockCtr] != nil):
		return nil, fmt.Errorf("message %d: bad lock counter %d", m.seq, m.lockCtr)
	case m.state == StateScheduled && m.locked():
		return nil, fmt.Errorf("message %d: scheduled and locked", m.seq)
	}
	for _, p := range m.app {
		if !p.Value.Kind.Valid() {
			return nil, fmt.Errorf("message %d: property kind %d", m.seq, p.Value.Kind)
		}
	}
	return m, nil
}

// insertRestored is insert for a message whose lock state comes from a snapshot.
func (f *FSM) insertRestored(st *store, m *msg) {
	if m.locked() {
		f.locks[m.lockCtr] = m
		st.nLocked++
	}
	f.insert(st, m)
}

func (f *FSM) readSession(d *dec, e *entity, version byte) error {
	id := d.Str()
	held := d.Bool()
	holder := d.Str()
	until := d.Varint()
	hasState := d.Bool()
	state := d.Bytes()
	through := d.Varint()
	stateAt := f.now // version 1: the update time is unknown; the latest it can have been
	if version >= 2 {
		stateAt = d.Varint()
	}
	if err := d.end(); err != nil {
		return err
	}
	if version >= 2 && !hasState && stateAt != 0 {
		return fmt.Errorf("session %q has an update time but no state", id)
	}
	if !e.cfg.RequiresSession {
		return fmt.Errorf("session %q in an entity without sessions", id)
	}
	s := f.getSession(e.main, id)
	s.held, s.holder, s.lockedUntil, s.expireThrough = held, holder, until, through
	if hasState {
		if state == nil {
			state = []byte{}
		}
		s.state, s.stateAt = state, stateAt
		f.bytes += int64(len(state))
	}
	if held {
		f.sh.fix(s)
	}
	return nil
}
