package meta

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// State is the namespace metadata: the state machine of the metadata Raft group.
// Names are looked up case-insensitively and keep the case they were created with;
// queues and topics share one set of names.
type State struct {
	ns          Namespace
	entities    map[string]*entity // key: lower-case name
	keys        map[string]*SASKey // key: lower-case key name
	nodes       map[string]*Node   // key: node ID (exact)
	nextGroupID uint32             // next partition group ID to allocate; IDs start at 1
	now         int64              // max Entry.Now applied
}

type entity struct {
	kind      EntityKind
	queue     *Queue
	topic     *Topic
	subs      []*Subscription // KindTopic: in creation order
	placement []Partition
}

func (e *entity) name() string {
	if e.kind == KindQueue {
		return e.queue.Name
	}
	return e.topic.Name
}

// New returns an empty State.
func New() *State {
	return &State{entities: map[string]*entity{}, keys: map[string]*SASKey{}, nodes: map[string]*Node{}, nextGroupID: 1}
}

func key(name string) string { return strings.ToLower(name) }

// Apply applies one entry. A rejected command leaves the state unchanged and returns an
// error wrapping ErrExists, ErrNotFound or ErrInvalid. The outcome depends only on the
// state and the entry (P1).
//
// Apply rejects a command only because of the state (the name exists or does not, a
// fixed property would change, a forward target is missing, a limit is reached) or to
// keep its own invariants (non-empty names, 1..MaxPartitionCount partitions, unique
// rule names), which no release may tighten. Bounds and syntax (S-ENT-2, names, SQL)
// are checked by ValidateCommand before a command is proposed: a later release may
// change them, and must still apply every entry an earlier one committed (P3).
func (s *State) Apply(e *Entry) error {
	if e == nil || e.Cmd == nil {
		return invalid("", "empty command")
	}
	if e.Now > s.now {
		s.now = e.Now
	}
	now := s.now
	switch c := e.Cmd.(type) {
	case *SetNamespace:
		if c.Name == "" {
			return invalid("Name", "must not be empty")
		}
		if s.ns.CreatedAt == 0 {
			s.ns.CreatedAt = now
		}
		s.ns.Name, s.ns.UpdatedAt = c.Name, now
		return nil
	case *CreateQueue:
		return s.createQueue(c, now)
	case *UpdateQueue:
		return s.updateQueue(c, now)
	case *DeleteQueue:
		if _, err := s.lookup(c.Name, KindQueue); err != nil {
			return err
		}
		delete(s.entities, key(c.Name))
		return nil
	case *CreateTopic:
		return s.createTopic(c, now)
	case *UpdateTopic:
		return s.updateTopic(c, now)
	case *DeleteTopic:
		if _, err := s.lookup(c.Name, KindTopic); err != nil {
			return err
		}
		delete(s.entities, key(c.Name))
		return nil
	case *CreateSubscription:
		return s.createSubscription(c, now)
	case *UpdateSubscription:
		return s.updateSubscription(c, now)
	case *DeleteSubscription:
		t, i, err := s.subscription(c.Topic, c.Name)
		if err != nil {
			return err
		}
		t.subs = slices.Delete(t.subs, i, i+1)
		return nil
	case *CreateRule:
		return s.createRule(c, now)
	case *UpdateRule:
		return s.updateRule(c, now)
	case *DeleteRule:
		t, i, err := s.subscription(c.Topic, c.Subscription)
		if err != nil {
			return err
		}
		sub := t.subs[i]
		j := ruleIndex(sub.Rules, c.Name)
		if j < 0 {
			return notFound("rule", c.Topic+"/Subscriptions/"+c.Subscription+"/Rules/"+c.Name)
		}
		sub.Rules = slices.Delete(slices.Clone(sub.Rules), j, j+1)
		return nil
	case *PutSASKey:
		k := cloneKey(c.Key)
		if k.Name == "" {
			return invalid("KeyName", "must not be empty")
		}
		if old, ok := s.keys[key(k.Name)]; ok {
			k.CreatedAt = old.CreatedAt
		} else {
			k.CreatedAt = now
		}
		k.ModifiedAt = now
		s.keys[key(k.Name)] = &k
		return nil
	case *DeleteSASKey:
		if _, ok := s.keys[key(c.Name)]; !ok {
			return notFound("SAS key", c.Name)
		}
		delete(s.keys, key(c.Name))
		return nil
	case *SetPlacement:
		en, ok := s.entities[key(c.Entity)]
		if !ok {
			return notFound("entity", c.Entity)
		}
		if len(c.Replicas) != len(en.placement) {
			return invalid("Replicas", "%d replica lists for %d partitions", len(c.Replicas), len(en.placement))
		}
		p := clonePartitions(en.placement)
		for i := range p {
			p[i].Replicas = slices.Clone(c.Replicas[i])
		}
		en.placement = p
		return nil
	case *PutNode:
		if c.Node.ID == "" {
			return invalid("ID", "must not be empty")
		}
		nd := c.Node
		s.nodes[nd.ID] = &nd
		return nil
	case *DeleteNode:
		if _, ok := s.nodes[c.ID]; !ok {
			return notFound("node", c.ID)
		}
		delete(s.nodes, c.ID)
		return nil
	}
	return invalid("", "unknown command %T", e.Cmd)
}

