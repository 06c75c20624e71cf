package amqp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// memBackend is a small, faithful in-memory Backend for this package's
// tests: one partition per entity, peek-lock with lock expiry, dead-letter
// sub-queues, deferral, scheduling, sessions, topics copying to every
// subscription. It is not the broker; it exists to exercise the protocol.
// TestFakeBackendConformance runs the scenarios of test/backendtest on it, and
// cmd/internal/bridge runs the same table on the real backend, so where the two
// disagree the fake is wrong.
type memBackend struct {
	mu   sync.Mutex
	keys map[string]SASKey
	// entityKeys are entity-level rules by lower-case entity path, then name.
	entityKeys map[string]map[string]SASKey
	entities   map[string]*memEntity // by lower-case path
	changed    chan struct{}         // closed and replaced on every change
	now        func() time.Time
	maxDC      uint32
	// settled remembers each settlement until its lock would have expired: the same
	// settlement again gets the first outcome (S-LOCK-12).
	settled map[UUID]memSettled
	commits int // Commit calls
	// settleGate, when set, holds every Settle call until it is closed; settleWaiting
	// is closed when the first held call arrives. Owner: mu.
	settleGate, settleWaiting chan struct{}
	// ownerReaccepts lets the holding connection accept its session again, as the
	// cluster's session locks do (held per owner); otherwise that is refused. Owner: mu.
	ownerReaccepts bool
}

type memEntity struct {
	info     EntityInfo
	nextSeq  int64
	queues   [2][]*memMsg // main and dead-letter
	sessions map[string]*memSession
	subs     []*memEntity // for topics
}

type memSession struct {
	state       []byte
	held        bool
	holder      string // ConnectionID of the holder while held (S-SES-2)
	lockedUntil time.Time
}

// holds reports whether the connection calling with ctx holds session s.
func holds(ctx context.Context, s *memSession) bool {
	return s != nil && s.held && s.holder == ConnectionID(ctx)
}

type memMsg struct {
	m             *Message
	seq           int64
	enqueued      time.Time
	scheduledAt   time.Time
	state         MessageState
	deliveryCount uint32
	token         UUID
	lockedUntil   time.Time
	props         []Property
	modified      bool
	deadLettered  bool
	dlReason      string
	dlDesc        string
}

type memSettled struct {
	addr  Address
	disp  Disposition
	until time.Time
}

func newMemBackend() *memBackend {
	return &memBackend{
		keys: map[string]SASKey{
			"RootManageSharedAccessKey": {Name: "RootManageSharedAccessKey", Key: "secret-key", Rights: RightManage},
			"listen":                    {Name: "listen", Key: "listen-key", Rights: RightListen},
		},
		entities:   map[string]*memEntity{},
		entityKeys: map[string]map[string]SASKey{},
		changed:    make(chan struct{}),
		now:        time.Now,
		maxDC:      10,
	}
}

func (b *memBackend) addEntity(info EntityInfo) *memEntity {
	b.mu.Lock()
	defer b.mu.Unlock()
	if info.LockDuration == 0 {
		info.LockDuration = 30 * time.Second
	}
	e := &memEntity{info: info, sessions: map[string]*memSession{}}
	b.entities[strings.ToLower(info.Path)] = e
	if info.Kind == KindSubscription {
		topic := b.entities[strings.ToLower(strings.SplitN(info.Path, "/", 2)[0])]
		topic.subs = append(topic.subs, e)
	}
	return e
}

func (b *memBackend) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *memBackend) SASKey(_ context.Context, name string) (SASKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.keys[name]
	if !ok {
		return SASKey{}, ErrNotFound
	}
	return k, nil
}

func (b *memBackend) EntitySASKey(_ context.Context, path, name string) (SASKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.entityKeys[strings.ToLower(path)][name]
	if !ok {
		return SASKey{}, ErrNotFound
	}
	return k, nil
}

func (b *memBackend) Entity(_ context.Context, path string) (EntityInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entities[strings.ToLower(path)]
	if e == nil {
		return EntityInfo{}, ErrNotFound
	}
	return e.info, nil
}

func (b *memBackend) entity(path string) (*memEntity, error) {
	e := b.entities[strings.ToLower(path)]
	if e == nil {
		return nil, ErrNotFound
	}
	return e, nil
}

func (b *memBackend) enqueue(e *memEntity, m *Message, scheduled bool) int64 {
	now := b.now()
	e.nextSeq++
	mm := &memMsg{m: m, seq: e.nextSeq, enqueued: now, props: m.ApplicationProperties}
	if scheduled || (!m.ScheduledEnqueueTime.IsZero() && m.ScheduledEnqueueTime.After(now)) {
		mm.state, mm.scheduledAt, mm.enqueued = StateScheduled, m.ScheduledEnqueueTime, m.ScheduledEnqueueTime
	}
	e.queues[0] = append(e.queues[0], mm)
	if m.SessionID != "" && e.sessions[m.SessionID] == nil {
		e.sessions[m.SessionID] = &memSession{}
	}
	return mm.seq
}

