package fsm

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// FSM is the replicated state of one entity partition: a queue partition, or a topic
// partition with the same partition of each of its subscriptions. See doc.go and
// docs/fsm.md.
//
// FSM is not safe for concurrent use: one goroutine (raft's apply loop) owns it, and
// queries run on that goroutine or under the caller's lock.
type FSM struct {
	cfg     Config
	now     int64  // max Entry.Now applied so far
	lastSeq int64  // the last sequence number handed out (S-SEND-5: never reused)
	lockCtr uint64 // the last lock counter handed out (bytes 8..15 of a LockToken)

	lastSend int64 // S-IDLE-1: last accepted send, schedule or cancel (or update)

	ents   []*entity          // the queue, or the subscriptions in config order
	byName map[string]*entity // lookup only, never iterated
	locks  map[uint64]*msg    // non-DLQ and DLQ locks by counter; lookup only, never iterated
	dl     deadlineHeap       // messages with a pending deadline
	sh     sessionHeap        // held sessions by lock expiry
	bytes  int64              // everything counted toward MaxSizeBytes

	dup  map[string]dupRec // S-DUP-1 history by MessageId; lookup only
	dupq []dupEnt          // the same history in insertion (= time) order; dupq[duph:] is live
	duph int
}

type dupRec struct{ seq, at int64 }

type dupEnt struct {
	at  int64
	seq int64
	id  string
}

// entity is a queue or one subscription: its settings, compiled rules, its main and
// dead-letter stores and its sessions.
type entity struct {
	name        string
	lastReceive int64 // S-IDLE-1: last receiver activity (or update) on the entity or its DLQ
	cfg         QueueConfig
	specs       []rule.Spec
	rules       []compiledRule
	main        *store
	dlq         *store
	sessions    map[string]*session // lookup only; iterated only after sorting the keys
	free        freeHeap            // candidates for the next available session, see offerSession
}

type compiledRule struct {
	r   *rule.Rule
	err error // a rule that does not compile fails every evaluation (S-TOP-1 filter error)
}

// store is one target: the messages of a queue or subscription, or of its dead-letter
// sub-queue, with the available ones in a heap by sequence number.
type store struct {
	ent   *entity
	dlq   bool
	ord   int32 // position in the partition, for a total order across stores
	idx   msgStore
	avail availQ // available messages (non-session stores only)

	nActive, nLocked, nScheduled, nDeferred, bytes int64
}

// session is one session of a session-enabled queue or subscription (S-SES-*).
type session struct {
	id            string
	st            *store
	avail         availQ
	held          bool
	holder        string
	lockedUntil   int64
	hidx          int32
	state         []byte
	count         int64           // messages of the session in the main store, any state
	locked        map[uint64]*msg // messages locked under the current session lock; sorted before iteration
	expireThrough int64           // S-TTL-5: on the next accept or receive, expire available messages up to this seq
}

// New returns an empty FSM for cfg. Rules that do not compile make every evaluation of
// themselves fail, which S-TOP-1 turns into skipping or dead-lettering the copy; callers
// should reject such configurations before (Config.Validate).
func New(cfg Config) *FSM {
	f := &FSM{
		byName: map[string]*entity{},
		locks:  map[uint64]*msg{},
		dup:    map[string]dupRec{},
	}
	f.setConfig(cfg)
	return f
}

// Validate reports what is wrong with c, if anything: the checks the fsm relies on. The
// admin layer applies the S-ENT-2 bounds.
func (c *Config) Validate() error {
	if c.Kind != KindQueue && c.Kind != KindTopic {
		return fmt.Errorf("fsm: entity kind %d", c.Kind)
	}
	check := func(name string, q *QueueConfig) error {
		if q.LockDurationMs <= 0 {
			return fmt.Errorf("fsm: %s: LockDurationMs must be > 0", name)
		}
		if q.MaxDeliveryCount < 1 {
			return fmt.Errorf("fsm: %s: MaxDeliveryCount must be >= 1", name)
		}
		if q.DefaultTTLMs <= 0 {
			return fmt.Errorf("fsm: %s: DefaultTTLMs must be > 0", name)
		}
		return nil
	}
	if c.Kind == KindQueue {
		if err := check("queue", &c.Queue); err != nil {
			return err
		}
		if len(c.Subscriptions) != 0 {
			return fmt.Errorf("fsm: a queue has no subscriptions")
		}
	}
	if c.RequiresDuplicateDetection && c.DuplicateWindowMs <= 0 {
		return fmt.Errorf("fsm: DuplicateWindowMs must be > 0")
	}
	seen := map[string]bool{}
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		if s.Name == "" || seen[s.Name] {
			return fmt.Errorf("fsm: subscription name %q empty or repeated", s.Name)
		}
		seen[s.Name] = true
		if err := check("subscription "+s.Name, &s.Queue); err != nil {
			return err
		}
		for _, sp := range s.Rules {
			if _, err := rule.Compile(sp); err != nil {
				return fmt.Errorf("fsm: subscription %s: %w", s.Name, err)
			}
		}
	}
	return nil
}

