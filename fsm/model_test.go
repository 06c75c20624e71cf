package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// The randomized model test: random command sequences (seeded, so failures reproduce)
// against invariants that must hold after every entry:
//   - every message is in exactly one target and one state; Stats agrees with Peek;
//   - no message vanishes (S-DUR-3) except by complete, expiry, receive-and-delete, cancel or purge;
//   - delivery counts never decrease, and never exceed MaxDeliveryCount in a main target;
//   - lock tokens are never reused; expired messages are never delivered;
//   - NextDeadline is after Now once an entry is applied;
//   - a twin fed the same bytes, and a copy restored from a snapshot taken midway and fed
//     the rest, end with the same digest (checked by tf at cleanup and below).

type mkey struct {
	sub string
	seq int64
}

type modelRun struct {
	t       *testing.T
	x       *tf
	rng     *rand.Rand
	cfg     Config
	targets []Target
	held    map[Target][]*Message // tokens we hold, per target
	tokens  map[LockToken]bool
	prev    map[mkey]*Message
	owners  map[string]string // session id -> owner we accepted it as
	restore *FSM              // restored midway, then fed the same entries
	expired map[string]int64  // S-TTL-5: sub/session -> last seq when one of its messages expired
	bodies  map[int64]string  // what was sent with each sequence number

	noneAvailable int // receives and accepts that Receivable or SessionAvailable said would find nothing
}

// TestModelRandomized runs 12 seeded runs; with -tags long, 120 longer ones (add
// -tags 'long invariants' to check the fsm's internal invariants after every step too).
func TestModelRandomized(t *testing.T) {
	cfgs := map[string]Config{}
	qc := queueCfg()
	qc.Queue.MaxDeliveryCount = 3
	qc.Queue.LockDurationMs = 5000
	qc.Queue.DeadLetterOnExpiration = true
	qc.RequiresDuplicateDetection = true
	qc.DuplicateWindowMs = 20_000
	qc.MaxSizeBytes = 4000
	cfgs["queue"] = qc
	sc := sessCfg()
	sc.Queue.MaxDeliveryCount = 2
	sc.Queue.LockDurationMs = 5000
	sc.Queue.DefaultTTLMs = 30_000
	cfgs["sessions"] = sc
	tc := topicCfg("a", "b", "c")
	tc.Subscriptions[1].Rules = []rule.Spec{{Name: "odd", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation,
		Correlation: rule.Correlation{Subject: "odd"}}}}
	tc.Subscriptions[2].Queue.RequiresSession = true
	tc.Subscriptions[2].Queue.LockDurationMs = 5000
	tc.Subscriptions[0].Queue.DeadLetterOnExpiration = true
	tc.Subscriptions[0].Queue.LockDurationMs = 5000
	tc.Queue.DefaultTTLMs = 40_000
	cfgs["topic"] = tc
	steps, seeds := 1500, int64(4)
	if testing.Short() {
		steps = 300
	}
	if longModel {
		steps, seeds = 5000, 40
	}
	for _, name := range []string{"queue", "sessions", "topic"} {
		for seed := int64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", name, seed), func(t *testing.T) {
				runModel(t, cfgs[name], seed, steps)
			})
		}
	}
}

func runModel(t *testing.T, cfg Config, seed int64, steps int) {
	m := &modelRun{t: t, x: newTF(t, cfg), rng: rand.New(rand.NewSource(seed)), cfg: cfg,
		held: map[Target][]*Message{}, tokens: map[LockToken]bool{}, owners: map[string]string{}, expired: map[string]int64{}, bodies: map[int64]string{}}
	if cfg.Kind == KindQueue {
		m.targets = []Target{q, dlq}
	} else {
		for _, s := range cfg.Subscriptions {
			m.targets = append(m.targets, Target{Sub: s.Name}, Target{Sub: s.Name, DLQ: true})
		}
	}
	m.prev = m.all()
	for i := 0; i < steps; i++ {
		if i == steps/2 {
			var buf bytes.Buffer
			if err := m.x.f.Snapshot(&buf); err != nil {
				t.Fatal(err)
			}
			m.restore = New(Config{Kind: KindQueue})
			if err := m.restore.Restore(&buf); err != nil {
				t.Fatal(err)
			}
		}
		m.step(i)
	}
	if m.restore.Digest() != m.x.f.Digest() {
		t.Fatal("the FSM restored midway diverged from the original")
	}
	if m.noneAvailable == 0 {
		t.Fatal("Receivable and SessionAvailable never said no: their check was vacuous")
	}
	if m.x.f.Stats().LastSeq < 50 {
		t.Fatalf("the run sent only %d messages: the generator is too timid", m.x.f.Stats().LastSeq)
	}
}