func (b *memBackend) targets(e *memEntity) []*memEntity {
	if e.info.Kind == KindTopic {
		return e.subs
	}
	return []*memEntity{e}
}

func (b *memBackend) Send(_ context.Context, entity string, msgs []*Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(entity)
	if err != nil {
		return err
	}
	for _, t := range b.targets(e) {
		for _, m := range msgs {
			b.enqueue(t, m, false)
		}
	}
	b.notify()
	return nil
}

func (b *memBackend) Schedule(_ context.Context, entity string, msgs []*Message) ([]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(entity)
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, m := range msgs {
		seqs = append(seqs, b.enqueue(e, m, true))
	}
	return seqs, nil
}

func (b *memBackend) CancelScheduled(_ context.Context, entity string, seqs []int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(entity)
	if err != nil {
		return err
	}
	e.queues[0] = slices.DeleteFunc(e.queues[0], func(m *memMsg) bool {
		return m.state == StateScheduled && slices.Contains(seqs, m.seq)
	})
	return nil
}

func subIndex(a Address) int {
	if a.Sub != SubQueueNone {
		return 1
	}
	return 0
}

// available reports whether m can be received now, expiring locks and
// activating scheduled messages as a side effect.
func (b *memBackend) available(m *memMsg, now time.Time) bool {
	if m.state == StateScheduled && !now.Before(m.scheduledAt) {
		m.state = StateActive
	}
	if m.state != StateActive {
		return false
	}
	return m.lockedUntil.IsZero() || now.After(m.lockedUntil)
}

func (b *memBackend) delivery(m *memMsg) *Delivery {
	d := &Delivery{Message: m.m, LockToken: m.token, SequenceNumber: m.seq, EnqueuedTime: m.enqueued,
		LockedUntil: m.lockedUntil, DeliveryCount: m.deliveryCount, State: m.state,
		DeadLettered: m.deadLettered, DeadLetterReason: m.dlReason, DeadLetterDescription: m.dlDesc,
		Properties: m.props, PropertiesModified: m.modified}
	if m.m.TimeToLive > 0 {
		d.ExpiresAt = m.enqueued.Add(m.m.TimeToLive)
	}
	return d
}

func (b *memBackend) Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error) {
	var timer <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		b.mu.Lock()
		e, err := b.entity(req.Address.Entity)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		if req.SessionID != "" && !holds(ctx, e.sessions[req.SessionID]) {
			b.mu.Unlock()
			return nil, ErrSessionLockLost
		}
		now := b.now()
		q := subIndex(req.Address)
		var out []*Delivery
		for _, m := range e.queues[q] {
			if len(out) >= req.Max {
				break
			}
			if m.m.SessionID != req.SessionID && q == 0 && e.info.RequiresSession {
				continue
			}
			if !b.available(m, now) {
				continue
			}
			m.deliveryCount++
			if req.Mode == ReceiveAndDelete {
				out = append(out, b.delivery(m))
				continue
			}
			m.token = newUUID()
			m.lockedUntil = now.Add(e.info.LockDuration)
			out = append(out, b.delivery(m))
		}
		if req.Mode == ReceiveAndDelete && len(out) > 0 { // up to Max at once, as the broker does
			taken := map[int64]bool{}
			for _, d := range out {
				taken[d.SequenceNumber] = true
			}
			e.queues[q] = slices.DeleteFunc(e.queues[q], func(x *memMsg) bool { return taken[x.seq] })
		}
		changed := b.changed
		b.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if timer == nil {
			return nil, nil // Wait 0: do not wait
		}
		select {
		case <-changed:
		case <-timer:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		case <-time.After(50 * time.Millisecond): // scheduled messages and lock expiry
		}
	}
}

func (b *memBackend) find(a Address, token UUID) (*memEntity, *memMsg, error) {
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range e.queues[subIndex(a)] {
		if m.token == token {
			if b.now().After(m.lockedUntil) {
				return nil, nil, ErrLockLost
			}
			return e, m, nil
		}
	}
	return nil, nil, ErrLockLost
}

func mergeProps(ps []Property, mod []Property) []Property {
	out := slices.Clone(ps)
	for _, p := range mod {
		i := slices.IndexFunc(out, func(x Property) bool { return x.Key == p.Key })
		if i >= 0 {
			out[i] = p
		} else {
			out = append(out, p)
		}
	}
	return out
}