// DefaultQueueConfig returns the S-ENT-2 defaults.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{LockDurationMs: 60_000, MaxDeliveryCount: 10, DefaultTTLMs: NeverMs}
}

func newEntity(name string, q QueueConfig) *entity {
	e := &entity{name: name, cfg: q, sessions: map[string]*session{}}
	e.main = &store{ent: e, idx: &seqIndex{}}
	e.dlq = &store{ent: e, dlq: true, idx: &seqIndex{}}
	e.main.avail.owner, e.dlq.avail.owner = e.main, e.dlq
	return e
}

func compileRules(specs []rule.Spec) []compiledRule {
	rs := make([]compiledRule, len(specs))
	for i, s := range specs {
		rs[i].r, rs[i].err = rule.Compile(s)
		if rs[i].err == nil && rs[i].r == nil {
			rs[i].err = fmt.Errorf("fsm: rule %q compiled to nothing", s.Name)
		}
	}
	return rs
}

// setConfig installs cfg. Entities that exist keep their messages and their
// RequiresSession (fixed at creation, S-ENT-2); subscriptions no longer listed are
// deleted with their messages; new ones start empty. The kind is fixed at New.
func (f *FSM) setConfig(cfg Config) {
	switch {
	case f.cfg.Kind != 0:
		cfg.Kind = f.cfg.Kind
	case cfg.Kind != KindTopic:
		cfg.Kind = KindQueue // a zero Config is a queue
	}
	var ents []*entity
	if cfg.Kind == KindTopic {
		for i := range cfg.Subscriptions {
			sc := &cfg.Subscriptions[i]
			e := f.byName[sc.Name]
			if e == nil || slices.Contains(ents, e) {
				e = newEntity(sc.Name, sc.Queue)
			} else {
				sc.Queue.RequiresSession = e.cfg.RequiresSession
				e.cfg = sc.Queue
			}
			e.specs = sc.Rules
			e.rules = compileRules(sc.Rules)
			ents = append(ents, e)
		}
	} else {
		var e *entity
		if len(f.ents) == 1 {
			e = f.ents[0]
			cfg.Queue.RequiresSession = e.cfg.RequiresSession
			e.cfg = cfg.Queue
		} else {
			e = newEntity("", cfg.Queue)
		}
		ents = []*entity{e}
	}
	for _, old := range f.ents {
		if !slices.Contains(ents, old) {
			f.dropEntity(old)
		}
	}
	f.ents = ents
	clear(f.byName)
	for i, e := range ents {
		e.main.ord, e.dlq.ord = int32(2*i), int32(2*i+1)
		if _, dup := f.byName[e.name]; !dup {
			f.byName[e.name] = e
		}
	}
	f.cfg = cfg
}

