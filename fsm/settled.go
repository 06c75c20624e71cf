package fsm

import "encoding/binary"

// ---- Settlement outcomes remembered (S-LOCK-12) ----
//
// A settlement whose answer was lost (its partition leader died after committing it)
// is sent again by the broker or the client with the same lock token. The first
// attempt removed the lock, so without a memory the repeat would fail with lock-lost
// and the client would wait for a redelivery that never comes. The fsm therefore
// remembers each settlement by lock counter until the lock it ended would have expired,
// and a repeat of the same disposition on the same target then succeeds again without
// changing anything. Any other use of the token (another disposition, a renewal, a
// settlement after the lock's expiry) still fails with lock-lost.
//
// Every replica builds the memory from the Raft log, so the follower that becomes leader
// after a failover has it. It is not written to snapshots: a replica restored from one (a
// restart, or a follower caught up by snapshot) forgets the settlements made before it,
// and a repeat it answers is lock-lost as before S-LOCK-12. Keeping it out leaves the
// snapshot format, and so a rolling upgrade's older followers, untouched; a repeat does
// not change state either way, so replicas stay identical (Digest). It costs about 50
// bytes per settlement for at most LockDuration: at 10,000 settlements a second and the
// default one-minute lock, about 30 MB per replica.

// settledRec is one settlement's outcome.
type settledRec struct {
	st    *store
	until int64 // the settled lock's expiry: remembered while f.now < until
	salt  uint32
	disp  Disposition
}

// settledEnt orders the remembered settlements by when they were made; settledq[settledh:]
// is live. Expiries differ between entities and renewals, so an entry may outlive its
// expiry until the ones before it go: the memory lasts at least as long as the lock.
type settledEnt struct {
	ctr   uint64
	until int64
}

// rememberSettled records that the lock of m, a message locked in st, ended with disp.
func (f *FSM) rememberSettled(st *store, m *msg, disp Disposition) {
	until := m.lockedUntil
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil && s.lockedUntil > until {
			until = s.lockedUntil
		}
	}
	if until <= f.now {
		return
	}
	if f.settled == nil {
		f.settled = map[uint64]settledRec{}
	}
	f.settled[m.lockCtr] = settledRec{st: st, until: until, salt: m.salt, disp: disp}
	f.settledq = append(f.settledq, settledEnt{ctr: m.lockCtr, until: until})
}

// settledBefore reports whether t names a lock in st that was already settled with
// disp and would not yet have expired: the repeat of a settlement that applied.
func (f *FSM) settledBefore(st *store, t LockToken, disp Disposition) bool {
	ctr, salt, group := tokenParts(t)
	r, ok := f.settled[ctr]
	return ok && group == f.cfg.GroupID && r.st == st && r.salt == salt && r.disp == disp && f.now < r.until
}

// pruneSettled forgets the settlements whose locks have expired (Apply, after the
// deadlines).
func (f *FSM) pruneSettled() {
	f.settledq, f.settledh = pruneFront(f.settledq, f.settledh,
		func(e settledEnt) bool { return e.until <= f.now },
		func(e settledEnt) {
			if r, ok := f.settled[e.ctr]; ok && r.until == e.until {
				delete(f.settled, e.ctr)
			}
		})
}

// tokenParts splits a lock token into its counter, salt and partition GroupID.
func tokenParts(t LockToken) (ctr uint64, salt, group uint32) {
	return binary.BigEndian.Uint64(t[8:16]), binary.BigEndian.Uint32(t[4:8]), binary.BigEndian.Uint32(t[0:4])
}
