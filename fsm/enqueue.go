package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// ---- Tick ----

func (f *FSM) runDeadlines() {
	for f.dl.len() > 0 {
		m, due := f.dl.next()
		if due > f.now {
			break
		}
		f.dl.remove(m)
		switch {
		case m.locked(): // S-LOCK-4: lock expiry has the effect of abandon
			f.unlock(m)
			f.requeue(m, true)
		case m.state == StateScheduled: // S-SCH-1
			m.st.countState(StateScheduled, -1)
			m.state = StateActive
			m.st.countState(StateActive, 1)
			if !m.st.dlq && m.expires <= f.now {
				f.expire(m)
			} else {
				f.place(m)
			}
		default: // S-TTL-4
			f.unavail(m)
			f.expire(m)
		}
	}
	for f.sh.len() > 0 {
		s, until := f.sh.next()
		if until > f.now {
			break
		}
		f.endSession(s, true) // S-SES-6: counted
	}
	f.pruneDup()
	f.dropExpiredUploads()
}

func (f *FSM) pruneDup() {
	f.dupq, f.duph = pruneFront(f.dupq, f.duph,
		func(d dupEnt) bool { return satAdd(d.at, f.cfg.DuplicateWindowMs) <= f.now },
		func(d dupEnt) {
			if r, ok := f.dup[d.id]; ok && r.at == d.at && r.seq == d.seq {
				delete(f.dup, d.id)
			}
		})
}

// pruneFront drops the entries at the front of a time-ordered queue (q[h:] is live)
// while expired holds, calling forget for each, and returns the queue and its new head.
// The slice is compacted once more than half of it is dead, and emptied when all is, so
// its memory follows what is live. The dedupe history and the remembered settlements
// (settled.go) use it.
func pruneFront[T any](q []T, h int, expired func(T) bool, forget func(T)) ([]T, int) {
	var zero T
	for h < len(q) && expired(q[h]) {
		forget(q[h])
		q[h] = zero
		h++
	}
	switch {
	case h == len(q):
		return q[:0], 0
	case h > 1024 && h*2 > len(q):
		n := copy(q, q[h:])
		clear(q[n:])
		return q[:n], 0
	}
	return q, h
}

// endSession releases a held session: on lock expiry (counted: S-SES-6 increments the
// delivery count of its locked messages) or on close (not counted).
func (f *FSM) endSession(s *session, counted bool) {
	f.sh.remove(s)
	s.held, s.holder, s.lockedUntil = false, "", 0
	if len(s.locked) > 0 {
		ms := make([]*msg, 0, len(s.locked))
		for _, m := range s.locked {
			ms = append(ms, m)
		}
		slices.SortFunc(ms, func(a, b *msg) int { return cmp.Compare(a.seq, b.seq) })
		for _, m := range ms {
			f.unlock(m)
			f.requeue(m, counted)
		}
	}
	f.offerSession(s)
	f.gcSession(s)
}

// ---- Enqueue / Schedule ----

type planned struct {
	st *store
	m  *msg
}

func msgSize(m *Message) int64 {
	if m.Size > 0 {
		return m.Size
	}
	return int64(len(m.Payload))
}

// ttlFor is the effective TTL of S-TTL-1.
func ttlFor(msgTTL int64, defs ...int64) int64 {
	t := NeverMs
	if msgTTL > 0 {
		t = msgTTL
	}
	for _, d := range defs {
		if d > 0 && d < t {
			t = d
		}
	}
	return t
}

func (f *FSM) enqueue(ms []*Message, r *Result) { f.enqueueMode(ms, r, enqStore) }

// enqueue modes: enqStore validates and stores; enqDryRun validates (quota included)
// and returns the bytes the batch would add, storing nothing (TxnPrepare); enqForce
// stores without the checks a prepared transaction already passed (TxnCommit: status,
// size, session, quota), skipping a subscription whose rules now refuse the copy.
type enqMode uint8

const (
	enqStore enqMode = iota
	enqDryRun
	enqForce
)