func (m *modelRun) all() map[mkey]*Message {
	out := map[mkey]*Message{}
	st := m.x.f.Stats()
	for i, t := range m.targets {
		ps := m.x.f.Peek(t, 0, 1<<30)
		var active, locked, sched, def, bytes int64
		for _, p := range ps {
			k := mkey{t.Sub, p.SequenceNumber}
			if out[k] != nil {
				m.t.Fatalf("message %v in two targets", k)
			}
			out[k] = p
			switch p.State {
			case StateActive:
				active++
			case StateScheduled:
				sched++
			case StateDeferred:
				def++
			}
			if p.LockToken != (LockToken{}) {
				locked++
			}
			bytes += int64(len(p.Payload))
			if (p.DeadLetter != nil) != t.DLQ {
				m.t.Fatalf("%v: dead-letter info %v in target %+v", k, p.DeadLetter, t)
			}
		}
		ts := st.Targets[i]
		if ts.Target != t || ts.Active != active || ts.Locked != locked || ts.Scheduled != sched || ts.Deferred != def || ts.Bytes != bytes {
			m.t.Fatalf("stats %+v disagree with peek: active %d locked %d sched %d def %d bytes %d", ts, active, locked, sched, def, bytes)
		}
	}
	return out
}

func (m *modelRun) pick(n int) int { return m.rng.Intn(n) }

func (m *modelRun) randTarget() Target { return m.targets[m.pick(len(m.targets))] }

func (m *modelRun) sessionTarget(t Target) bool {
	if t.DLQ {
		return false
	}
	if m.cfg.Kind == KindQueue {
		return m.cfg.Queue.RequiresSession
	}
	for _, s := range m.cfg.Subscriptions {
		if s.Name == t.Sub {
			return s.Queue.RequiresSession
		}
	}
	return false
}