func (b *memBackend) Settle(ctx context.Context, ss []Settlement) []error {
	b.mu.Lock()
	if gate := b.settleGate; gate != nil {
		if b.settleWaiting != nil {
			close(b.settleWaiting)
			b.settleWaiting = nil
		}
		b.mu.Unlock()
		<-gate
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	errs := make([]error, len(ss))
	for i, s := range ss {
		errs[i] = b.settle(ctx, s)
	}
	b.notify()
	return errs
}

func (b *memBackend) settle(ctx context.Context, s Settlement) error {
	if s.SessionID != "" {
		e, err := b.entity(s.Address.Entity)
		if err != nil {
			return err
		}
		if !holds(ctx, e.sessions[s.SessionID]) {
			return ErrSessionLockLost
		}
	}
	e, m, err := b.find(s.Address, s.LockToken)
	if err != nil {
		if r, ok := b.settled[s.LockToken]; ok && r.disp == s.Disposition && r.addr == s.Address && b.now().Before(r.until) {
			return nil
		}
		return err
	}
	if b.settled == nil {
		b.settled = map[UUID]memSettled{}
	}
	b.settled[s.LockToken] = memSettled{addr: s.Address, disp: s.Disposition, until: m.lockedUntil}
	q := subIndex(s.Address)
	remove := func() { e.queues[q] = slices.DeleteFunc(e.queues[q], func(x *memMsg) bool { return x == m }) }
	m.token, m.lockedUntil = UUID{}, time.Time{}
	if len(s.PropertiesToModify) > 0 {
		m.props, m.modified = mergeProps(m.props, s.PropertiesToModify), true
	}
	switch s.Disposition {
	case Complete:
		remove()
	case Release:
		m.deliveryCount--
	case Abandon:
		if m.deliveryCount >= b.maxDC && q == 0 {
			remove()
			m.deadLettered, m.dlReason, m.dlDesc = true, "MaxDeliveryCountExceeded", "Message could not be consumed after 10 delivery attempts."
			e.queues[1] = append(e.queues[1], m)
		}
	case Defer:
		m.state = StateDeferred
	case DeadLetter:
		if q == 0 {
			remove()
			m.deadLettered, m.dlReason, m.dlDesc = true, s.DeadLetterReason, s.DeadLetterDescription
			e.queues[1] = append(e.queues[1], m)
		}
	}
	return nil
}

func (b *memBackend) RenewLock(_ context.Context, a Address, _ string, tokens []UUID) ([]time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, t := range tokens {
		e, m, err := b.find(a, t)
		if err != nil {
			return nil, err
		}
		m.lockedUntil = b.now().Add(e.info.LockDuration)
		out = append(out, m.lockedUntil)
	}
	return out, nil
}

func (b *memBackend) Peek(_ context.Context, a Address, sessionID string, from int64, n int) ([]*Delivery, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, err
	}
	var out []*Delivery
	for _, m := range e.queues[subIndex(a)] {
		if m.seq >= from && len(out) < n && (sessionID == "" || m.m.SessionID == sessionID) {
			d := b.delivery(m)
			d.LockToken, d.LockedUntil = UUID{}, time.Time{}
			out = append(out, d)
		}
	}
	return out, nil
}

func (b *memBackend) ReceiveDeferred(_ context.Context, a Address, _ string, mode ReceiveMode, seqs []int64) ([]*Delivery, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, err
	}
	var out []*Delivery
	q := subIndex(a)
	for _, m := range e.queues[q] {
		if m.state == StateDeferred && slices.Contains(seqs, m.seq) {
			m.deliveryCount++
			m.token = newUUID()
			m.lockedUntil = b.now().Add(e.info.LockDuration)
			out = append(out, b.delivery(m))
		}
	}
	if mode == ReceiveAndDelete {
		e.queues[q] = slices.DeleteFunc(e.queues[q], func(m *memMsg) bool { return m.state == StateDeferred && slices.Contains(seqs, m.seq) })
	}
	return out, nil
}

func (b *memBackend) AcceptSession(ctx context.Context, a Address, id string, wait time.Duration) (string, time.Time, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		b.mu.Lock()
		e, err := b.entity(a.Entity)
		if err != nil {
			b.mu.Unlock()
			return "", time.Time{}, err
		}
		now := b.now()
		free := func(s *memSession) bool {
			return !s.held || now.After(s.lockedUntil) || b.ownerReaccepts && s.holder == ConnectionID(ctx)
		}
		if id != "" {
			s := e.sessions[id]
			if s == nil {
				s = &memSession{}
				e.sessions[id] = s
			}
			if !free(s) {
				b.mu.Unlock()
				return "", time.Time{}, ErrSessionCannotBeLocked
			}
			s.held, s.holder, s.lockedUntil = true, ConnectionID(ctx), now.Add(e.info.LockDuration)
			b.mu.Unlock()
			return id, s.lockedUntil, nil
		}
		for _, m := range e.queues[0] {
			s := e.sessions[m.m.SessionID]
			if s != nil && free(s) && b.available(m, now) {
				s.held, s.holder, s.lockedUntil = true, ConnectionID(ctx), now.Add(e.info.LockDuration)
				b.mu.Unlock()
				return m.m.SessionID, s.lockedUntil, nil
			}
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-t.C:
			return "", time.Time{}, ErrTimeout
		case <-ctx.Done():
			return "", time.Time{}, ErrTimeout
		}
	}
}