func (f *FSM) enqueueMode(ms []*Message, r *Result, mode enqMode) int64 {
	force := mode == enqForce
	if s := f.cfg.Queue.Status; !force && (s == StatusDisabled || s == StatusSendDisabled) {
		r.Err = ErrEntityDisabled
		return 0
	}
	for i, m := range ms {
		if m == nil {
			r.Err = fmt.Errorf("%w: message %d is nil", ErrBadCommand, i)
			return 0
		}
		if force {
			continue
		}
		if max := f.cfg.MaxMessageSizeBytes; max > 0 && msgSize(m) > max { // S-SEND-6
			r.Err = fmt.Errorf("%w: message %d is %d bytes, the limit is %d", ErrMessageTooLarge, i, msgSize(m), max)
			return 0
		}
		if f.cfg.Kind == KindQueue && f.ents[0].cfg.RequiresSession && m.SessionID == "" { // S-SES-1
			r.Err = fmt.Errorf("%w: message %d has no SessionId", ErrSessionRequired, i)
			return 0
		}
	}
	dedupe := f.cfg.RequiresDuplicateDetection
	var inBatch map[string]int64
	seqs := make([]int64, len(ms))
	var planBuf [8]planned
	plan := planBuf[:0]
	var added int64
	seq := f.lastSeq
	for i, m := range ms {
		if dedupe && m.MessageID != "" { // S-DUP-1
			if rec, ok := f.dup[m.MessageID]; ok {
				seqs[i] = rec.seq
				r.Duplicates++
				continue
			}
			if s, ok := inBatch[m.MessageID]; ok {
				seqs[i] = s
				r.Duplicates++
				continue
			}
		}
		seq++
		seqs[i] = seq
		if dedupe && m.MessageID != "" && len(ms) > 1 {
			if inBatch == nil {
				inBatch = map[string]int64{}
			}
			inBatch[m.MessageID] = seq
		}
		enq := f.now
		state := StateActive
		if m.ScheduledEnqueueTime > f.now {
			enq = m.ScheduledEnqueueTime // S-TTL-2
			state = StateScheduled
		}
		app := m.App
		if len(app) > 0 { // the fsm owns its copy; actions and settlements copy on write
			app = slices.Clone(app)
		}
		base := &msg{seq: seq, enq: enq, sched: m.ScheduledEnqueueTime, ttl: m.TimeToLive,
			size: m.Size, payload: m.Payload, app: app, state: state}
		if m.Modified {
			base.flags |= fModified
		}
		if m.DeadLetter != nil {
			// A message forwarded out of a dead-letter queue keeps why it was dead-lettered
			// and where (DeadLetterSource, S-FWD-1, S-LOCK-6).
			d := *m.DeadLetter
			base.dl = &d
		}
		if f.cfg.Kind == KindQueue {
			e := f.ents[0]
			base.strs = packStrings(&m.Properties)
			base.expires = satAdd(enq, ttlFor(m.TimeToLive, e.cfg.DefaultTTLMs)) // S-TTL-1
			if e.cfg.RequiresSession {
				base.flags |= fSession
			}
			plan = append(plan, planned{e.main, base})
			added += base.bytes()
			continue
		}
		p := m.Properties // what the filters see (S-TOP-1)
		p.SequenceNumber, p.EnqueuedTime, p.App = seq, enq, app
		strs := ""
		for _, e := range f.ents { // S-TOP-1 fan-out
			cp, toDLQ, err := f.route(e, &p)
			if err != nil && force {
				continue // the subscription changed since the prepare: no copy for it
			}
			if err != nil {
				r.Err = err
				return 0
			}
			if cp == nil {
				continue
			}
			c := *base
			c.app = cp.App
			c.expires = satAdd(p.EnqueuedTime, ttlFor(m.TimeToLive, e.cfg.DefaultTTLMs, f.cfg.Queue.DefaultTTLMs))
			if sameStrings(cp, &p) {
				if strs == "" {
					strs = packStrings(&p)
				}
				c.strs = strs
			} else {
				c.strs = packStrings(cp)
				c.flags |= fModified
			}
			if len(cp.App) != len(p.App) || (len(p.App) > 0 && &cp.App[0] != &p.App[0]) {
				c.flags |= fModified
			}
			st := e.main
			if toDLQ {
				st = e.dlq
				c.state = StateActive
				c.flags |= fModified
				dp := rule.Properties{App: c.app}
				dp.Set("DeadLetterReason", rule.Value{Kind: rule.KindString, S: "FilterEvaluationException"})
				dp.Set("DeadLetterErrorDescription", rule.Value{Kind: rule.KindString, S: toDLQErr})
				c.app = dp.App
				c.dl = &DeadLetterInfo{Reason: "FilterEvaluationException", Description: toDLQErr}
			} else if e.cfg.RequiresSession {
				c.flags |= fSession
			}
			plan = append(plan, planned{st, &c})
			added += c.bytes()
		}
	}
	if max := f.cfg.MaxSizeBytes; !force && max > 0 && added > 0 && f.bytes+added > max { // S-SEND-6
		r.Err = fmt.Errorf("%w: %d + %d bytes exceeds %d", ErrQuotaExceeded, f.bytes, added, max)
		return 0
	}
	if mode == enqDryRun {
		return added
	}
	// Commit: from here on nothing fails (S-SEND-5: all or nothing).
	f.lastSeq = seq
	var spilledP []byte // the last body spilled and where it went: a topic's copies share it
	var spilled Spilled
	for _, pl := range plan {
		pl.st.ev.Incoming++
		if spilled != nil && samePayload(pl.m.payload, spilledP) {
			pl.m.sp, pl.m.payload = spilled, nil
		} else if p := pl.m.payload; f.bodies != nil && len(p) > 0 {
			f.spill(pl.m)
			if pl.m.sp != nil {
				spilledP, spilled = p, pl.m.sp
			}
		}
		f.insert(pl.st, pl.m)
	}
	if dedupe {
		for i, m := range ms {
			if m.MessageID == "" || seqs[i] <= 0 {
				continue
			}
			if _, ok := f.dup[m.MessageID]; !ok {
				f.dup[m.MessageID] = dupRec{seq: seqs[i], at: f.now}
				f.dupq = append(f.dupq, dupEnt{at: f.now, seq: seqs[i], id: m.MessageID})
			}
		}
	}
	r.SeqNos = seqs
	return added
}

