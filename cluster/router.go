package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cluster/metagroup"
	"github.com/quorumbus/quorumbus/cluster/wire"
	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
	"github.com/quorumbus/quorumbus/partition"
)

// This file is the data-plane front door: every operation names an entity (and maybe a
// subscription and the dead-letter sub-queue), and the router sends it to the partition
// that owns it. Sequence numbers of a partitioned entity carry the partition index in
// their top 16 bits (as Service Bus's do), so an operation by sequence number finds its
// partition; lock tokens carry the partition's group ID (partition.GroupOfToken).

// Router is the node's data plane: the operations of the AMQP front door (through
// cmd/internal/bridge) and of the explorer, each run on the partition that owns it, here
// or on the node that leads it (Router.call, remote.go), and transactions (txn.go). It
// is reached through Node.Router and lives as long as its node.
type Router struct {
	self             string           // this node's ID
	log              *slog.Logger     // the node's
	meta             *metagroup.Group // entities, keys and placements: the local replica
	loc              locator          // where each group runs and who leads it (route.go)
	clock            Clock            // transaction deadlines
	closing          <-chan struct{}  // closed when the node closes
	prepareWindow    time.Duration    // Config.TxnPrepareWindow
	recoveryInterval time.Duration    // Config.TxnRecoveryInterval
	// n is the node, for what the router asks of the cluster beyond these: the peers
	// and their addresses (Node.peer, Node.addrOf, Node.peerStatus) and a configuration
	// sync on a replica led here (reconciler.syncConfig).
	n *Node

	// rrs turns, per partitioned entity (keyed by its first partition's group ID, never
	// reused), the round-robin of sends without a key (entity.pick) and of receives over
	// its partitions (waitAny). One counter per entity: with one for the node, other
	// entities' traffic skipped positions, so one sender's messages piled up on some
	// partitions and the first of them to fill refused sends while the entity was far
	// from its size (16 partitions held 10 MB of 16). An entry stays after its entity
	// is deleted (8 bytes and a key).
	rrs sync.Map // uint32 -> *atomic.Uint64

	batchMu  sync.Mutex
	batchers map[string]*sendBatcher // forwarded sends by peer address; owner: batchMu

	// txnHook, set by tests before use, is called by two-phase commit at each stage
	// ("prepared", "decided"); true stops the commit there, as a crash of the driving
	// node would (txn.go).
	txnHook func(stage, id string) bool
}

// newRouter is the router of n, whose metadata group is open.
func newRouter(n *Node) *Router {
	return &Router{self: n.cfg.NodeID, log: n.log, meta: n.meta, loc: n.routes(), clock: n.clock, closing: n.closing,
		prepareWindow: n.cfg.TxnPrepareWindow, recoveryInterval: n.cfg.TxnRecoveryInterval,
		n: n, batchers: map[string]*sendBatcher{}}
}

// Router is the node's data plane.
func (n *Node) Router() *Router { return n.router }

// seqShift places the partition index above the per-partition sequence number.
const seqShift = 48

// Address names one message store: a queue, or a subscription of a topic, optionally its
// dead-letter sub-queue. Entity and Subscription are matched case-insensitively.
type Address struct {
	Entity       string
	Subscription string
	DeadLetter   bool
}

// EntityInfo is what the protocol layer needs to know about an entity path.
type EntityInfo struct {
	Kind            meta.EntityKind // KindQueue or KindTopic (for a subscription: KindTopic with Subscription set)
	Entity          string          // the queue's or topic's display name
	Subscription    string          // the subscription's display name, for subscription paths
	RequiresSession bool
	MaxMessageSize  int64 // bytes
	LockDuration    time.Duration
	Status          meta.Status
}