func notFound(kind, name string) error {
	return fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
}

func exists(kind, name string) error {
	return fmt.Errorf("%s %q: %w", kind, name, ErrExists)
}

// guardName is Apply's invariant on names: present, and not absurdly long.
func guardName(n string) error {
	if n == "" || len(n) > MaxNameLength {
		return invalid("Name", "must be 1..%d characters", MaxNameLength)
	}
	return nil
}

func validateNamespaceName(n string) error {
	if n == "" || len(n) > 50 {
		return invalid("Name", "a namespace name must be 1..50 characters")
	}
	for _, c := range n {
		if !isNameChar(c) {
			return invalid("Name", "%q contains %q; allowed are letters, digits, '.', '-' and '_'", n, c)
		}
	}
	return nil
}

// lookup finds an entity of the given kind (KindNone: any).
func (s *State) lookup(name string, kind EntityKind) (*entity, error) {
	e, ok := s.entities[key(name)]
	if !ok || (kind != KindNone && e.kind != kind) {
		what := kind.String()
		if kind == KindNone {
			what = "entity"
		}
		return nil, notFound(what, name)
	}
	return e, nil
}

func (s *State) subscription(topic, name string) (*entity, int, error) {
	t, err := s.lookup(topic, KindTopic)
	if err != nil {
		return nil, 0, err
	}
	for i, sub := range t.subs {
		if strings.EqualFold(sub.Name, name) {
			return t, i, nil
		}
	}
	return nil, 0, notFound("subscription", topic+"/Subscriptions/"+name)
}

func ruleIndex(rules []Rule, name string) int {
	for i := range rules {
		if strings.EqualFold(rules[i].Spec.Name, name) {
			return i
		}
	}
	return -1
}

func (s *State) checkForwards(self, fwd, fwdDLQ string) error {
	for _, f := range []struct{ field, to string }{{"ForwardTo", fwd}, {"ForwardDeadLetteredMessagesTo", fwdDLQ}} {
		if f.to == "" {
			continue
		}
		target := ForwardTarget(f.to)
		if self != "" && strings.EqualFold(target, self) {
			return invalid(f.field, "an entity cannot forward to itself")
		}
		if _, ok := s.entities[key(target)]; !ok {
			return invalid(f.field, "the target entity %q does not exist", target)
		}
	}
	return nil
}

func (s *State) allocate(n int32, replicas [][]string) ([]Partition, error) {
	if n < 1 || n > MaxPartitionCount {
		return nil, invalid("PartitionCount", "%d is outside 1..%d", n, MaxPartitionCount)
	}
	if replicas != nil && len(replicas) != int(n) {
		return nil, invalid("Replicas", "%d replica lists for %d partitions", len(replicas), n)
	}
	if uint64(s.nextGroupID)+uint64(n) > 1<<32-1 {
		return nil, invalid("PartitionCount", "partition group IDs exhausted")
	}
	p := make([]Partition, n)
	for i := range p {
		p[i].GroupID = s.nextGroupID
		s.nextGroupID++
		if replicas != nil {
			p[i].Replicas = slices.Clone(replicas[i])
			p[i].Bootstrap = slices.Clone(replicas[i])
		}
	}
	return p, nil
}

func (s *State) createQueue(c *CreateQueue, now int64) error {
	if err := guardName(c.Name); err != nil {
		return err
	}
	if e, ok := s.entities[key(c.Name)]; ok {
		return exists(e.kind.String(), e.name())
	}
	p := cloneQueueProps(c.Properties)
	if err := s.checkForwards(c.Name, p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return err
	}
	pl, err := s.allocate(p.PartitionCount, c.Replicas)
	if err != nil {
		return err
	}
	s.entities[key(c.Name)] = &entity{kind: KindQueue, placement: pl,
		queue: &Queue{Name: c.Name, Properties: p, CreatedAt: now, UpdatedAt: now}}
	s.recordBase(c.Name)
	return nil
}

