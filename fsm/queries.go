package fsm

import "slices"

// ---- Queries ----

// Peek returns up to max messages of a target from sequence number fromSeq on, in
// sequence order, in every state (active, locked, deferred, scheduled), without locking
// them or changing their delivery count (S-LOCK-11). The results are copies.
func (f *FSM) Peek(t Target, fromSeq int64, max int) []*Message {
	_, st, err := f.lookup(t)
	if err != nil || max <= 0 {
		return nil
	}
	var out []*Message
	st.idx.Ascend(fromSeq, func(m *msg) bool {
		out = append(out, f.export(m))
		return len(out) < max
	})
	return out
}

// Get returns a copy of the message with sequence number seq in target t, or nil.
func (f *FSM) Get(t Target, seq int64) *Message {
	_, st, err := f.lookup(t)
	if err != nil {
		return nil
	}
	if m := st.idx.Get(seq); m != nil {
		return f.export(m)
	}
	return nil
}

// Receivable reports whether the command req, applied now, could return a message. It is
// a conservative pre-check that lets the leader skip proposing receives that would find
// nothing: it is never false when req would return a message at the fsm's current time
// (Now), and it is true, too, when req would fail (unknown target, receive-disabled
// entity, session not held by req.Owner, session required or not allowed), so that the
// caller proposes it and gets the error. It may be true when req then finds nothing (the
// available messages expire first). Max, Mode and Salt are ignored.
//
// Deferred, scheduled and locked messages are not receivable. Deadlines (a message lock
// or session lock expiring, a scheduled message activating) make messages receivable
// only once an entry at or after them is applied (every Apply applies the deadlines due
// at its time first, and the leader proposes a Tick at NextDeadline): a caller that got
// false waits for the next applied entry and asks again. Receivable does not change the
// fsm (unlike Receive, which also records receiver activity, S-IDLE-1).
func (f *FSM) Receivable(req Receive) bool {
	st, s, err := f.receivable(req.Target, req.SessionID, req.Owner)
	if err != nil {
		return true
	}
	if s != nil {
		return !s.avail.empty()
	}
	return !st.avail.empty()
}

// SessionAvailable reports whether AcceptSession with an empty SessionID ("next
// available", S-SES-2) on t, applied now, could lock a session: some session that nobody
// holds has an available message. Like Receivable it is conservative: true also when the
// command would fail (t unknown, not session-enabled, receive-disabled), never false when
// a session is available at the fsm's current time; a session whose lock expires becomes
// available with the entry that applies the expiry. It does not change the fsm.
func (f *FSM) SessionAvailable(t Target) bool {
	e, err := f.sessionEntity(t)
	if err != nil || f.receiveDisabled(e) {
		return true
	}
	// Every free session with available messages has an entry in e.free naming its first
	// available message (offerSession; checkInvariants); stale entries are skipped here,
	// not popped, so the query leaves the heap as it is.
	for _, fe := range e.free {
		if s := fe.s; !s.held && e.sessions[s.id] == s && !s.avail.empty() && s.avail.peek().seq == fe.seq {
			return true
		}
	}
	return false
}

// SessionState returns a copy of a session's state, nil when it has none (S-SES-5).
func (f *FSM) SessionState(t Target, sessionID string) []byte {
	e, err := f.sessionEntity(t)
	if err != nil {
		return nil
	}
	if s := e.sessions[sessionID]; s != nil && s.state != nil {
		return slices.Clone(s.state)
	}
	return nil
}

// HeldSessionState returns a session's state (nil when none) for the holder of its
// lock: ErrSessionLockLost when owner does not hold the session, as Service Bus answers
// get-session-state from a client without the session's lock.
func (f *FSM) HeldSessionState(t Target, sessionID, owner string) ([]byte, error) {
	e, err := f.sessionEntity(t)
	if err != nil {
		return nil, err
	}
	s, err := f.heldSession(e, sessionID, owner)
	if err != nil {
		return nil, err
	}
	return slices.Clone(s.state), nil
}