func (f *FSM) dropEntity(e *entity) {
	for _, st := range []*store{e.main, e.dlq} {
		var all []*msg
		st.idx.Ascend(0, func(m *msg) bool { all = append(all, m); return true })
		for _, m := range all {
			f.remove(m)
		}
	}
	for _, id := range sortedKeys(e.sessions) {
		s := e.sessions[id]
		f.sh.remove(s)
		f.bytes -= int64(len(s.state))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ---- Apply ----

// Apply applies e at time max(Now(), e.Now) and returns one Result per command. Before
// the commands run, every deadline at or before that time takes effect (as a Tick
// would), so no command sees an expired lock or message (S-TTL-3, S-LOCK-9).
func (f *FSM) Apply(e *Entry) []Result {
	if e.Now > f.now {
		f.now = e.Now
	}
	f.runDeadlines()
	res := make([]Result, len(e.Cmds))
	for i, c := range e.Cmds {
		f.apply(c, &res[i])
	}
	f.runDeadlines() // nothing a command did may leave a deadline in the past
	if invariantsOn {
		f.checkInvariants()
	}
	return res
}

func (f *FSM) apply(c Command, r *Result) {
	switch c := c.(type) {
	case *Enqueue:
		f.enqueue(c.Messages, r)
	case *Schedule:
		f.enqueue(c.Messages, r)
	case *Receive:
		f.receive(c, r)
	case *ReceiveDeferred:
		f.receiveDeferred(c, r)
	case *Settle:
		f.settle(c, r)
	case *RenewLock:
		f.renewLock(c, r)
	case *AcceptSession:
		f.acceptSession(c, r)
	case *ReleaseSession:
		f.releaseSession(c, r)
	case *RenewSession:
		f.renewSession(c, r)
	case *SetSessionState:
		f.setSessionState(c, r)
	case *CancelScheduled:
		f.cancelScheduled(c, r)
	case *Tick:
		// Deadlines ran in Apply.
	case *UpdateEntity:
		f.updateEntity(c)
	case *Purge:
		f.purge(c, r)
	case nil:
		r.Err = fmt.Errorf("%w: nil command", ErrBadCommand)
		return
	default:
		r.Err = fmt.Errorf("%w: unknown command %T", ErrBadCommand, c)
		return
	}
	f.noteActivity(c, r)
}

// noteActivity records the activity S-IDLE-1 counts: sends and schedules (Enqueue,
// Schedule, CancelScheduled), receiver activity on an entity (receives, settlements,
// lock and session operations, on the entity or its DLQ), and updates (everything).
// Peeks are queries, not commands: the layer above counts them.
func (f *FSM) noteActivity(c Command, r *Result) {
	var t Target
	switch c := c.(type) {
	case *Enqueue, *Schedule, *CancelScheduled:
		if r.Err == nil {
			f.lastSend = f.now
		}
		return
	case *UpdateEntity:
		f.lastSend = f.now
		for _, e := range f.ents {
			e.lastReceive = f.now
		}
		return
	case *Receive:
		t = c.Target
	case *ReceiveDeferred:
		t = c.Target
	case *Settle:
		t = c.Target
	case *RenewLock:
		t = c.Target
	case *AcceptSession:
		t = c.Target
	case *ReleaseSession:
		t = c.Target
	case *RenewSession:
		t = c.Target
	case *SetSessionState:
		t = c.Target
	default:
		return
	}
	if e, _, err := f.lookup(t); err == nil {
		e.lastReceive = f.now
	}
}

// Now returns the fsm clock: the largest Entry.Now applied so far.
func (f *FSM) Now() int64 { return f.now }

// NextDeadline returns the earliest pending deadline (lock expiry, message expiry,
// scheduled activation, session lock expiry, duplicate-history pruning), NeverMs if none.
// The partition leader proposes a Tick at that time.
func (f *FSM) NextDeadline() int64 {
	d := NeverMs
	if len(f.dl) > 0 {
		d = f.dl[0].due
	}
	if len(f.sh) > 0 && f.sh[0].lockedUntil < d {
		d = f.sh[0].lockedUntil
	}
	if f.duph < len(f.dupq) {
		if t := satAdd(f.dupq[f.duph].at, f.cfg.DuplicateWindowMs); t < d {
			d = t
		}
	}
	return d
}

// Config returns the configuration in force. The caller must not modify its slices.
func (f *FSM) Config() Config { return f.cfg }

func satAdd(a, b int64) int64 {
	if b >= NeverMs-a {
		return NeverMs
	}
	return a + b
}

func (f *FSM) lookup(t Target) (*entity, *store, error) {
	if f.cfg.Kind == KindQueue && t.Sub != "" {
		return nil, nil, fmt.Errorf("%w: a queue has no subscription %q", ErrNotFound, t.Sub)
	}
	e := f.byName[t.Sub]
	if e == nil {
		return nil, nil, fmt.Errorf("%w: subscription %q", ErrNotFound, t.Sub)
	}
	if t.DLQ {
		return e, e.dlq, nil
	}
	return e, e.main, nil
}

func (f *FSM) receiveDisabled(e *entity) bool {
	s := e.cfg.Status
	if s == StatusDisabled || s == StatusReceiveDisabled {
		return true
	}
	return f.cfg.Kind == KindTopic && f.cfg.Queue.Status == StatusDisabled
}

// ---- message placement ----

// deadlineOf is the deadline a message waits for in its current state.
func (m *msg) deadlineOf() int64 {
	switch {
	case m.locked():
		if m.flags&fSession != 0 {
			return NeverMs // the session lock governs (S-SES-4)
		}
		return m.lockedUntil
	case m.state == StateScheduled:
		return m.enq // S-TTL-2: a scheduled message is enqueued at its scheduled time
	case m.st.dlq:
		return NeverMs // S-DLQ-1
	}
	return m.expires
}

func (f *FSM) session(m *msg) *session {
	return m.st.ent.sessions[m.sessionID()]
}

func (f *FSM) getSession(st *store, id string) *session {
	s := st.ent.sessions[id]
	if s == nil {
		s = &session{id: id, st: st, hidx: -1}
		s.avail.owner = st
		st.ent.sessions[id] = s
	}
	return s
}

// gcSession forgets a session that has nothing left (S-SES-1).
func (f *FSM) gcSession(s *session) {
	if s != nil && !s.held && s.count == 0 && s.state == nil && s.avail.empty() {
		delete(s.st.ent.sessions, s.id)
	}
}

func (st *store) countState(s MessageState, d int64) {
	switch s {
	case StateActive:
		st.nActive += d
	case StateDeferred:
		st.nDeferred += d
	case StateScheduled:
		st.nScheduled += d
	}
}

// insert adds m to st and places it by its state.
func (f *FSM) insert(st *store, m *msg) {
	m.st = st
	m.hidx, m.aidx = -1, -1
	st.idx.Put(m)
	st.countState(m.state, 1)
	b := m.bytes()
	st.bytes += b
	f.bytes += b
	if m.flags&fSession != 0 {
		f.getSession(st, m.sessionID()).count++
	}
	f.place(m)
}

// place puts an unlocked message where its state says: available heap and deadline.
func (f *FSM) place(m *msg) {
	if m.state == StateActive && !m.locked() {
		if m.flags&fSession != 0 {
			s := f.session(m)
			s.avail.push(m)
			if s.avail.peek() == m {
				f.offerSession(s)
			}
		} else {
			m.st.avail.push(m)
		}
	}
	f.dl.set(m, m.deadlineOf())
}

func (f *FSM) unavail(m *msg) {
	if m.aidx < 0 && m.flags&fRing == 0 {
		return
	}
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			s.avail.remove(m)
			f.offerSession(s) // its first available message may have changed
		}
		return
	}
	m.st.avail.remove(m)
}