// Lookup resolves "q", "t" or "t/Subscriptions/s" (case-insensitive) to its entity.
func (rt *Router) Lookup(path string) (EntityInfo, error) {
	ent, sub, err := splitPath(path)
	if err != nil {
		return EntityInfo{}, err
	}
	var info EntityInfo
	found := false
	rt.meta.Read(func(s *meta.State) {
		switch s.Kind(ent) {
		case meta.KindQueue:
			if sub != "" {
				return
			}
			q, _ := s.Queue(ent)
			p := q.Properties
			info = EntityInfo{Kind: meta.KindQueue, Entity: q.Name, RequiresSession: p.RequiresSession,
				MaxMessageSize: p.MaxMessageSizeInKilobytes << 10, LockDuration: p.LockDuration, Status: p.Status}
			found = true
		case meta.KindTopic:
			t, _ := s.Topic(ent)
			info = EntityInfo{Kind: meta.KindTopic, Entity: t.Name, MaxMessageSize: t.Properties.MaxMessageSizeInKilobytes << 10,
				Status: t.Properties.Status}
			if sub == "" {
				found = true
				return
			}
			sd, ok := s.Subscription(ent, sub)
			if !ok {
				return
			}
			info.Subscription = sd.Name
			info.RequiresSession = sd.Properties.RequiresSession
			info.LockDuration = sd.Properties.LockDuration
			if sd.Properties.Status != meta.StatusActive {
				info.Status = sd.Properties.Status
			}
			found = true
		}
	})
	if !found {
		return EntityInfo{}, fmt.Errorf("%w: entity %q", fsm.ErrNotFound, path)
	}
	return info, nil
}

// entity is a resolved queue or topic with its partition groups.
type entity struct {
	name  string // display name
	kind  meta.EntityKind
	parts []group // by partition index
	// dedupe: a partitioned queue or topic that requires duplicate detection, so a send
	// without SessionId or PartitionKey goes to its MessageId's partition (pick).
	dedupe bool
}

// resolve finds a queue or topic by name (case-insensitive) and its partition groups.
// It runs for every message sent or settled, so it reads the placement in place
// (meta.State.Route) rather than copying it.
func (rt *Router) resolve(name string) (*entity, error) {
	var (
		e    *entity
		kind meta.EntityKind
	)
	rt.meta.Read(func(s *meta.State) {
		kind = s.Kind(name)
		if kind == meta.KindNone {
			return
		}
		s.Route(name, func(display string, parts []meta.Partition) {
			e = &entity{name: display, kind: kind, parts: make([]group, len(parts))}
			for i, p := range parts {
				e.parts[i] = group{id: p.GroupID, index: i, replicas: p.Replicas}
			}
		})
		if e != nil && len(e.parts) > 1 {
			e.dedupe = s.DuplicateDetection(name)
		}
	})
	if e == nil {
		return nil, fmt.Errorf("%w: entity %q", fsm.ErrNotFound, name)
	}
	for i := range e.parts {
		rt.loc.locate(&e.parts[i])
	}
	return e, nil
}

func splitPath(path string) (entity, sub string, err error) {
	path = strings.Trim(path, "/")
	parts := strings.Split(path, "/")
	// Queue and topic names may contain '/', so the subscription segment is found from
	// the end: <entity>/Subscriptions/<sub>.
	if len(parts) >= 3 && strings.EqualFold(parts[len(parts)-2], "Subscriptions") {
		return strings.Join(parts[:len(parts)-2], "/"), parts[len(parts)-1], nil
	}
	if path == "" {
		return "", "", fmt.Errorf("%w: empty entity path", fsm.ErrNotFound)
	}
	return path, "", nil
}

// SASKey returns a namespace key by name.
func (rt *Router) SASKey(name string) (meta.SASKey, bool) {
	var k meta.SASKey
	var ok bool
	rt.meta.Read(func(s *meta.State) { k, ok = s.SASKey(name) })
	return k, ok
}

// EntitySASKey returns an authorization rule of a queue or topic ("q", "t"; a
// subscription path looks at its topic's rules, as subscriptions have none of their own).
func (rt *Router) EntitySASKey(path, name string) (meta.SASKey, bool) {
	ent, _, err := splitPath(path)
	if err != nil {
		return meta.SASKey{}, false
	}
	var rules []meta.SASKey
	rt.meta.Read(func(s *meta.State) {
		if q, ok := s.Queue(ent); ok {
			rules = q.Properties.AuthorizationRules
		} else if t, ok := s.Topic(ent); ok {
			rules = t.Properties.AuthorizationRules
		}
	})
	for _, k := range rules {
		if k.Name == name {
			return k, true
		}
	}
	return meta.SASKey{}, false
}