func (s *State) updateQueue(c *UpdateQueue, now int64) error {
	e, err := s.lookup(c.Name, KindQueue)
	if err != nil {
		return err
	}
	p := cloneQueueProps(c.Properties)
	old := e.queue.Properties
	if err := checkFixed(&old, &p); err != nil {
		return err
	}
	if err := s.checkForwards(e.queue.Name, p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return err
	}
	q := *e.queue
	q.Properties, q.UpdatedAt = p, now
	e.queue = &q
	return nil
}

func (s *State) createTopic(c *CreateTopic, now int64) error {
	if err := guardName(c.Name); err != nil {
		return err
	}
	if e, ok := s.entities[key(c.Name)]; ok {
		return exists(e.kind.String(), e.name())
	}
	p := cloneTopicProps(c.Properties)
	pl, err := s.allocate(p.PartitionCount, c.Replicas)
	if err != nil {
		return err
	}
	s.entities[key(c.Name)] = &entity{kind: KindTopic, placement: pl,
		topic: &Topic{Name: c.Name, Properties: p, CreatedAt: now, UpdatedAt: now}}
	s.recordBase(c.Name)
	return nil
}

func (s *State) updateTopic(c *UpdateTopic, now int64) error {
	e, err := s.lookup(c.Name, KindTopic)
	if err != nil {
		return err
	}
	p := cloneTopicProps(c.Properties)
	old := e.topic.Properties
	if err := checkFixed(&old, &p); err != nil {
		return err
	}
	t := *e.topic
	t.Properties, t.UpdatedAt = p, now
	e.topic = &t
	return nil
}

func (s *State) createSubscription(c *CreateSubscription, now int64) error {
	t, err := s.lookup(c.Topic, KindTopic)
	if err != nil {
		return err
	}
	if err := guardName(c.Name); err != nil {
		return err
	}
	for _, sub := range t.subs {
		if strings.EqualFold(sub.Name, c.Name) {
			return exists("subscription", t.topic.Name+"/Subscriptions/"+sub.Name)
		}
	}
	if len(t.subs) >= MaxSubscriptionsPerTopic {
		return invalid("", "topic %q already has the maximum of %d subscriptions", t.topic.Name, MaxSubscriptionsPerTopic)
	}
	p := c.Properties
	if err := s.checkForwards("", p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return err
	}
	specs := c.Rules
	if len(specs) == 0 {
		specs = []rule.Spec{{Name: rule.DefaultRuleName, Filter: rule.FilterSpec{Kind: rule.FilterTrue}}}
	}
	if len(specs) > MaxRulesPerSubscription {
		return invalid("Rules", "at most %d rules are allowed", MaxRulesPerSubscription)
	}
	rules := make([]Rule, 0, len(specs))
	for i, sp := range specs {
		if sp.Name == "" {
			return invalid(fmt.Sprintf("Rules[%d].Name", i), "must not be empty")
		}
		if ruleIndex(rules, sp.Name) >= 0 {
			return invalid(fmt.Sprintf("Rules[%d].Name", i), "%q is used twice", sp.Name)
		}
		rules = append(rules, Rule{Spec: cloneSpec(sp), CreatedAt: now})
	}
	t.subs = append(slices.Clip(t.subs), &Subscription{Topic: t.topic.Name, Name: c.Name,
		Properties: p, CreatedAt: now, UpdatedAt: now, Rules: rules})
	return nil
}

func (s *State) updateSubscription(c *UpdateSubscription, now int64) error {
	t, i, err := s.subscription(c.Topic, c.Name)
	if err != nil {
		return err
	}
	p := c.Properties
	old := t.subs[i]
	if err := checkFixed(&old.Properties, &p); err != nil {
		return err
	}
	if err := s.checkForwards("", p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return err
	}
	sub := *old
	sub.Properties, sub.UpdatedAt = p, now
	t.subs[i] = &sub
	return nil
}

func (s *State) createRule(c *CreateRule, now int64) error {
	t, i, err := s.subscription(c.Topic, c.Subscription)
	if err != nil {
		return err
	}
	if err := guardName(c.Rule.Name); err != nil {
		return err
	}
	sub := *t.subs[i]
	if j := ruleIndex(sub.Rules, c.Rule.Name); j >= 0 {
		return exists("rule", c.Topic+"/Subscriptions/"+c.Subscription+"/Rules/"+sub.Rules[j].Spec.Name)
	}
	if len(sub.Rules) >= MaxRulesPerSubscription {
		return invalid("", "subscription already has the maximum of %d rules", MaxRulesPerSubscription)
	}
	sub.Rules = append(slices.Clip(sub.Rules), Rule{Spec: cloneSpec(c.Rule), CreatedAt: now})
	t.subs[i] = &sub
	return nil
}