func (m *modelRun) step(i int) {
	x := m.x
	justified := map[mkey]bool{}
	purged := map[Target]bool{}
	cancelled := map[int64]bool{}
	var cmd Command
	var onResult func(r Result)
	var recvCheck func(cur map[mkey]*Message)
	switch p := m.pick(100); {
	case p < 30: // enqueue a batch
		n := 1 + m.pick(3)
		ms := make([]*Message, n)
		for j := range ms {
			msg := msgOf(fmt.Sprintf("b%d-%d", i, j))
			if m.pick(3) == 0 {
				msg.TimeToLive = int64(1000 + m.pick(20_000))
			}
			if m.pick(8) == 0 {
				msg.ScheduledEnqueueTime = x.now + int64(m.pick(10_000))
			}
			if m.pick(4) == 0 {
				msg.MessageID = fmt.Sprintf("id%d", m.pick(20))
			}
			if m.pick(2) == 0 {
				msg.Subject = "odd"
			}
			msg.SessionID = fmt.Sprintf("s%d", m.pick(4))
			if m.pick(30) == 0 {
				msg.SessionID = "" // rejected by session entities
			}
			ms[j] = msg
		}
		cmd = &Enqueue{Messages: ms}
		if m.pick(10) == 0 {
			for _, msg := range ms {
				msg.ScheduledEnqueueTime = x.now + int64(m.pick(10_000))
			}
			cmd = &Schedule{Messages: ms}
		}
		onResult = func(r Result) {
			if r.Err != nil {
				return
			}
			seen := map[string]bool{}
			for j, msg := range ms {
				if r.SeqNos[j] == 0 {
					m.t.Fatalf("message %d of an accepted batch has no sequence number", j)
				}
				if id := msg.MessageID; id != "" && m.cfg.RequiresDuplicateDetection {
					if seen[id] || m.bodies[r.SeqNos[j]] != "" {
						continue // a duplicate (S-DUP-1): acknowledged with the original's number
					}
					seen[id] = true
				}
				if m.bodies[r.SeqNos[j]] != "" {
					m.t.Fatalf("sequence number %d reused", r.SeqNos[j])
				}
				m.bodies[r.SeqNos[j]] = string(msg.Payload)
			}
		}
	case p < 55: // receive
		t := m.randTarget()
		mode := PeekLock
		if m.pick(6) == 0 {
			mode = ReceiveAndDelete
		}
		rc := &Receive{Target: t, Mode: mode, Max: int32(1 + m.pick(3)), Salt: uint32(i)}
		if m.sessionTarget(t) {
			rc.SessionID = fmt.Sprintf("s%d", m.pick(4))
			rc.Owner = m.owners[t.Sub+"/"+rc.SessionID]
		}
		cmd = rc
		onResult = func(r Result) {
			if n := len(r.Messages); n > 0 {
				last := r.Messages[n-1].SequenceNumber
				recvCheck = func(cur map[mkey]*Message) { // S-RCV-2, S-SES-3: nothing earlier was left behind
					for k, c := range cur {
						if k.sub == t.Sub && (c.DeadLetter != nil) == t.DLQ && c.State == StateActive &&
							c.LockToken == (LockToken{}) && k.seq < last && (rc.SessionID == "" || c.SessionID == rc.SessionID) {
							m.t.Fatalf("receive returned up to %d but left %d available", last, k.seq)
						}
					}
				}
			}
			for j, msg := range r.Messages {
				if j > 0 && msg.SequenceNumber <= r.Messages[j-1].SequenceNumber {
					m.t.Fatalf("receive out of order: %d after %d", msg.SequenceNumber, r.Messages[j-1].SequenceNumber)
				}
				if !t.DLQ && msg.ExpiresAt <= x.now {
					m.t.Fatalf("delivered an expired message %d", msg.SequenceNumber)
				}
				if mode == ReceiveAndDelete {
					justified[mkey{t.Sub, msg.SequenceNumber}] = true
					continue
				}
				if m.tokens[msg.LockToken] {
					m.t.Fatalf("lock token %x reused", msg.LockToken)
				}
				m.tokens[msg.LockToken] = true
				m.held[t] = append(m.held[t], msg)
			}
		}
	case p < 80: // settle held (or stale) tokens
		t := m.randTarget()
		h := m.held[t]
		if len(h) == 0 {
			cmd = &Tick{}
			break
		}
		j := m.pick(len(h))
		msg := h[j]
		m.held[t] = append(h[:j], h[j+1:]...)
		d := Disposition(1 + m.pick(5))
		st := &Settle{Target: t, Tokens: []LockToken{msg.LockToken}, Disposition: d, SessionID: msg.SessionID,
			Owner: m.owners[t.Sub+"/"+msg.SessionID]}
		if m.pick(3) == 0 {
			st.Properties = []rule.Property{{Key: "p", Value: rule.Value{Kind: rule.KindInt, N: uint64(i)}}}
		}
		cmd = st
		onResult = func(r Result) {
			if r.Err == nil && d == Complete {
				justified[mkey{t.Sub, msg.SequenceNumber}] = true
			}
		}
	case p < 84:
		t := m.randTarget()
		if len(m.held[t]) == 0 {
			cmd = &Tick{}
			break
		}
		cmd = &RenewLock{Target: t, Tokens: []LockToken{m.held[t][0].LockToken}}
	case p < 92: // sessions
		t := m.randTarget()
		id := fmt.Sprintf("s%d", m.pick(4))
		owner := fmt.Sprintf("o%d", m.pick(3))
		switch m.pick(4) {
		case 0:
			if m.pick(3) == 0 {
				id = ""
			}
			cmd = &AcceptSession{Target: t, SessionID: id, Owner: owner}
			onResult = func(r Result) {
				if r.Err == nil {
					m.owners[t.Sub+"/"+r.SessionID] = owner
				}
			}
		case 1:
			cmd = &ReleaseSession{Target: t, SessionID: id, Owner: m.owners[t.Sub+"/"+id]}
		case 2:
			cmd = &RenewSession{Target: t, SessionID: id, Owner: m.owners[t.Sub+"/"+id]}
		case 3:
			var st []byte
			if m.pick(2) == 0 {
				st = []byte(fmt.Sprint("state", i))
			}
			cmd = &SetSessionState{Target: t, SessionID: id, State: st}
		}
	case p < 93: // receive a deferred message by sequence number
		t := m.randTarget()
		var seqs []int64
		for _, pm := range x.f.Peek(t, 0, 1<<30) {
			if pm.State == StateDeferred && (len(seqs) == 0 || m.pick(2) == 0) {
				seqs = append(seqs, pm.SequenceNumber)
			}
		}
		if len(seqs) == 0 {
			seqs = []int64{int64(m.pick(100))}
		}
		mode := PeekLock
		if m.pick(5) == 0 {
			mode = ReceiveAndDelete
		}
		rd := &ReceiveDeferred{Target: t, Mode: mode, SeqNos: seqs, Salt: uint32(i)}
		if m.sessionTarget(t) {
			rd.SessionID = fmt.Sprintf("s%d", m.pick(4))
			rd.Owner = m.owners[t.Sub+"/"+rd.SessionID]
		}
		cmd = rd
		onResult = func(r Result) {
			if r.Err == nil && len(r.Messages) != len(seqs) {
				m.t.Fatalf("receive deferred of %v returned %d messages", seqs, len(r.Messages))
			}
			for _, msg := range r.Messages {
				if msg.State != StateDeferred {
					m.t.Fatalf("receive deferred returned a %v message", msg.State)
				}
				if mode == ReceiveAndDelete {
					justified[mkey{t.Sub, msg.SequenceNumber}] = true
					continue
				}
				if m.tokens[msg.LockToken] {
					m.t.Fatalf("lock token %x reused", msg.LockToken)
				}
				m.tokens[msg.LockToken] = true
				m.held[t] = append(m.held[t], msg)
			}
		}
	case p < 94:
		seq := x.f.Stats().LastSeq - int64(m.pick(5))
		cmd = &CancelScheduled{SeqNos: []int64{seq}}
		onResult = func(r Result) {
			if r.Err == nil {
				cancelled[seq] = true
			}
		}
	case p < 95:
		t := m.randTarget()
		cmd = &Purge{Target: t}
		purged[t] = true
	case p < 96:
		cfg := m.cfg
		if m.pick(2) == 0 {
			cfg.Queue.MaxDeliveryCount++
			m.cfg = cfg
		}
		cmd = &UpdateEntity{Config: cfg}
	default:
		x.advance(int64(m.pick(8000)))
		cmd = &Tick{}
	}
	if m.pick(3) == 0 {
		x.advance(int64(m.pick(1500)))
	}
	// Receivable and SessionAvailable are conservative: when one says no and no deadline
	// falls due in this entry, the command finds nothing.
	quiet := x.f.NextDeadline() > max(x.now, x.f.Now())
	noneAvailable := false
	switch c := cmd.(type) {
	case *Receive:
		noneAvailable = quiet && !x.f.Receivable(*c)
	case *AcceptSession:
		noneAvailable = quiet && c.SessionID == "" && !x.f.SessionAvailable(c.Target)
	}
	res := m.applyAll(cmd)
	if noneAvailable {
		m.noneAvailable++
		if len(res.Messages) > 0 {
			m.t.Fatalf("step %d: Receivable said no, the receive %+v returned %d messages", i, cmd, len(res.Messages))
		}
		if _, ok := cmd.(*AcceptSession); ok && !errors.Is(res.Err, ErrNoSessionAvailable) {
			m.t.Fatalf("step %d: SessionAvailable said no, accepting the next session gave %q, %v", i, res.SessionID, res.Err)
		}
	}
	if onResult != nil {
		onResult(res)
	}
	if nd := x.f.NextDeadline(); nd <= x.f.Now() {
		m.t.Fatalf("step %d: next deadline %d is not after now %d", i, nd, x.f.Now())
	}
	cur := m.all()
	m.checkAvailable(cur)
	if recvCheck != nil {
		recvCheck(cur)
	}
	for k, c := range cur {
		if want := m.bodies[k.seq]; string(c.Payload) != want {
			m.t.Fatalf("message %v has body %q, sent %q", k, c.Payload, want)
		}
	}
	var newlyExpired []string
	for k, p := range m.prev { // first pass: genuine expiries arm S-TTL-5 for this very step
		if c := cur[k]; p.SessionID != "" && p.DeadLetter == nil && p.ExpiresAt <= x.f.Now() && (c == nil || c.DeadLetter != nil) {
			m.expired[k.sub+"/"+p.SessionID] = x.f.Stats().LastSeq
		}
	}
	for k, p := range m.prev {
		c := cur[k]
		if c == nil || (p.DeadLetter == nil && c.DeadLetter != nil && c.DeadLetter.Reason == "TTLExpiredException") {
			expired := p.DeadLetter == nil && p.ExpiresAt <= x.f.Now()
			sk := k.sub + "/" + p.SessionID
			if p.SessionID != "" && p.DeadLetter == nil && !expired && k.seq <= m.expired[sk] {
				switch cmd.(type) {
				case *AcceptSession, *Receive:
					expired = true // S-TTL-5
				}
			}
			if expired && p.SessionID != "" {
				newlyExpired = append(newlyExpired, sk)
			}
			if c != nil {
				if !expired {
					m.t.Fatalf("step %d: %v dead-lettered as expired before it expired", i, k)
				}
				continue
			}
			ok := justified[k] || cancelled[k.seq] || purged[Target{Sub: k.sub, DLQ: p.DeadLetter != nil}] ||
				purged[Target{Sub: k.sub, DLQ: true}] || expired // dead-lettered, then purged in one entry
			if !ok {
				m.t.Fatalf("step %d (%T): message %v vanished: %+v", i, cmd, k, p)
			}
			continue
		}
		if c.DeliveryCount < p.DeliveryCount {
			m.t.Fatalf("step %d: delivery count of %v went from %d to %d", i, k, p.DeliveryCount, c.DeliveryCount)
		}
		if c.DeadLetter == nil && c.DeliveryCount > maxDC(m.cfg, k.sub)+1 {
			m.t.Fatalf("step %d: %v delivered %d times", i, k, c.DeliveryCount)
		}
	}
	for _, sk := range newlyExpired {
		m.expired[sk] = x.f.Stats().LastSeq
	}
	m.prev = cur
}