// target resolves an address to its entity, the fsm target inside each partition.
func (rt *Router) target(a Address) (*entity, fsm.Target, error) {
	e, err := rt.resolve(a.Entity)
	if err != nil {
		return nil, fsm.Target{}, err
	}
	t := fsm.Target{DLQ: a.DeadLetter}
	if a.Subscription != "" {
		if e.kind != meta.KindTopic {
			return nil, t, fmt.Errorf("%w: %q is not a topic", fsm.ErrNotFound, a.Entity)
		}
		var sd meta.Subscription
		var ok bool
		rt.meta.Read(func(s *meta.State) { sd, ok = s.Subscription(a.Entity, a.Subscription) })
		if !ok {
			return nil, t, fmt.Errorf("%w: subscription %q of %q", fsm.ErrNotFound, a.Subscription, a.Entity)
		}
		t.Sub = sd.Name
	} else if e.kind == meta.KindTopic {
		return nil, t, fmt.Errorf("%w: cannot receive from topic %q; receive from one of its subscriptions", fsm.ErrNotFound, a.Entity)
	}
	return e, t, nil
}

// turn is the round-robin counter of e's partitions (Router.rrs).
func (rt *Router) turn(e *entity) *atomic.Uint64 {
	id := e.parts[0].id
	if v, ok := rt.rrs.Load(id); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := rt.rrs.LoadOrStore(id, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// pick chooses the partition for a send: SessionId, else PartitionKey, else, when the
// entity requires duplicate detection, MessageId (as Service Bus does: each partition
// detects duplicates alone, so copies of one MessageId must meet in one partition;
// S-DUP-1), else round-robin over the partitions whose leader is here (S-SES-8), turned
// by the entity's counter (Router.turn).
func (e *entity) pick(rt *Router, sessionID, partitionKey, messageID string) int {
	if len(e.parts) == 1 {
		return 0
	}
	switch {
	case sessionID != "":
		return e.keyed(sessionID)
	case partitionKey != "":
		return e.keyed(partitionKey)
	case e.dedupe && messageID != "":
		return e.keyed(messageID)
	}
	start := int(rt.turn(e).Add(1) % uint64(len(e.parts)))
	for i := range e.parts {
		j := (start + i) % len(e.parts)
		if e.parts[j].leadsHere() {
			return j
		}
	}
	return start
}

func (e *entity) keyed(key string) int {
	if len(e.parts) == 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(e.parts)))
}

// ext turns a partition's sequence number into the entity's.
func (e *entity) ext(idx int, seq int64) int64 {
	if len(e.parts) == 1 || seq == 0 {
		return seq
	}
	return int64(idx)<<seqShift | seq
}

// split finds the partition of an entity sequence number.
func (e *entity) split(seq int64) (int, int64, error) {
	if len(e.parts) == 1 {
		return 0, seq, nil
	}
	idx := int(seq >> seqShift)
	if idx < 0 || idx >= len(e.parts) {
		return 0, 0, fmt.Errorf("%w: sequence number %d", fsm.ErrNotFound, seq)
	}
	return idx, seq & (1<<seqShift - 1), nil
}

func (e *entity) stamp(idx int, msgs []*fsm.Message) []*fsm.Message {
	for _, m := range msgs {
		m.SequenceNumber = e.ext(idx, m.SequenceNumber)
	}
	return msgs
}

// Send stores msgs in one partition, all or nothing (S-SEND-5), returning once durable
// (S-SEND-1). Messages with a future ScheduledEnqueueTime are stored as scheduled.
func (rt *Router) Send(ctx context.Context, entityName string, msgs []*fsm.Message) error {
	_, err := rt.enqueue(ctx, entityName, msgs, false)
	return err
}

// Schedule stores msgs as scheduled messages (S-SCH-1) and returns their sequence numbers.
func (rt *Router) Schedule(ctx context.Context, entityName string, msgs []*fsm.Message) ([]int64, error) {
	return rt.enqueue(ctx, entityName, msgs, true)
}