func (s *State) updateRule(c *UpdateRule, now int64) error {
	t, i, err := s.subscription(c.Topic, c.Subscription)
	if err != nil {
		return err
	}
	sub := *t.subs[i]
	j := ruleIndex(sub.Rules, c.Rule.Name)
	if j < 0 {
		return notFound("rule", c.Topic+"/Subscriptions/"+c.Subscription+"/Rules/"+c.Rule.Name)
	}
	sp := cloneSpec(c.Rule)
	sp.Name = sub.Rules[j].Spec.Name // keep the original case
	sub.Rules = slices.Clone(sub.Rules)
	sub.Rules[j] = Rule{Spec: sp, CreatedAt: sub.Rules[j].CreatedAt}
	t.subs[i] = &sub
	return nil
}

// ---- reads: every result is a copy the caller may keep.

// Now returns the largest Entry.Now applied.
func (s *State) Now() int64 { return s.now }

// Namespace returns the namespace.
func (s *State) Namespace() Namespace { return s.ns }

// Kind says whether name is a queue, a topic, or nothing.
func (s *State) Kind(name string) EntityKind {
	if e, ok := s.entities[key(name)]; ok {
		return e.kind
	}
	return KindNone
}

// DuplicateDetection reports whether the queue or topic requires duplicate detection
// (read on every send to a partitioned entity, so it copies nothing).
func (s *State) DuplicateDetection(name string) bool {
	e, ok := s.entities[key(name)]
	switch {
	case !ok:
		return false
	case e.kind == KindQueue:
		return e.queue.Properties.RequiresDuplicateDetection
	case e.kind == KindTopic:
		return e.topic.Properties.RequiresDuplicateDetection
	}
	return false
}

// Queue returns a queue by name (case-insensitive).
func (s *State) Queue(name string) (Queue, bool) {
	e, ok := s.entities[key(name)]
	if !ok || e.kind != KindQueue {
		return Queue{}, false
	}
	return cloneQueue(*e.queue), true
}

// Topic returns a topic by name (case-insensitive).
func (s *State) Topic(name string) (Topic, bool) {
	e, ok := s.entities[key(name)]
	if !ok || e.kind != KindTopic {
		return Topic{}, false
	}
	t := *e.topic
	t.Properties = cloneTopicProps(t.Properties)
	return t, true
}

// Queues returns every queue, sorted by lower-case name.
func (s *State) Queues() []Queue {
	var out []Queue
	for _, k := range s.sortedKeys() {
		if e := s.entities[k]; e.kind == KindQueue {
			out = append(out, cloneQueue(*e.queue))
		}
	}
	return out
}

// Topics returns every topic, sorted by lower-case name.
func (s *State) Topics() []Topic {
	var out []Topic
	for _, k := range s.sortedKeys() {
		if e := s.entities[k]; e.kind == KindTopic {
			t, _ := s.Topic(k)
			out = append(out, t)
		}
	}
	return out
}