// offerSession records that s may be the next available session (S-SES-2). The entity's
// free heap holds (first available seq, session) entries; entries that no longer match
// their session (held, emptied, head changed, forgotten) are dropped when they reach the
// top, and the heap is rebuilt when stale entries outnumber the sessions.
func (f *FSM) offerSession(s *session) {
	if s.held || s.avail.empty() {
		return
	}
	e := s.st.ent
	e.free.push(freeEnt{seq: s.avail.peek().seq, s: s})
	if len(e.free) > 2*len(e.sessions)+64 {
		e.free = e.free[:0]
		for _, id := range sortedKeys(e.sessions) {
			if c := e.sessions[id]; !c.held && !c.avail.empty() {
				e.free.push(freeEnt{seq: c.avail.peek().seq, s: c})
			}
		}
	}
}

// nextFreeSession returns the free session whose first available message has the lowest
// sequence number, or nil.
func (f *FSM) nextFreeSession(e *entity) *session {
	for len(e.free) > 0 {
		top := e.free[0]
		s := top.s
		if !s.held && e.sessions[s.id] == s && !s.avail.empty() && s.avail.peek().seq == top.seq {
			return s
		}
		e.free.pop()
	}
	return nil
}

// remove deletes m from its store and every index.
func (f *FSM) remove(m *msg) {
	st := m.st
	f.unavail(m)
	f.dl.remove(m)
	if m.locked() {
		f.unlock(m)
	}
	st.idx.Delete(m.seq)
	st.countState(m.state, -1)
	b := m.bytes()
	st.bytes -= b
	f.bytes -= b
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			s.count--
			f.gcSession(s)
		}
	}
}

func (f *FSM) unlock(m *msg) {
	delete(f.locks, m.lockCtr)
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil {
			delete(s.locked, m.lockCtr)
		}
	}
	m.flags &^= fLocked
	m.lockedUntil = 0
	m.st.nLocked--
}

// requeue returns an unlocked message to its store after abandon, lock expiry or
// release. counted is false for release (S-SES-6, Release disposition): the next
// delivery then does not increment DeliveryCount, and S-LOCK-5 does not apply. In a
// dead-letter sub-queue no delivery is counted (S-DLQ-1): Service Bus keeps the count a
// message had when it was dead-lettered.
func (f *FSM) requeue(m *msg, counted bool) {
	if !counted || m.st.dlq {
		m.flags |= fSkipCount
	}
	if !m.st.dlq {
		if max := m.st.ent.cfg.MaxDeliveryCount; counted && max > 0 && m.dcount >= max {
			f.deadLetter(m, "MaxDeliveryCountExceeded", // S-LOCK-5
				fmt.Sprintf("Message could not be consumed after %d delivery attempts.", max), nil)
			return
		}
		if m.expires <= f.now { // S-TTL-3
			f.expire(m)
			return
		}
	}
	f.place(m)
}

// expire applies S-TTL-4 to an unlocked message of a main store.
func (f *FSM) expire(m *msg) {
	if m.flags&fSession != 0 {
		if s := f.session(m); s != nil && f.lastSeq > s.expireThrough {
			s.expireThrough = f.lastSeq // S-TTL-5
		}
	}
	if m.st.ent.cfg.DeadLetterOnExpiration {
		f.deadLetter(m, "TTLExpiredException", "The message expired and was dead lettered.", nil)
		return
	}
	f.remove(m)
}

// deadLetter moves m from a main store to its dead-letter sub-queue (S-LOCK-6). The
// reason and description go into DeadLetter and into the application properties
// DeadLetterReason and DeadLetterErrorDescription, as Service Bus stores them.
func (f *FSM) deadLetter(m *msg, reason, desc string, props []rule.Property) {
	e := m.st.ent
	f.remove(m)
	p := rule.Properties{App: m.app}
	for _, pr := range props {
		p.Set(pr.Key, pr.Value)
	}
	p.Set("DeadLetterReason", rule.Value{Kind: rule.KindString, S: reason})
	p.Set("DeadLetterErrorDescription", rule.Value{Kind: rule.KindString, S: desc})
	m.app = p.App
	m.dl = &DeadLetterInfo{Reason: reason, Description: desc}
	m.state = StateActive
	// Dead-lettering is not a failed delivery: the first receive from the dead-letter
	// sub-queue shows the count the message had (S-DLQ-1).
	m.flags = (m.flags &^ fSession) | fSkipCount | fModified
	f.insert(e.dlq, m)
}

