package fsm

import (
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

	lastSend int64 // S-IDLE-1, AccessedAt: last accepted send, schedule or cancel

	ents   []*entity          // the queue, or the subscriptions in config order
	byName map[string]*entity // lookup only, never iterated
	locks  map[uint64]*msg    // non-DLQ and DLQ locks by counter; lookup only, never iterated
	dl     deadlineHeap       // messages with a pending deadline
	sh     sessionHeap        // held sessions by lock expiry
	bytes  int64              // everything counted toward MaxSizeBytes

	bodies   Bodies // where stored bodies may go; nil keeps them all in memory
	memBytes int64  // payload bytes of stored messages held in memory, counted per copy

	dup  map[string]dupRec // S-DUP-1 history by MessageId; lookup only
	dupq []dupEnt          // the same history in insertion (= time) order; dupq[duph:] is live
	duph int

	prepared map[string]*prepTxn     // transactions prepared here (txn2pc.go); lookup only, iterated sorted
	decided  map[string]*txnDecision // decisions of transactions this partition coordinates; same

	uploads map[string]*upload // chunked bodies not yet completed (upload.go); lookup only, iterated sorted or as a set

	settled  map[uint64]settledRec // S-LOCK-12 outcomes by lock counter (settled.go); lookup only
	settledq []settledEnt          // the same in the order they were made; settledq[settledh:] is live
	settledh int
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
	lastReceive int64 // S-IDLE-1, AccessedAt: last receiver activity on the entity or its DLQ
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
	// ev counts what happened to the target's messages since this replica started or
	// last restored a snapshot. It is derived from the applied commands like the counts
	// above, but it is not part of the replicated state: Snapshot and Digest leave it
	// out, so it starts from zero after a restore (a counter reset, for Prometheus).
	ev Counters
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
	stateAt       int64           // fsm time the state was last set (0: never, or restored from a version 1 snapshot)
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

		prepared: map[string]*prepTxn{},
		decided:  map[string]*txnDecision{},
		uploads:  map[string]*upload{},
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
	renumbered := false
	for i, e := range ents {
		renumbered = renumbered || e.main.ord != int32(2*i) || e.dlq.ord != int32(2*i+1)
		e.main.ord, e.dlq.ord = int32(2*i), int32(2*i+1)
		if _, dup := f.byName[e.name]; !dup {
			f.byName[e.name] = e
		}
	}
	if renumbered { // the heaps keep each owner's store order in its entry
		f.dl.reorder()
		f.sh.reorder()
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
	f.pruneSettled()
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
	case *DeleteMessages:
		f.deleteMessages(c, r)
	case *Touch:
		if _, _, err := f.lookup(c.Target); err != nil {
			r.Err = err
		}
	case *Txn:
		f.txn(c, r)
	case *TxnPrepare:
		f.txnPrepare(c, r)
	case *TxnDecide:
		f.txnDecide(c, r)
	case *TxnCommit:
		f.txnCommit(c, r)
	case *TxnAbort:
		f.txnAbort(c, r)
	case *TxnForget:
		f.txnForget(c)
	case *BodyChunk:
		f.bodyChunk(c, r)
	case *EnqueueUploaded:
		f.enqueueUploaded(c, r)
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
// lock and session operations, on the entity or its DLQ). Updates are not activity:
// the metadata records them.
// Peeks are queries, not commands: the partition counts them by proposing Touch.
func (f *FSM) noteActivity(c Command, r *Result) {
	kind, t := c.activity()
	switch kind {
	case sendActivity:
		if r.Err == nil {
			f.lastSend = f.now
		}
	case receiveActivity:
		if e, _, err := f.lookup(t); err == nil {
			e.lastReceive = f.now
		}
	}
}

// Now returns the fsm clock: the largest Entry.Now applied so far.
func (f *FSM) Now() int64 { return f.now }

// SetBodies makes b decide where the bodies of messages stored from now on live (nil:
// in memory). It survives Restore.
func (f *FSM) SetBodies(b Bodies) { f.bodies = b }

// MemoryBodyBytes is the payload bytes of stored messages held in memory, each of a
// topic's copies counted (they share one body, so this overstates it).
func (f *FSM) MemoryBodyBytes() int64 { return f.memBytes }

// spill offers m's body to the Bodies store, unless it is already out of memory.
func (f *FSM) spill(m *msg) {
	if f.bodies == nil || m.sp != nil || len(m.payload) == 0 {
		return
	}
	if sp := f.bodies.Spill(m.payload); sp != nil {
		m.sp, m.payload = sp, nil
	}
}

// NextDeadline returns the earliest pending deadline (lock expiry, message expiry,
// scheduled activation, session lock expiry, duplicate-history pruning, the deadline of
// an incomplete chunked body), NeverMs if none.
// The partition leader proposes a Tick at that time.
func (f *FSM) NextDeadline() int64 {
	d := NeverMs
	if f.dl.len() > 0 {
		_, d = f.dl.next()
	}
	if f.sh.len() > 0 {
		if _, until := f.sh.next(); until < d {
			d = until
		}
	}
	if f.duph < len(f.dupq) {
		if t := satAdd(f.dupq[f.duph].at, f.cfg.DuplicateWindowMs); t < d {
			d = t
		}
	}
	return min(d, f.uploadDeadline())
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
