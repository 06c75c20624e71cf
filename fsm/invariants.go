//go:build invariants || race

package fsm

import "fmt"

// invariantsOn: Apply checks the whole state after each entry (docs/principles.md, testing habit 12). Only
// in builds with the race detector or the invariants tag, and only while the partition
// holds at most invariantMaxMsgs messages, so large tests stay fast.
const invariantsOn = true

const invariantMaxMsgs = 20_000

// checkInvariants panics if the derived state (counters, indexes, heaps, lock table,
// sessions) disagrees with the messages.
func (f *FSM) checkInvariants() {
	total := 0
	for _, e := range f.ents {
		total += e.main.idx.Len() + e.dlq.idx.Len()
	}
	if total > invariantMaxMsgs {
		return
	}
	fail := func(format string, args ...any) { panic(fmt.Sprintf("fsm invariant: "+format, args...)) }
	var bytes, memBytes int64
	locks := 0
	inHeap := 0
	for _, e := range f.ents {
		sessCount := map[string]int64{}
		for _, st := range []*store{e.main, e.dlq} {
			var n [3]int64
			var nLocked, b int64
			prev := int64(-1 << 63)
			st.idx.Ascend(-1<<63, func(m *msg) bool {
				if m.seq <= prev || m.seq > f.lastSeq {
					fail("%s: seq %d after %d (last %d)", e.name, m.seq, prev, f.lastSeq)
				}
				prev = m.seq
				if m.st != st {
					fail("message %d in the wrong store", m.seq)
				}
				n[m.state]++
				b += m.bytes()
				if m.sp != nil && m.payload != nil {
					fail("message %d: spilled and in memory", m.seq)
				}
				memBytes += int64(len(m.payload))
				if (m.flags&fSession != 0) != (!st.dlq && e.cfg.RequiresSession) {
					fail("message %d: session flag", m.seq)
				}
				var s *session
				if m.flags&fSession != 0 {
					sessCount[m.sessionID()]++
					s = e.sessions[m.sessionID()]
					if s == nil {
						fail("message %d: no session %q", m.seq, m.sessionID())
					}
				}
				if m.locked() {
					nLocked++
					locks++
					if f.locks[m.lockCtr] != m {
						fail("message %d: not in the lock table", m.seq)
					}
					if s != nil && m.flags&fPinned == 0 && (s.locked[m.lockCtr] != m || !s.held) {
						fail("message %d: locked outside a held session", m.seq)
					}
					if s != nil && m.flags&fPinned != 0 && s.locked[m.lockCtr] != nil {
						fail("message %d: pinned by a transaction but in its session's locks", m.seq)
					}
					if m.state == StateScheduled {
						fail("message %d: scheduled and locked", m.seq)
					}
				}
				avail := m.state == StateActive && !m.locked()
				inAvail := m.aidx >= 0 || m.flags&fRing != 0
				if avail != inAvail {
					fail("message %d: available %v but indexed %v", m.seq, avail, inAvail)
				}
				if d := m.deadlineOf(); d != NeverMs {
					inHeap++
					if m.hidx < 0 || int(m.hidx) >= f.dl.len() || m.due != d {
						fail("message %d: deadline %d not indexed", m.seq, d)
					} else if he := f.dl.h[m.hidx]; he.p != m || he.due != d || he.tie != m.seq || he.ord != st.ord {
						fail("message %d: its deadline heap entry is %d/%d/%d, want %d/%d/%d", m.seq, he.due, he.tie, he.ord, d, m.seq, st.ord)
					}
					if d <= f.now {
						fail("message %d: deadline %d overdue at %d", m.seq, d, f.now)
					}
				} else if m.hidx >= 0 {
					fail("message %d: in the deadline heap without a deadline", m.seq)
				}
				return true
			})
			if n[StateActive] != st.nActive || n[StateDeferred] != st.nDeferred || n[StateScheduled] != st.nScheduled ||
				nLocked != st.nLocked || b != st.bytes {
				fail("%s/%v: counters %d/%d/%d/%d/%d, actual %v %d %d", e.name, st.dlq, st.nActive, st.nDeferred,
					st.nScheduled, st.nLocked, st.bytes, n, nLocked, b)
			}
			bytes += b
		}
		offered := map[freeEnt]bool{}
		for _, fe := range e.free {
			offered[fe] = true
		}
		for _, id := range sortedKeys(e.sessions) {
			s := e.sessions[id]
			if !s.held && !s.avail.empty() && !offered[freeEnt{seq: s.avail.peek().seq, s: s}] {
				fail("session %q is free with messages but not offered", id)
			}
			if s.count != sessCount[id] {
				fail("session %q: count %d, actual %d", id, s.count, sessCount[id])
			}
			bytes += int64(len(s.state))
			if s.held != (s.hidx >= 0) || (s.held && s.lockedUntil <= f.now) {
				fail("session %q: held %v, heap %d, until %d", id, s.held, s.hidx, s.lockedUntil)
			} else if s.hidx >= int32(f.sh.len()) {
				fail("session %q: heap position %d of %d", id, s.hidx, f.sh.len())
			} else if s.hidx >= 0 {
				if he := f.sh.h[s.hidx]; he.p != s || he.due != s.lockedUntil || he.tie != s.id || he.ord != s.st.ord {
					fail("session %q: its heap entry is %d/%q/%d, want %d/%q/%d", id, he.due, he.tie, he.ord, s.lockedUntil, s.id, s.st.ord)
				}
			}
			if !s.held && len(s.locked) > 0 {
				fail("session %q: locks without a holder", id)
			}
		}
	}
	for _, id := range sortedKeys(f.prepared) {
		bytes += f.prepared[id].reserved
	}
	for _, id := range sortedKeys(f.uploads) {
		u := f.uploads[id]
		var b int64
		have := 0
		for _, ch := range u.chunks {
			if ch != nil {
				b += int64(len(ch))
				have++
			}
		}
		if b != u.bytes || have != u.have || u.deadline <= f.now {
			fail("upload %q: bytes %d/%d, chunks %d/%d, deadline %d at %d", id, u.bytes, b, u.have, have, u.deadline, f.now)
		}
		bytes += b
	}
	if bytes != f.bytes {
		fail("bytes %d, actual %d", f.bytes, bytes)
	}
	if memBytes != f.memBytes {
		fail("bytes in memory %d, actual %d", f.memBytes, memBytes)
	}
	if locks != len(f.locks) {
		fail("lock table has %d, messages %d", len(f.locks), locks)
	}
	if i := f.dl.h.disorder(); i >= 0 {
		fail("deadline heap out of order at %d of %d", i, f.dl.len())
	}
	if i := f.sh.h.disorder(); i >= 0 {
		fail("session heap out of order at %d of %d", i, f.sh.len())
	}
	if inHeap != f.dl.len() {
		fail("deadline heap has %d, messages %d", f.dl.len(), inHeap)
	}
}