func (b *memBackend) session(a Address, id string, mustHold bool) (*memSession, error) {
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, err
	}
	s := e.sessions[id]
	if s == nil {
		if mustHold {
			return nil, ErrSessionLockLost
		}
		s = &memSession{}
		e.sessions[id] = s
	}
	if mustHold && !s.held {
		return nil, ErrSessionLockLost
	}
	return s, nil
}

func (b *memBackend) ReleaseSession(ctx context.Context, a Address, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.session(a, id, false)
	if err != nil {
		return err
	}
	if s.holder != ConnectionID(ctx) {
		return nil // only the holder releases (S-SES-2)
	}
	s.held = false
	b.notify()
	return nil
}

func (b *memBackend) RenewSessionLock(ctx context.Context, a Address, id string) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.session(a, id, true)
	if err != nil {
		return time.Time{}, err
	}
	if !holds(ctx, s) {
		return time.Time{}, ErrSessionLockLost
	}
	e, _ := b.entity(a.Entity)
	s.lockedUntil = b.now().Add(e.info.LockDuration)
	return s.lockedUntil, nil
}

func (b *memBackend) SessionState(_ context.Context, a Address, id string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A read, as in the real Backend: amqp checks the caller holds the session lock.
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, err
	}
	if s := e.sessions[id]; s != nil {
		return s.state, nil
	}
	return nil, nil
}

func (b *memBackend) SetSessionState(ctx context.Context, a Address, id string, state []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.session(a, id, true)
	if err != nil {
		return err
	}
	if !holds(ctx, s) {
		return ErrSessionLockLost
	}
	if len(state) == 0 {
		state = nil
	}
	s.state = state
	return nil
}

func (b *memBackend) ListSessions(_ context.Context, a Address, skip, top int) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(a.Entity)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, s := range e.sessions {
		has := s.state != nil
		for _, m := range e.queues[0] {
			has = has || m.m.SessionID == id
		}
		if has {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if skip >= len(ids) {
		return nil, nil
	}
	ids = ids[skip:]
	return ids[:min(top, len(ids))], nil
}

var (
	_ Backend             = (*memBackend)(nil)
	_ EntityAuthenticator = (*memBackend)(nil)
)

// Commit implements Transactor: every settlement is checked before anything applies.
// commits counts the calls, for tests.
func (b *memBackend) Commit(ctx context.Context, ops []TxnOp) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.commits++
	seen := map[UUID]bool{}
	for _, op := range ops {
		if s := op.Settlement; s != nil {
			if _, _, err := b.find(s.Address, s.LockToken); err != nil || seen[s.LockToken] {
				return fmt.Errorf("%w: settlement in a transaction", ErrLockLost)
			}
			seen[s.LockToken] = true
		} else if _, err := b.entity(op.Entity); err != nil {
			return err
		}
	}
	for _, op := range ops {
		if op.Settlement != nil {
			_ = b.settle(ctx, *op.Settlement)
			continue
		}
		e, _ := b.entity(op.Entity)
		for _, t := range b.targets(e) {
			for _, m := range op.Messages {
				b.enqueue(t, m, false)
			}
		}
	}
	b.notify()
	return nil
}

var _ MessageDeleter = (*memBackend)(nil)

// DeleteMessages implements MessageDeleter as the fsm does (S-DEL-1..4).
func (b *memBackend) DeleteMessages(_ context.Context, a Address, sessionID string, n int, before time.Time) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entity(a.Entity)
	if err != nil {
		return 0, err
	}
	if sessionID != "" && (!e.info.RequiresSession || a.Sub != SubQueueNone) {
		return 0, fmt.Errorf("%w: %s does not support sessions", ErrNotAllowed, a)
	}
	now, q, deleted := b.now(), subIndex(a), 0
	e.queues[q] = slices.DeleteFunc(e.queues[q], func(m *memMsg) bool {
		ok := deleted < n && !m.enqueued.After(before) && !m.enqueued.Equal(before) &&
			!(m.token != UUID{} && now.Before(m.lockedUntil)) && (sessionID == "" || m.m.SessionID == sessionID)
		if ok {
			deleted++
		}
		return ok
	})
	b.notify()
	return deleted, nil
}