func (rt *Router) enqueue(ctx context.Context, entityName string, msgs []*fsm.Message, schedule bool) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	e, err := rt.resolve(entityName)
	if err != nil {
		return nil, err
	}
	idx := e.pick(rt, msgs[0].SessionID, msgs[0].PartitionKey, msgs[0].MessageID)
	var req wire.Request = &wire.Enqueue{Msgs: msgs}
	if schedule {
		req = &wire.Schedule{Msgs: msgs}
	}
	r, err := rt.on(e.parts[idx]).do(ctx, req)
	seqs := r.Seqs
	for i := range seqs {
		seqs[i] = e.ext(idx, seqs[i])
	}
	return seqs, err
}

// Cancel cancels scheduled messages by sequence number (S-SCH-1).
func (rt *Router) Cancel(ctx context.Context, entityName string, seqs []int64) error {
	e, err := rt.resolve(entityName)
	if err != nil {
		return err
	}
	byPart, err := e.group(seqs)
	if err != nil {
		return err
	}
	for _, idx := range sortedKeys(byPart) {
		if _, err := rt.on(e.parts[idx]).do(ctx, &wire.Cancel{Seqs: byPart[idx]}); err != nil {
			return err
		}
	}
	return nil
}

func (e *entity) group(seqs []int64) (map[int][]int64, error) {
	out := map[int][]int64{}
	for _, s := range seqs {
		idx, local, err := e.split(s)
		if err != nil {
			return nil, err
		}
		out[idx] = append(out[idx], local)
	}
	return out, nil
}