// ListSessions returns, sorted, the ids of the sessions of a target that have messages
// or state (S-SES-1).
func (f *FSM) ListSessions(t Target) []string {
	e, err := f.sessionEntity(t)
	if err != nil {
		return nil
	}
	var ids []string
	for _, id := range sortedKeys(e.sessions) {
		if s := e.sessions[id]; s.count > 0 || s.state != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// SessionsUpdatedSince returns, sorted, the ids of the sessions of a target whose state
// was set at fsm time since or later and is still set (get-message-sessions with a
// last-updated-time).
func (f *FSM) SessionsUpdatedSince(t Target, since int64) []string {
	e, err := f.sessionEntity(t)
	if err != nil {
		return nil
	}
	var ids []string
	for _, id := range sortedKeys(e.sessions) {
		if s := e.sessions[id]; s.state != nil && s.stateAt >= since {
			ids = append(ids, id)
		}
	}
	return ids
}

// SessionInfo describes a session's lock for the management path.
type SessionInfo struct {
	ID          string
	Held        bool
	Owner       string
	LockedUntil int64
	Messages    int64
}

// Session returns the lock state of a session, and whether the session exists.
func (f *FSM) Session(t Target, sessionID string) (SessionInfo, bool) {
	e, err := f.sessionEntity(t)
	if err != nil {
		return SessionInfo{}, false
	}
	s := e.sessions[sessionID]
	if s == nil {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: s.id, Held: s.held, Owner: s.holder, LockedUntil: s.lockedUntil, Messages: s.count}, true
}

// Stats counts the messages of every target of a partition.
type Stats struct {
	Targets  []TargetStats // the queue or each subscription in config order, each main target before its DLQ
	Bytes    int64         // everything counted toward MaxSizeBytes (messages, session state, held transaction sends, pending chunked bodies)
	LastSeq  int64         // the last sequence number handed out
	LastSend int64         // S-IDLE-1: fsm time of the last send, schedule, cancel or update; 0 = none
	Locks    int64         // message locks held
	Sessions int64         // sessions with messages or state, all targets
}

// TargetStats counts the messages of one target. Active includes locked messages.
type TargetStats struct {
	Target      Target
	LastReceive int64 // S-IDLE-1: fsm time of the last receiver activity or update on the entity; 0 = none
	Active      int64
	Locked      int64
	Scheduled   int64
	Deferred    int64
	Bytes       int64
	// Oldest is the EnqueuedTime (ms) of the target's message with the lowest sequence
	// number, any state; 0 when the target is empty.
	Oldest int64
	// Counters counts events since this replica started or restored a snapshot.
	Counters Counters
}

// Counters counts what happened to one target's messages. They are kept by every
// replica as it applies commands (so every replica of a partition agrees on them for
// the same log), but they are not replicated state: a snapshot does not carry them, so
// they restart from zero when a replica restores one or restarts.
type Counters struct {
	Incoming     int64 // messages stored by a send or schedule (a topic's copies count per subscription)
	Outgoing     int64 // deliveries: peek-lock locks and receive-and-delete removals
	Completed    int64 // settled with Complete
	Abandoned    int64 // settled with Abandon (lock expiry is not counted here)
	DeadLettered int64 // moved to the dead-letter sub-queue, for any reason (counted on the main target)
	Expired      int64 // expired by their time to live (also counted as DeadLettered when dead-lettered on expiry)
}

// Total is every message of the target.
func (t TargetStats) Total() int64 { return t.Active + t.Scheduled + t.Deferred }

// LastReceive returns the fsm time of the last receiver activity (S-IDLE-1) on the
// entity of target t (its main queue and DLQ share it), 0 when none; false when t is
// unknown.
func (f *FSM) LastReceive(t Target) (int64, bool) {
	e, _, err := f.lookup(t)
	if err != nil {
		return 0, false
	}
	return e.lastReceive, true
}

// Stats returns the message counts and sizes of every target. It costs O(targets +
// sessions).
func (f *FSM) Stats() Stats {
	s := Stats{Bytes: f.bytes, LastSeq: f.lastSeq, LastSend: f.lastSend, Locks: int64(len(f.locks))}
	for _, e := range f.ents {
		for _, st := range []*store{e.main, e.dlq} {
			ts := TargetStats{Target: Target{Sub: e.name, DLQ: st.dlq}, LastReceive: e.lastReceive,
				Active: st.nActive, Locked: st.nLocked, Scheduled: st.nScheduled, Deferred: st.nDeferred,
				Bytes: st.bytes, Counters: st.ev}
			st.idx.Ascend(0, func(m *msg) bool { ts.Oldest = m.enq; return false })
			s.Targets = append(s.Targets, ts)
		}
		for _, ss := range e.sessions {
			if ss.count > 0 || ss.state != nil {
				s.Sessions++
			}
		}
	}
	return s
}