func (s *State) sortedKeys() []string {
	ks := make([]string, 0, len(s.entities))
	for k := range s.entities {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Subscriptions returns a topic's subscriptions in creation order; false if the topic
// does not exist.
func (s *State) Subscriptions(topic string) ([]Subscription, bool) {
	t, err := s.lookup(topic, KindTopic)
	if err != nil {
		return nil, false
	}
	out := make([]Subscription, len(t.subs))
	for i, sub := range t.subs {
		out[i] = cloneSub(*sub)
	}
	return out, true
}

// Subscription returns one subscription.
func (s *State) Subscription(topic, name string) (Subscription, bool) {
	t, i, err := s.subscription(topic, name)
	if err != nil {
		return Subscription{}, false
	}
	return cloneSub(*t.subs[i]), true
}

// Rule returns one rule of a subscription.
func (s *State) Rule(topic, sub, name string) (Rule, bool) {
	t, i, err := s.subscription(topic, sub)
	if err != nil {
		return Rule{}, false
	}
	j := ruleIndex(t.subs[i].Rules, name)
	if j < 0 {
		return Rule{}, false
	}
	return Rule{Spec: cloneSpec(t.subs[i].Rules[j].Spec), CreatedAt: t.subs[i].Rules[j].CreatedAt}, true
}

// SASKey returns a namespace key by name (case-insensitive).
func (s *State) SASKey(name string) (SASKey, bool) {
	k, ok := s.keys[key(name)]
	if !ok {
		return SASKey{}, false
	}
	return *k, true
}

// SASKeys returns every namespace key, sorted by lower-case name.
func (s *State) SASKeys() []SASKey {
	ks := make([]string, 0, len(s.keys))
	for k := range s.keys {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	out := make([]SASKey, len(ks))
	for i, k := range ks {
		out[i] = *s.keys[k]
	}
	return out
}

// Placement returns where an entity's partitions run.
func (s *State) Placement(entity string) (Placement, bool) {
	e, ok := s.entities[key(entity)]
	if !ok {
		return Placement{}, false
	}
	return Placement{Entity: e.name(), Partitions: clonePartitions(e.placement)}, true
}

// Route is Placement without the copies, for the per-message path that only needs to
// know where an entity's partitions live: fn sees the entity's display name and its
// partitions as stored. fn must not modify them, and may keep a partition's Replicas
// (never changed in place: SetPlacement installs new lists) but nothing else.
func (s *State) Route(entity string, fn func(name string, parts []Partition)) bool {
	e, ok := s.entities[key(entity)]
	if ok {
		fn(e.name(), e.placement)
	}
	return ok
}

// Placements returns the placement of every entity, sorted by lower-case name.
func (s *State) Placements() []Placement {
	var out []Placement
	for _, k := range s.sortedKeys() {
		p, _ := s.Placement(k)
		out = append(out, p)
	}
	return out
}

// PlacementsView is Placements without the copies, for passes over every placement
// inside Read: the partitions are the stored ones. Callers must not modify them, and may
// keep a partition's Replicas (never changed in place: SetPlacement installs new lists)
// but nothing else past Read.
func (s *State) PlacementsView() []Placement {
	keys := s.sortedKeys()
	out := make([]Placement, 0, len(keys))
	for _, k := range keys {
		e := s.entities[k]
		out = append(out, Placement{Entity: e.name(), Partitions: e.placement})
	}
	return out
}

// ---- copies

func clonePartitions(ps []Partition) []Partition {
	out := make([]Partition, len(ps))
	for i, p := range ps {
		out[i] = Partition{GroupID: p.GroupID, Replicas: slices.Clone(p.Replicas),
			Bootstrap: slices.Clone(p.Bootstrap), Base: slices.Clone(p.Base)}
	}
	return out
}

func cloneKey(k SASKey) SASKey { return k }

func cloneKeys(ks []SASKey) []SASKey { return slices.Clone(ks) }

func cloneQueueProps(p QueueProperties) QueueProperties {
	p.AuthorizationRules = cloneKeys(p.AuthorizationRules)
	return p
}

func cloneTopicProps(p TopicProperties) TopicProperties {
	p.AuthorizationRules = cloneKeys(p.AuthorizationRules)
	return p
}

func cloneQueue(q Queue) Queue {
	q.Properties = cloneQueueProps(q.Properties)
	return q
}

func cloneSub(s Subscription) Subscription {
	rules := make([]Rule, len(s.Rules))
	for i, r := range s.Rules {
		rules[i] = Rule{Spec: cloneSpec(r.Spec), CreatedAt: r.CreatedAt}
	}
	s.Rules = rules
	return s
}

func cloneSpec(s rule.Spec) rule.Spec {
	s.Filter.Parameters = slices.Clone(s.Filter.Parameters)
	s.Filter.Correlation.Properties = slices.Clone(s.Filter.Correlation.Properties)
	s.Action.Parameters = slices.Clone(s.Action.Parameters)
	return s
}

// recordBase records, in each partition of a new entity, the fsm configuration its group
// starts from (see Partition.Base).
func (s *State) recordBase(name string) {
	e := s.entities[key(name)]
	for i := range e.placement {
		cfg, err := s.PartitionConfig(name, i)
		if err != nil {
			continue
		}
		e.placement[i].Base = fsm.AppendEntry(nil, &fsm.Entry{Cmds: []fsm.Command{&fsm.UpdateEntity{Config: cfg}}})
	}
}

// Node returns a registered node.
func (s *State) Node(id string) (Node, bool) {
	n, ok := s.nodes[id]
	if !ok {
		return Node{}, false
	}
	return *n, true
}

// Nodes returns the registered nodes, sorted by ID.
func (s *State) Nodes() []Node {
	out := make([]Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// NextGroupID is the group ID the next partition will get: every smaller ID was
// allocated at some point (IDs are never reused).
func (s *State) NextGroupID() uint32 { return s.nextGroupID }
