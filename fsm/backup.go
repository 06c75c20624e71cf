package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// ErrBackupMismatch is returned by Rebase when a snapshot does not fit the partition it
// is restored into (another kind of entity, other subscriptions).
var ErrBackupMismatch = errors.New("fsm: backup does not match the partition")

// Rebase copies a snapshot from r to w, record by record (it never holds more than one
// record), as a snapshot of the partition configured by cfg, for a restore from a backup
// into a new cluster:
//
//   - the configuration is cfg (its GroupID is the new partition's: lock tokens carry it),
//     which must name the same kind of entity and the same subscriptions, in the same order;
//   - locks are dropped: a locked message comes back available (deferred when it was
//     deferred) with its delivery count, and no session is held (its state is kept);
//   - prepared transactions, two-phase-commit decisions and pending chunked bodies are
//     dropped (in-flight work the clients of the old cluster can no longer finish).
//
// Messages, their sequence numbers, enqueue times, delivery counts and states, the
// dead-letter queues, session states and the duplicate-detection history are copied as
// they are. The output is a version-2 snapshot that Restore reads. Rebase checks the
// input's checksum; on any error the output must be discarded.
func Rebase(r io.Reader, w io.Writer, cfg Config) (int64, error) {
	n, err := rebase(r, w, cfg)
	if err != nil && !errors.Is(err, ErrBackupMismatch) {
		err = fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	return n, err
}

func rebase(r io.Reader, w io.Writer, cfg Config) (int64, error) {
	s := &snapReader{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli)}
	hdr, err := s.readFull(len(snapMagic) + 1)
	if err != nil {
		return 0, err
	}
	if string(hdr[:4]) != snapMagic || hdr[4] < snapOldest || hdr[4] > snapVersion {
		return 0, fmt.Errorf("bad magic or version %q", hdr)
	}
	version := hdr[4]
	d, err := s.record()
	if err != nil {
		return 0, err
	}
	var old Config
	d.config(&old)
	now, lastSeq, lastSend, lockCtr := d.Varint(), d.Varint(), d.Varint(), d.Uvarint()
	nents := d.Uvarint()
	if err := d.end(); err != nil {
		return 0, err
	}
	if old.Kind != cfg.Kind || len(old.Subscriptions) != len(cfg.Subscriptions) {
		return 0, fmt.Errorf("%w: an entity of kind %d with %d subscriptions restored into one of kind %d with %d", ErrBackupMismatch,
			old.Kind, len(old.Subscriptions), cfg.Kind, len(cfg.Subscriptions))
	}
	for i := range old.Subscriptions {
		if old.Subscriptions[i].Name != cfg.Subscriptions[i].Name {
			return 0, fmt.Errorf("%w: subscription %d is %q in the backup, %q here", ErrBackupMismatch,
				i, old.Subscriptions[i].Name, cfg.Subscriptions[i].Name)
		}
	}
	// f checks each message as Restore would; it holds nothing but the entities.
	f := New(old)
	f.now, f.lastSeq, f.lockCtr = now, lastSeq, lockCtr
	if nents != uint64(len(f.ents)) {
		return 0, fmt.Errorf("%d entities for a config with %d", nents, len(f.ents))
	}
	cw := &countingWriter{w: w}
	out := &snapWriter{w: bufio.NewWriterSize(cw, 64<<10)}
	out.write(append([]byte(snapMagic), snapVersionNoTxn))
	b := appendConfig(nil, &cfg)
	b = binary.AppendVarint(b, now)
	b = binary.AppendVarint(b, lastSeq)
	b = binary.AppendVarint(b, lastSend)
	b = binenc.AppendUvarint(b, lockCtr)
	b = binenc.AppendUvarint(b, nents)
	out.record(b)
	for _, e := range f.ents {
		d, err := s.record()
		if err != nil {
			return cw.n, err
		}
		name := d.Str()
		lastReceive := d.Varint()
		nmain, ndlq, nsess := d.Uvarint(), d.Uvarint(), d.Uvarint()
		if err := d.end(); err != nil {
			return cw.n, err
		}
		if name != e.name {
			return cw.n, fmt.Errorf("entity %q where %q was expected", name, e.name)
		}
		b = binenc.AppendString(b[:0], name)
		b = binary.AppendVarint(b, lastReceive)
		b = binenc.AppendUvarint(b, nmain)
		b = binenc.AppendUvarint(b, ndlq)
		b = binenc.AppendUvarint(b, nsess)
		out.record(b)
		for i, st := range []*store{e.main, e.dlq} {
			n := nmain
			if i == 1 {
				n = ndlq
			}
			for ; n > 0; n-- {
				d, err := s.record()
				if err != nil {
					return cw.n, err
				}
				m, err := f.readMsg(&d, st)
				if err != nil {
					return cw.n, err
				}
				if m.locked() {
					m.flags &^= fLocked
					m.lockedUntil, m.lockCtr = 0, 0
				}
				b = out.msg(b, m)
			}
		}
		for ; nsess > 0; nsess-- {
			d, err := s.record()
			if err != nil {
				return cw.n, err
			}
			id, _, _, _ := d.Str(), d.Bool(), d.Str(), d.Varint()
			hasState, state, through := d.Bool(), d.Bytes(), d.Varint()
			stateAt := now
			if version >= 2 {
				stateAt = d.Varint()
			}
			if err := d.end(); err != nil {
				return cw.n, err
			}
			if !hasState {
				stateAt = 0
			}
			b = binenc.AppendString(b[:0], id)
			b = binenc.AppendBool(b, false) // not held
			b = binenc.AppendString(b, "")
			b = binary.AppendVarint(b, 0)
			b = binenc.AppendBool(b, hasState)
			b = binenc.AppendBytes(b, state)
			b = binary.AppendVarint(b, through)
			b = binary.AppendVarint(b, stateAt)
			out.record(b)
		}
	}
	d, err = s.record() // the dedupe record, copied as it is
	if err != nil {
		return cw.n, err
	}
	out.record(append(b[:0], d.Rest()...))
	if version >= 3 { // transactions: dropped
		if _, err := s.record(); err != nil {
			return cw.n, err
		}
	}
	if version >= 4 { // pending uploads: dropped
		d, err := s.record()
		if err != nil {
			return cw.n, err
		}
		for n := d.Uvarint(); n > 0 && d.Err() == nil; n-- {
			if _, err := s.record(); err != nil {
				return cw.n, err
			}
		}
		if d.Err() != nil {
			return cw.n, d.Err()
		}
	}
	want := s.crc.Sum32()
	var tr [4]byte
	if _, err := io.ReadFull(s.r, tr[:]); err != nil {
		return cw.n, err
	}
	if binary.BigEndian.Uint32(tr[:]) != want {
		return cw.n, errors.New("checksum mismatch")
	}
	if _, err := s.r.ReadByte(); err != io.EOF {
		return cw.n, errors.New("trailing bytes")
	}
	if out.err != nil {
		return cw.n, out.err
	}
	binary.BigEndian.PutUint32(tr[:], out.crc)
	if _, err := out.w.Write(tr[:]); err != nil {
		return cw.n, err
	}
	err = out.w.Flush()
	return cw.n, err
}