// checkAvailable compares Receivable and SessionAvailable with what Peek shows: a target
// (or a session held by the owner we accepted it as) with an active, unlocked message
// must be receivable, and a session entity with such a message in a session nobody holds
// must have a session available.
func (m *modelRun) checkAvailable(cur map[mkey]*Message) {
	f := m.x.f
	for _, t := range m.targets {
		avail := map[string]bool{} // session id ("" outside sessions) -> has an available message
		for k, c := range cur {
			if k.sub == t.Sub && (c.DeadLetter != nil) == t.DLQ && c.State == StateActive && c.LockToken == (LockToken{}) {
				avail[c.SessionID] = true
			}
		}
		if !m.sessionTarget(t) {
			if len(avail) > 0 && !f.Receivable(Receive{Target: t}) {
				m.t.Fatalf("%+v has available messages but Receivable says no", t)
			}
			continue
		}
		free := false
		for id := range avail {
			info, _ := f.Session(t, id)
			if !info.Held {
				free = true
				continue
			}
			if !f.Receivable(Receive{Target: t, SessionID: id, Owner: info.Owner}) {
				m.t.Fatalf("%+v session %q has available messages but Receivable says no to its holder", t, id)
			}
		}
		if free && !f.SessionAvailable(t) {
			m.t.Fatalf("%+v has a free session with messages but SessionAvailable says no", t)
		}
	}
}

func maxDC(cfg Config, sub string) int32 {
	if cfg.Kind == KindQueue {
		return cfg.Queue.MaxDeliveryCount
	}
	for _, s := range cfg.Subscriptions {
		if s.Name == sub {
			return s.Queue.MaxDeliveryCount
		}
	}
	return 0
}

// applyAll applies one command through tf (codec and twin) and to the restored copy.
func (m *modelRun) applyAll(c Command) Result {
	r := m.x.one(c)
	if m.restore != nil {
		b := AppendEntry(nil, &Entry{Now: m.x.now, Cmds: []Command{c}})
		e, err := DecodeEntry(b)
		if err != nil {
			m.t.Fatal(err)
		}
		m.restore.Apply(e)
	}
	return r
}