func sortedKeys(m map[int][]int64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// Receive takes up to max messages (S-RCV-1). A session receive goes to the session's
// partition; otherwise the partitions are tried in turn, and when none has a message the
// call sleeps until one of them changes (no polling), up to wait in all.
func (rt *Router) Receive(ctx context.Context, a Address, sessionID, owner string, mode fsm.ReceiveMode, limit int, wait time.Duration) ([]*fsm.Message, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	req := fsm.Receive{Target: t, Mode: mode, Max: int32(limit), SessionID: sessionID, Owner: owner}
	if sessionID != "" || len(e.parts) == 1 {
		idx := e.keyed(sessionID)
		msgs, err := rt.on(e.parts[idx]).Receive(ctx, req, wait)
		return e.stamp(idx, msgs), err
	}
	var msgs []*fsm.Message
	idx := -1
	err = rt.waitAny(ctx, e, req, false, wait, func(i int) (bool, error) {
		m, err := rt.on(e.parts[i]).Receive(ctx, req, 0)
		if err != nil || len(m) > 0 {
			msgs, idx = m, i
			return true, err
		}
		return false, nil
	})
	if idx < 0 {
		return nil, err
	}
	return e.stamp(idx, msgs), err
}

// waitAny calls try on each partition, starting from a rotating one, until it reports
// done or an error; between rounds it waits for any partition to change, up to wait.
// Each partition has one watcher at a time: it holds that partition's current change
// signal (taken before the round that follows it) and is re-armed once it fired.
func (rt *Router) waitAny(ctx context.Context, e *entity, req fsm.Receive, accept bool, wait time.Duration, try func(i int) (done bool, err error)) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	fired := make(chan int, len(e.parts))
	stop := make(chan struct{})
	defer close(stop)
	armed := make([]bool, len(e.parts))
	for {
		for i, r := range e.parts {
			if armed[i] {
				continue
			}
			armed[i] = true
			go func(i int, ch <-chan struct{}) {
				select {
				case <-ch:
					fired <- i
				case <-stop:
				}
			}(i, rt.on(r).Changed(req, accept))
		}
		start := int(rt.turn(e).Add(1) % uint64(len(e.parts)))
		for i := range e.parts {
			if done, err := try((start + i) % len(e.parts)); done || err != nil {
				return err
			}
		}
		select {
		case i := <-fired:
			armed[i] = false
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// groupOfToken finds the partition group of e a lock token belongs to (the group ID is
// inside the token), wherever the group runs.
func (e *entity) groupOfToken(tok fsm.LockToken) (group, error) {
	id := partition.GroupOfToken(tok)
	for _, g := range e.parts {
		if g.id == id {
			return g, nil
		}
	}
	return group{}, fmt.Errorf("%w: lock token of an unknown partition", fsm.ErrLockLost)
}

// Settlement settles locked messages of one address with one outcome (S-LOCK-2..7).
type Settlement struct {
	Address     Address
	Tokens      []fsm.LockToken
	Disposition fsm.Disposition
	Properties  []rule.Property
	Reason      string
	Description string
	SessionID   string
	Owner       string
}

// Settle settles every token, routed by the group ID inside it; the tokens of one
// partition go in one proposal. It returns one error per token (nil: settled).
func (rt *Router) Settle(ctx context.Context, s Settlement) []error {
	errs := make([]error, len(s.Tokens))
	e, t, err := rt.target(s.Address)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if oneGroup(s.Tokens) { // the usual case (each settlement on its own): no grouping
		rt.settleGroup(ctx, e, t, &s, nil, errs)
		return errs
	}
	byGroup := map[uint32][]int{}
	var order []uint32
	for i, tok := range s.Tokens {
		g := partition.GroupOfToken(tok)
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	for _, g := range order {
		rt.settleGroup(ctx, e, t, &s, byGroup[g], errs)
	}
	return errs
}

// oneGroup reports whether every token belongs to the same partition group.
func oneGroup(toks []fsm.LockToken) bool {
	if len(toks) == 0 {
		return false
	}
	for _, tok := range toks[1:] {
		if partition.GroupOfToken(tok) != partition.GroupOfToken(toks[0]) {
			return false
		}
	}
	return true
}

// settleGroup settles the tokens of s at positions idx (nil: all of them), which
// belong to one partition group, and sets their errors in errs.
func (rt *Router) settleGroup(ctx context.Context, e *entity, t fsm.Target, s *Settlement, idx []int, errs []error) {
	count := len(s.Tokens)
	if idx != nil {
		count = len(idx)
	}
	at := func(j int) int { // position in s.Tokens and errs of the group's j-th token
		if idx == nil {
			return j
		}
		return idx[j]
	}
	g, err := e.groupOfToken(s.Tokens[at(0)])
	if err != nil {
		for j := range count {
			errs[at(j)] = err
		}
		return
	}
	toks := make([]fsm.LockToken, count)
	for j := range toks {
		toks[j] = s.Tokens[at(j)]
	}
	r, err := rt.on(g).do(ctx, &wire.Settle{Req: fsm.Settle{Target: t, Tokens: toks, Disposition: s.Disposition,
		Properties: s.Properties, Reason: s.Reason, Description: s.Description, SessionID: s.SessionID, Owner: s.Owner}})
	tokErrs := r.TokenErrs
	// With several tokens the fsm answers per token, and its command error is only the
	// first of those; otherwise (one token, or the proposal failed) the error is every
	// token's.
	perToken := len(tokErrs) == len(toks) && len(toks) > 1
	for j := range toks {
		if perToken {
			errs[at(j)] = unconfirmed(tokErrs[j])
		} else {
			errs[at(j)] = unconfirmed(err)
		}
	}
}

// unconfirmed turns the failure of a settlement that no leader confirmed in time into a
// lost lock: the message will come back when its lock expires (or the settlement did
// apply). A retriable error would be wrong here: the AMQP layer answers it with a
// settled rejection, after which a client's retry of the disposition sends nothing and
// reports success, so a completion that never applied would look done.
func unconfirmed(err error) error {
	if err == nil || errors.Is(err, fsm.ErrLockLost) || errors.Is(err, fsm.ErrSessionLockLost) {
		return err
	}
	if errors.Is(err, partition.ErrNotLeader) || errors.Is(err, ErrUnavailable) || errors.Is(err, partition.ErrClosed) ||
		errors.Is(err, partition.ErrTimeout) || errors.Is(err, partition.ErrOutcomeUnknown) || errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: the settlement was not confirmed (%v)", fsm.ErrLockLost, err)
	}
	return err
}

// RenewLock renews message locks (S-LOCK-8) and returns each new LockedUntil (Unix ms).
// The tokens of one partition are renewed in one call.
func (rt *Router) RenewLock(ctx context.Context, a Address, tokens []fsm.LockToken) ([]int64, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(tokens))
	byGroup := map[uint32][]int{}
	var order []group
	for i, tok := range tokens {
		g, err := e.groupOfToken(tok)
		if err != nil {
			return nil, err
		}
		if _, ok := byGroup[g.id]; !ok {
			order = append(order, g)
		}
		byGroup[g.id] = append(byGroup[g.id], i)
	}
	for _, g := range order {
		idx := byGroup[g.id]
		toks := make([]fsm.LockToken, len(idx))
		for j, i := range idx {
			toks[j] = tokens[i]
		}
		r, err := rt.on(g).do(ctx, &wire.RenewLock{Target: t, Tokens: toks})
		until := r.Untils
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			if j < len(until) {
				out[i] = until[j]
			}
		}
	}
	return out, nil
}

// Peek browses up to max messages from sequence number from (S-LOCK-11), through the
// partitions in index order (entity sequence numbers order the same way).
func (rt *Router) Peek(ctx context.Context, a Address, sessionID string, from int64, limit int) ([]*fsm.Message, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	startIdx, local, err := e.split(from)
	if err != nil {
		return nil, err
	}
	var out []*fsm.Message
	for idx := startIdx; idx < len(e.parts) && len(out) < limit; idx++ {
		fromSeq := int64(0)
		if idx == startIdx {
			fromSeq = local
		}
		for len(out) < limit {
			r, err := rt.on(e.parts[idx]).do(ctx, &wire.Peek{Target: t, From: fromSeq, Max: limit - len(out)})
			msgs := r.Msgs
			if err != nil {
				return out, err
			}
			if len(msgs) == 0 {
				break
			}
			fromSeq = msgs[len(msgs)-1].SequenceNumber + 1
			for _, m := range msgs {
				if sessionID == "" || m.SessionID == sessionID {
					out = append(out, m)
				}
			}
			e.stamp(idx, msgs)
			if sessionID == "" {
				break
			}
		}
	}
	return out, nil
}

// DeleteMessages removes up to max messages of a target enqueued before before (Unix
// ms), not locked, in sequence order (S-DEL-1..4; com.microsoft:batch-delete-messages),
// and returns how many. A session's messages live on its partition; otherwise the
// partitions are asked in index order (entity sequence numbers order the same way), each
// for what is still missing, one entry each, and the counts add up. On an error it
// returns what the partitions before deleted.
func (rt *Router) DeleteMessages(ctx context.Context, a Address, sessionID string, max int, before int64) (int, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return 0, err
	}
	if max < 1 || max > fsm.MaxDeleteCount {
		return 0, fmt.Errorf("%w: message count %d is not between 1 and %d", fsm.ErrBadCommand, max, fsm.MaxDeleteCount)
	}
	parts := e.parts
	if sessionID != "" {
		parts = e.parts[e.keyed(sessionID) : e.keyed(sessionID)+1]
	}
	if err := rt.requireLevel(parts, levelDeleteMessages, "batch delete"); err != nil {
		return 0, err
	}
	total := 0
	for _, g := range parts {
		if total == max {
			break
		}
		r, err := rt.on(g).do(ctx, &wire.DeleteMessages{Req: fsm.DeleteMessages{Target: t, Max: int32(max - total),
			Before: before, SessionID: sessionID}})
		total += int(r.Count)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReceiveDeferred receives deferred messages by sequence number (S-LOCK-7).
func (rt *Router) ReceiveDeferred(ctx context.Context, a Address, sessionID, owner string, mode fsm.ReceiveMode, seqs []int64) ([]*fsm.Message, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	byPart, err := e.group(seqs)
	if err != nil {
		return nil, err
	}
	var out []*fsm.Message
	for _, idx := range sortedKeys(byPart) {
		msgs, err := rt.on(e.parts[idx]).ReceiveDeferred(ctx, fsm.ReceiveDeferred{Target: t, Mode: mode, SeqNos: byPart[idx],
			SessionID: sessionID, Owner: owner})
		out = append(out, e.stamp(idx, msgs)...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// AcceptSession locks a session for owner (S-SES-2): the named one, or with an empty
// sessionID the next available one in any partition, waiting up to wait.
func (rt *Router) AcceptSession(ctx context.Context, a Address, sessionID, owner string, wait time.Duration) (string, int64, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return "", 0, err
	}
	req := fsm.AcceptSession{Target: t, SessionID: sessionID, Owner: owner}
	if sessionID != "" || len(e.parts) == 1 {
		return rt.on(e.parts[e.keyed(sessionID)]).AcceptSession(ctx, req, wait)
	}
	var id string
	var until int64
	err = rt.waitAny(ctx, e, fsm.Receive{Target: t}, true, wait, func(i int) (bool, error) {
		var err error
		id, until, err = rt.on(e.parts[i]).AcceptSession(ctx, req, 0)
		if errors.Is(err, fsm.ErrNoSessionAvailable) {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return "", 0, err
	}
	if id == "" {
		return "", 0, fsm.ErrNoSessionAvailable
	}
	return id, until, nil
}

// onSession runs req, built for the session's target, on the session's partition.
func (rt *Router) onSession(ctx context.Context, a Address, sessionID string, req func(fsm.Target) wire.Request) (wire.Result, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return wire.Result{}, err
	}
	return rt.on(e.parts[e.keyed(sessionID)]).do(ctx, req(t))
}

func sessionRef(t fsm.Target, sessionID, owner string) wire.SessionRef {
	return wire.SessionRef{Target: t, Session: sessionID, Owner: owner}
}

// ReleaseSession releases a session lock (S-SES-4).
func (rt *Router) ReleaseSession(ctx context.Context, a Address, sessionID, owner string) error {
	_, err := rt.onSession(ctx, a, sessionID, func(t fsm.Target) wire.Request {
		return &wire.ReleaseSession{SessionRef: sessionRef(t, sessionID, owner)}
	})
	return err
}

// RenewSession renews a session lock and returns its new expiry (Unix ms).
func (rt *Router) RenewSession(ctx context.Context, a Address, sessionID, owner string) (int64, error) {
	r, err := rt.onSession(ctx, a, sessionID, func(t fsm.Target) wire.Request {
		return &wire.RenewSession{SessionRef: sessionRef(t, sessionID, owner)}
	})
	return r.Until, err
}

// SessionState returns a session's state, nil when none (S-SES-5).
func (rt *Router) SessionState(ctx context.Context, a Address, sessionID string) ([]byte, error) {
	r, err := rt.onSession(ctx, a, sessionID, func(t fsm.Target) wire.Request {
		return &wire.GetState{SessionRef: sessionRef(t, sessionID, "")}
	})
	return r.State, err
}

// HeldSessionState returns a session's state for the holder of its lock, owner
// (fsm.ErrSessionLockLost for anyone else): get-session-state over AMQP.
func (rt *Router) HeldSessionState(ctx context.Context, a Address, sessionID, owner string) ([]byte, error) {
	r, err := rt.onSession(ctx, a, sessionID, func(t fsm.Target) wire.Request {
		return &wire.GetState{SessionRef: sessionRef(t, sessionID, owner)}
	})
	return r.State, err
}

// SetSessionState sets or (empty) clears a session's state (S-SES-5).
func (rt *Router) SetSessionState(ctx context.Context, a Address, sessionID, owner string, state []byte) error {
	_, err := rt.onSession(ctx, a, sessionID, func(t fsm.Target) wire.Request {
		return &wire.SetState{Req: fsm.SetSessionState{Target: t, SessionID: sessionID, Owner: owner, State: state}}
	})
	return err
}

// SessionsUpdatedSince lists the sessions whose state was set at since or later (as the
// partition leaders' clocks stamped it), across partitions, sorted.
func (rt *Router) SessionsUpdatedSince(ctx context.Context, a Address, since time.Time) ([]string, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range e.parts {
		r, err := rt.on(g).do(ctx, &wire.SessionsUpdatedSince{Target: t, From: since.UnixMilli()})
		if err != nil {
			return nil, err
		}
		out = append(out, r.Sessions...)
	}
	sort.Strings(out)
	return out, nil
}

// ListSessions lists the sessions with messages or state, across partitions, sorted.
func (rt *Router) ListSessions(ctx context.Context, a Address) ([]string, error) {
	e, t, err := rt.target(a)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range e.parts {
		r, err := rt.on(g).do(ctx, &wire.ListSessions{Target: t})
		if err != nil {
			return nil, err
		}
		out = append(out, r.Sessions...)
	}
	sort.Strings(out)
	return out, nil
}