// ---- Tick ----

func (f *FSM) runDeadlines() {
	for len(f.dl) > 0 && f.dl[0].due <= f.now {
		m := f.dl[0]
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
	for len(f.sh) > 0 && f.sh[0].lockedUntil <= f.now {
		f.endSession(f.sh[0], true) // S-SES-6: counted
	}
	f.pruneDup()
}

func (f *FSM) pruneDup() {
	for f.duph < len(f.dupq) {
		d := f.dupq[f.duph]
		if satAdd(d.at, f.cfg.DuplicateWindowMs) > f.now {
			break
		}
		if r, ok := f.dup[d.id]; ok && r.at == d.at && r.seq == d.seq {
			delete(f.dup, d.id)
		}
		f.dupq[f.duph] = dupEnt{}
		f.duph++
	}
	if f.duph > 1024 && f.duph*2 > len(f.dupq) {
		n := copy(f.dupq, f.dupq[f.duph:])
		clear(f.dupq[n:])
		f.dupq = f.dupq[:n]
		f.duph = 0
	}
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

func (f *FSM) enqueue(ms []*Message, r *Result) {
	if s := f.cfg.Queue.Status; s == StatusDisabled || s == StatusSendDisabled {
		r.Err = ErrEntityDisabled
		return
	}
	for i, m := range ms {
		if m == nil {
			r.Err = fmt.Errorf("%w: message %d is nil", ErrBadCommand, i)
			return
		}
		if max := f.cfg.MaxMessageSizeBytes; max > 0 && msgSize(m) > max { // S-SEND-6
			r.Err = fmt.Errorf("%w: message %d is %d bytes, the limit is %d", ErrMessageTooLarge, i, msgSize(m), max)
			return
		}
		if f.cfg.Kind == KindQueue && f.ents[0].cfg.RequiresSession && m.SessionID == "" { // S-SES-1
			r.Err = fmt.Errorf("%w: message %d has no SessionId", ErrSessionRequired, i)
			return
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
			if err != nil {
				r.Err = err
				return
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
	if max := f.cfg.MaxSizeBytes; max > 0 && added > 0 && f.bytes+added > max { // S-SEND-6
		r.Err = fmt.Errorf("%w: %d + %d bytes exceeds %d", ErrQuotaExceeded, f.bytes, added, max)
		return
	}
	// Commit: from here on nothing fails (S-SEND-5: all or nothing).
	f.lastSeq = seq
	for _, pl := range plan {
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

// ---- Receive ----

func (f *FSM) token(m *msg) LockToken {
	var t LockToken
	binary.BigEndian.PutUint32(t[0:4], f.cfg.GroupID)
	binary.BigEndian.PutUint32(t[4:8], m.salt)
	binary.BigEndian.PutUint64(t[8:16], m.lockCtr)
	return t
}

// deliver hands m (already out of the available heap) to a receiver.
func (f *FSM) deliver(m *msg, mode ReceiveMode, salt uint32, s *session) *Message {
	if m.flags&fSkipCount != 0 {
		m.flags &^= fSkipCount
	} else {
		m.dcount++ // S-LOCK-5: the first delivery is 1
	}
	if mode == ReceiveAndDelete { // S-RCV-1
		out := f.export(m)
		f.remove(m)
		return out
	}
	f.lockCtr++
	m.lockCtr, m.salt = f.lockCtr, salt
	m.flags |= fLocked
	m.st.nLocked++
	f.locks[m.lockCtr] = m
	if s != nil {
		if s.locked == nil {
			s.locked = map[uint64]*msg{}
		}
		s.locked[m.lockCtr] = m
	} else {
		m.lockedUntil = satAdd(f.now, m.st.ent.cfg.LockDurationMs) // S-LOCK-1
	}
	f.dl.set(m, m.deadlineOf())
	return f.export(m)
}

// export builds the Message view of m. Strings are sliced from m's packed strings and
// App and Payload are shared: the fsm never writes into them (it copies on write).
func (f *FSM) export(m *msg) *Message {
	out := &Message{Payload: m.payload}
	unpackStrings(m.strs, &out.Properties)
	out.TimeToLive, out.ScheduledEnqueueTime = m.ttl, m.sched
	out.SequenceNumber, out.EnqueuedTime, out.Size = m.seq, m.enq, m.size
	out.App = m.app
	out.ExpiresAt = m.expires
	out.DeliveryCount = m.dcount
	out.State = m.state
	if m.locked() {
		out.LockToken = f.token(m)
		out.LockedUntil = m.lockedUntil
		if m.flags&fSession != 0 {
			if s := f.session(m); s != nil {
				out.LockedUntil = s.lockedUntil
			}
		}
	}
	if m.dl != nil {
		d := *m.dl
		out.DeadLetter = &d
	}
	out.Modified = m.flags&fModified != 0
	return out
}

// heldSession checks that owner holds the named session of e (S-SES-2, S-SES-6).
func (f *FSM) heldSession(e *entity, id, owner string) (*session, error) {
	s := e.sessions[id]
	if s == nil || !s.held || (owner != "" && s.holder != owner) {
		return nil, fmt.Errorf("%w: session %q is not held by %q", ErrSessionLockLost, id, owner)
	}
	return s, nil
}

// sessionFor resolves a session-aware command's target: for a session entity's main
// store the session must be held by owner.
func (f *FSM) sessionFor(e *entity, st *store, id, owner string) (*session, error) {
	if st.dlq || !e.cfg.RequiresSession {
		if id != "" {
			return nil, fmt.Errorf("%w: %q", ErrSessionNotAllowed, e.name)
		}
		return nil, nil
	}
	if id == "" {
		return nil, ErrSessionRequired // S-SES-1
	}
	return f.heldSession(e, id, owner)
}

// expireSession applies S-TTL-5 when a receiver holds or accepts a session.
func (f *FSM) expireSession(s *session) {
	through := s.expireThrough
	for through > 0 {
		m := s.avail.peek()
		if m == nil || m.seq > through {
			break
		}
		s.avail.remove(m)
		f.expire(m)
	}
	s.expireThrough = 0
}

// receivable resolves what a receive takes from: the target's store, and its session
// when one is named (held by owner, S-SES-2). It fails for an unknown target, an entity
// that does not allow receives (S-ENT-2 Status), or a session not held by owner.
func (f *FSM) receivable(t Target, sessionID, owner string) (*store, *session, error) {
	e, st, err := f.lookup(t)
	if err != nil {
		return nil, nil, err
	}
	if f.receiveDisabled(e) {
		return nil, nil, ErrEntityDisabled
	}
	s, err := f.sessionFor(e, st, sessionID, owner)
	if err != nil {
		return nil, nil, err
	}
	return st, s, nil
}

func (f *FSM) receive(c *Receive, r *Result) {
	st, s, err := f.receivable(c.Target, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	h := &st.avail
	if s != nil {
		f.expireSession(s)
		h = &s.avail
	}
	for n := int32(0); n < c.Max; {
		m := h.peek()
		if m == nil {
			break
		}
		h.remove(m)
		if !st.dlq && m.expires <= f.now { // S-TTL-3
			f.expire(m)
			continue
		}
		r.Messages = append(r.Messages, f.deliver(m, c.Mode, c.Salt, s))
		n++
	}
	if s != nil {
		f.gcSession(s)
	}
}

func (f *FSM) receiveDeferred(c *ReceiveDeferred, r *Result) {
	st, s, err := f.receivable(c.Target, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	ms := make([]*msg, 0, len(c.SeqNos))
	for _, seq := range c.SeqNos { // all or nothing
		m := st.idx.Get(seq)
		if m == nil || m.state != StateDeferred || m.locked() || (s != nil && m.sessionID() != s.id) ||
			slices.Contains(ms, m) {
			r.Err = fmt.Errorf("%w: no deferred message with sequence number %d", ErrNotFound, seq)
			return
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		f.dl.remove(m)
		r.Messages = append(r.Messages, f.deliver(m, c.Mode, c.Salt, s))
	}
}

// ---- Settle / RenewLock ----

// locked finds the message a token locks in st. A token that is stale, settled or
// expired yields ErrLockLost, or ErrSessionLockLost in a session store (S-LOCK-9, S-SES-6).
func (f *FSM) lockedMsg(st *store, t LockToken, sessID, owner string) (*msg, error) {
	ctr := binary.BigEndian.Uint64(t[8:16])
	m := f.locks[ctr]
	lost := ErrLockLost
	if !st.dlq && st.ent.cfg.RequiresSession {
		lost = ErrSessionLockLost
	}
	if m == nil || m.st != st || f.token(m) != t {
		return nil, lost
	}
	if m.flags&fSession != 0 {
		sid := m.sessionID()
		if sessID != "" && sessID != sid {
			return nil, lost
		}
		if _, err := f.heldSession(st.ent, sid, owner); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func setProps(m *msg, props []rule.Property) {
	if len(props) == 0 {
		return
	}
	p := rule.Properties{App: m.app}
	for _, pr := range props {
		p.Set(pr.Key, pr.Value)
	}
	m.app = p.App
	m.flags |= fModified
}

func (f *FSM) settle(c *Settle, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if c.Disposition < Complete || c.Disposition > Release {
		r.Err = fmt.Errorf("%w: disposition %d", ErrBadCommand, c.Disposition)
		return
	}
	if len(c.Tokens) > 1 {
		r.TokenErrs = make([]error, len(c.Tokens))
	}
	for i, t := range c.Tokens {
		m, err := f.lockedMsg(st, t, c.SessionID, c.Owner)
		if err != nil {
			if r.TokenErrs != nil {
				r.TokenErrs[i] = err
			}
			if r.Err == nil {
				r.Err = err
			}
			continue
		}
		switch c.Disposition {
		case Complete: // S-LOCK-2
			f.remove(m)
		case Abandon: // S-LOCK-3
			setProps(m, c.Properties)
			f.unlock(m)
			f.requeue(m, true)
		case Release:
			f.unlock(m)
			f.requeue(m, false)
		case Defer: // S-LOCK-7
			setProps(m, c.Properties)
			f.unlock(m)
			if m.state == StateActive {
				st.countState(StateActive, -1)
				m.state = StateDeferred
				st.countState(StateDeferred, 1)
			}
			if !st.dlq && m.expires <= f.now { // S-TTL-3
				f.expire(m)
			} else {
				f.place(m)
			}
		case DeadLetter: // S-LOCK-6
			if st.dlq { // S-DLQ-1: never dead-lettered again; it stays, unlocked
				setProps(m, c.Properties)
				f.unlock(m)
				f.requeue(m, false)
				continue
			}
			f.deadLetter(m, c.Reason, c.Description, c.Properties)
		}
	}
}

func (f *FSM) renewLock(c *RenewLock, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	r.LockedUntil = make([]int64, len(c.Tokens))
	if len(c.Tokens) > 1 {
		r.TokenErrs = make([]error, len(c.Tokens))
	}
	for i, t := range c.Tokens {
		m, err := f.lockedMsg(st, t, "", "")
		if err != nil {
			if r.TokenErrs != nil {
				r.TokenErrs[i] = err
			}
			if r.Err == nil {
				r.Err = err
			}
			continue
		}
		if m.flags&fSession != 0 { // the session lock covers it (S-SES-4)
			r.LockedUntil[i] = f.session(m).lockedUntil
			continue
		}
		m.lockedUntil = satAdd(f.now, st.ent.cfg.LockDurationMs) // S-LOCK-8
		f.dl.set(m, m.deadlineOf())
		r.LockedUntil[i] = m.lockedUntil
	}
}

// ---- Sessions ----

func (f *FSM) sessionEntity(t Target) (*entity, error) {
	e, st, err := f.lookup(t)
	if err != nil {
		return nil, err
	}
	if st.dlq || !e.cfg.RequiresSession {
		return nil, fmt.Errorf("%w: %q", ErrSessionNotAllowed, e.name)
	}
	return e, nil
}

func (f *FSM) acceptSession(c *AcceptSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if f.receiveDisabled(e) {
		r.Err = ErrEntityDisabled
		return
	}
	var s *session
	if c.SessionID == "" { // next available: the free session with the lowest available seq
		best := f.nextFreeSession(e)
		if best == nil {
			r.Err = ErrNoSessionAvailable
			return
		}
		s = best
	} else {
		s = f.getSession(e.main, c.SessionID)
		if s.held && s.holder != c.Owner { // S-SES-2
			r.Err = fmt.Errorf("%w: session %q is held", ErrSessionCannotBeLocked, c.SessionID)
			return
		}
	}
	s.held, s.holder = true, c.Owner
	s.lockedUntil = satAdd(f.now, e.cfg.LockDurationMs) // S-SES-4
	f.sh.fix(s)
	f.expireSession(s) // S-TTL-5
	r.SessionID = s.id
	r.LockedUntil = []int64{s.lockedUntil}
}

func (f *FSM) releaseSession(c *ReleaseSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	s, err := f.heldSession(e, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	f.endSession(s, false) // S-SES-6: closing does not increment
}

func (f *FSM) renewSession(c *RenewSession, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	s, err := f.heldSession(e, c.SessionID, c.Owner)
	if err != nil {
		r.Err = err
		return
	}
	s.lockedUntil = satAdd(f.now, e.cfg.LockDurationMs) // S-SES-4
	f.sh.fix(s)
	r.SessionID = s.id
	r.LockedUntil = []int64{s.lockedUntil}
}

func (f *FSM) setSessionState(c *SetSessionState, r *Result) {
	e, err := f.sessionEntity(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	if c.SessionID == "" {
		r.Err = ErrSessionRequired
		return
	}
	s := e.sessions[c.SessionID]
	if c.Owner != "" {
		if s, err = f.heldSession(e, c.SessionID, c.Owner); err != nil {
			r.Err = err
			return
		}
	}
	n := int64(len(c.State))
	if max := f.cfg.MaxMessageSizeBytes; max > 0 && n > max { // S-SES-5
		r.Err = fmt.Errorf("%w: session state of %d bytes", ErrMessageTooLarge, n)
		return
	}
	var old int64
	if s != nil {
		old = int64(len(s.state))
	}
	if max := f.cfg.MaxSizeBytes; max > 0 && n > old && f.bytes+n-old > max {
		r.Err = ErrQuotaExceeded
		return
	}
	if s == nil {
		if n == 0 {
			return
		}
		s = f.getSession(e.main, c.SessionID)
	}
	f.bytes += n - old
	if n == 0 {
		s.state = nil // SetState(null) clears it
		f.gcSession(s)
		return
	}
	s.state = slices.Clone(c.State)
}

// ---- Schedule, entity, purge ----

func (f *FSM) cancelScheduled(c *CancelScheduled, r *Result) {
	for _, seq := range c.SeqNos {
		found := false
		for _, e := range f.ents {
			if m := e.main.idx.Get(seq); m != nil && m.state == StateScheduled {
				f.remove(m)
				found = true
			}
		}
		if !found && r.Err == nil {
			r.Err = fmt.Errorf("%w: no scheduled message with sequence number %d", ErrNotFound, seq)
		}
	}
}

// updateEntity installs a new configuration and releases the locks of every queue or
// subscription whose properties changed (S-ENT-3): message locks return their messages
// without counting a delivery, and session locks end as if closed; the holders get
// lock-lost. Other subscriptions of a topic keep their locks.
func (f *FSM) updateEntity(c *UpdateEntity) {
	touched := f.touched(c.Config)
	var held []*session
	for _, e := range f.ents {
		if !touched[e] {
			continue
		}
		for _, id := range sortedKeys(e.sessions) {
			if s := e.sessions[id]; s.held {
				held = append(held, s)
			}
		}
	}
	for _, s := range held {
		f.endSession(s, false)
	}
	locked := make([]*msg, 0, len(f.locks))
	for _, m := range f.locks {
		if touched[m.st.ent] {
			locked = append(locked, m)
		}
	}
	slices.SortFunc(locked, func(a, b *msg) int {
		if a.st.ord != b.st.ord {
			return cmp.Compare(a.st.ord, b.st.ord)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, m := range locked {
		f.unlock(m)
		f.requeue(m, false)
	}
	f.setConfig(c.Config)
}

// touched returns the entities whose locks a new configuration releases (S-ENT-3): for a
// queue, any change of its configuration; for a topic, each subscription whose own
// properties changed. Adding or removing a subscription, changing its rules, or changing
// the topic's own properties leaves the other subscriptions' locks alone. (Map lookups
// only: the result is never iterated.)
func (f *FSM) touched(cfg Config) map[*entity]bool {
	out := map[*entity]bool{}
	same := func(e *entity, q QueueConfig) bool {
		q.RequiresSession = e.cfg.RequiresSession // fixed at creation; not a change
		return e.cfg == q
	}
	if f.cfg.Kind != KindTopic {
		old := f.cfg
		unchanged := old.RequiresDuplicateDetection == cfg.RequiresDuplicateDetection &&
			old.DuplicateWindowMs == cfg.DuplicateWindowMs && old.MaxSizeBytes == cfg.MaxSizeBytes &&
			old.MaxMessageSizeBytes == cfg.MaxMessageSizeBytes
		for _, e := range f.ents {
			if !unchanged || !same(e, cfg.Queue) {
				out[e] = true
			}
		}
		return out
	}
	for _, sc := range cfg.Subscriptions {
		if e := f.byName[sc.Name]; e != nil && !same(e, sc.Queue) {
			out[e] = true
		}
	}
	return out
}

func (f *FSM) purge(c *Purge, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	all := make([]*msg, 0, st.idx.Len())
	st.idx.Ascend(0, func(m *msg) bool { all = append(all, m); return true })
	for _, m := range all {
		f.remove(m)
	}
	r.Count = len(all)
}

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
	Bytes    int64         // everything counted toward MaxSizeBytes (messages and session state)
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
}

// Total is every message of the target.
func (t TargetStats) Total() int64 { return t.Active + t.Scheduled + t.Deferred }

// Stats returns the message counts and sizes of every target. It costs O(targets +
// sessions).
func (f *FSM) Stats() Stats {
	s := Stats{Bytes: f.bytes, LastSeq: f.lastSeq, LastSend: f.lastSend, Locks: int64(len(f.locks))}
	for _, e := range f.ents {
		for _, st := range []*store{e.main, e.dlq} {
			s.Targets = append(s.Targets, TargetStats{Target: Target{Sub: e.name, DLQ: st.dlq}, LastReceive: e.lastReceive,
				Active: st.nActive, Locked: st.nLocked, Scheduled: st.nScheduled, Deferred: st.nDeferred,
				Bytes: st.bytes})
		}
		for _, ss := range e.sessions {
			if ss.count > 0 || ss.state != nil {
				s.Sessions++
			}
		}
	}
	return s
}