// samePayload reports whether a and b are the same bytes in memory (a topic's copies of
// one message).
func samePayload(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

const toDLQErr = "A subscription rule could not be evaluated for this message."

func sameStrings(a, b *rule.Properties) bool {
	return a.MessageID == b.MessageID && a.CorrelationID == b.CorrelationID && a.To == b.To &&
		a.ReplyTo == b.ReplyTo && a.Subject == b.Subject && a.SessionID == b.SessionID &&
		a.ReplyToSessionID == b.ReplyToSessionID && a.ContentType == b.ContentType &&
		a.PartitionKey == b.PartitionKey
}

// route evaluates a subscription's rules for one message (S-TOP-1). It returns the
// properties of the subscription's copy (nil when the message does not enter), whether
// the copy goes to the dead-letter sub-queue because a filter failed, and an error that
// rejects the whole send.
func (f *FSM) route(e *entity, p *rule.Properties) (*rule.Properties, bool, error) {
	if e.cfg.Status == StatusDisabled {
		return nil, false, nil
	}
	var cp *rule.Properties
	var ferr error
	for _, cr := range e.rules {
		if cr.err != nil {
			ferr = cr.err
			continue
		}
		ok, err := cr.r.Filter.Match(p)
		if err != nil {
			ferr = err
			continue
		}
		if !ok {
			continue
		}
		if cp == nil {
			c := *p
			cp = &c
		}
		if cr.r.Action != nil {
			if err := cr.r.Action.Apply(cp); err != nil { // an action that fails spoils the copy
				cp, ferr = nil, err
				break
			}
		}
	}
	if cp == nil {
		if ferr != nil && e.cfg.DeadLetterOnFilterErrors {
			c := *p
			return &c, true, nil
		}
		return nil, false, nil
	}
	if e.cfg.RequiresSession && cp.SessionID == "" { // S-SES-1
		return nil, false, fmt.Errorf("%w: subscription %q requires a SessionId", ErrSessionRequired, e.name)
	}
	return cp, false, nil
}
