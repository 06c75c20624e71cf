package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Wire format (P3). An entry is:
//
//	version byte (entryVersion) | op byte | Now int64 big-endian | JSON payload
//
// The payload is the command struct as JSON, except that rule values carry their bytes
// as base64 so that binary and UUID values survive (JSON strings would not). encoding/json
// writes struct fields in declaration order and has no maps here, so the same command
// always encodes to the same bytes. Decoders reject unknown versions and ops, truncated
// input and malformed JSON with ErrBadEntry, and never panic.
//
// A snapshot is: magic "QBMETA" | version byte | JSON state | SHA-256 of everything before.

const (
	entryVersion    = 1
	snapshotVersion = 1
	snapshotMagic   = "QBMETA"
)

// AppendEntry appends the encoding of e to dst.
func AppendEntry(dst []byte, e *Entry) ([]byte, error) {
	if e == nil || e.Cmd == nil {
		return nil, fmt.Errorf("%w: nil command", ErrBadEntry)
	}
	op := e.Cmd.Op()
	if op == 0 || op >= opCount {
		return nil, fmt.Errorf("%w: unknown op %d", ErrBadEntry, op)
	}
	payload, err := json.Marshal(toWire(e.Cmd))
	if err != nil {
		return nil, fmt.Errorf("meta: encode %s: %w", op, err)
	}
	dst = append(dst, entryVersion, byte(op))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Now))
	return append(dst, payload...), nil
}

// EncodeEntry returns the encoding of e.
func EncodeEntry(e *Entry) ([]byte, error) { return AppendEntry(nil, e) }

// DecodeEntry decodes an entry written by AppendEntry.
func DecodeEntry(b []byte) (*Entry, error) {
	if len(b) < 10 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrBadEntry, len(b))
	}
	if b[0] != entryVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrBadEntry, b[0])
	}
	op := Op(b[1])
	cmd := newCommand(op)
	if cmd == nil {
		return nil, fmt.Errorf("%w: unknown op %d", ErrBadEntry, b[1])
	}
	now := int64(binary.BigEndian.Uint64(b[2:10]))
	w := toWire(cmd)
	if err := json.Unmarshal(b[10:], w); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadEntry, op, err)
	}
	fromWire(w, cmd)
	return &Entry{Now: now, Cmd: cmd}, nil
}

// ---- rule specs on the wire

type wireValue struct {
	Kind rule.Kind
	N    uint64 `json:",omitempty"`
	S    []byte `json:",omitempty"`
}

type wireProp struct {
	Key   string
	Value wireValue
}

type wireSpec struct {
	Name        string
	FilterKind  rule.FilterKind
	SQL         string     `json:",omitempty"`
	Parameters  []wireProp `json:",omitempty"`
	Correlation struct {
		CorrelationID, MessageID, To, ReplyTo, Subject, SessionID, ReplyToSessionID, ContentType string     `json:",omitempty"`
		Properties                                                                               []wireProp `json:",omitempty"`
	}
	ActionSQL        string     `json:",omitempty"`
	ActionParameters []wireProp `json:",omitempty"`
}

func propsToWire(ps []rule.Property) []wireProp {
	if len(ps) == 0 {
		return nil
	}
	out := make([]wireProp, len(ps))
	for i, p := range ps {
		out[i] = wireProp{Key: p.Key, Value: wireValue{Kind: p.Value.Kind, N: p.Value.N, S: []byte(p.Value.S)}}
	}
	return out
}

func propsFromWire(ps []wireProp) []rule.Property {
	if len(ps) == 0 {
		return nil
	}
	out := make([]rule.Property, len(ps))
	for i, p := range ps {
		out[i] = rule.Property{Key: p.Key, Value: rule.Value{Kind: p.Value.Kind, N: p.Value.N, S: string(p.Value.S)}}
	}
	return out
}

func specToWire(s rule.Spec) wireSpec {
	w := wireSpec{Name: s.Name, FilterKind: s.Filter.Kind, SQL: s.Filter.SQL,
		Parameters: propsToWire(s.Filter.Parameters), ActionSQL: s.Action.SQL,
		ActionParameters: propsToWire(s.Action.Parameters)}
	c := s.Filter.Correlation
	w.Correlation.CorrelationID, w.Correlation.MessageID, w.Correlation.To = c.CorrelationID, c.MessageID, c.To
	w.Correlation.ReplyTo, w.Correlation.Subject, w.Correlation.SessionID = c.ReplyTo, c.Subject, c.SessionID
	w.Correlation.ReplyToSessionID, w.Correlation.ContentType = c.ReplyToSessionID, c.ContentType
	w.Correlation.Properties = propsToWire(c.Properties)
	return w
}

func specFromWire(w wireSpec) rule.Spec {
	c := w.Correlation
	return rule.Spec{
		Name: w.Name,
		Filter: rule.FilterSpec{Kind: w.FilterKind, SQL: w.SQL, Parameters: propsFromWire(w.Parameters),
			Correlation: rule.Correlation{CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To,
				ReplyTo: c.ReplyTo, Subject: c.Subject, SessionID: c.SessionID,
				ReplyToSessionID: c.ReplyToSessionID, ContentType: c.ContentType,
				Properties: propsFromWire(c.Properties)}},
		Action: rule.ActionSpec{SQL: w.ActionSQL, Parameters: propsFromWire(w.ActionParameters)},
	}
}

func specsToWire(ss []rule.Spec) []wireSpec {
	if ss == nil {
		return nil
	}
	out := make([]wireSpec, len(ss))
	for i, s := range ss {
		out[i] = specToWire(s)
	}
	return out
}

func specsFromWire(ws []wireSpec) []rule.Spec {
	if ws == nil {
		return nil
	}
	out := make([]rule.Spec, len(ws))
	for i, w := range ws {
		out[i] = specFromWire(w)
	}
	return out
}

type wireCreateSubscription struct {
	Topic, Name string
	Properties  SubscriptionProperties
	Rules       []wireSpec
}

type wireRuleCmd struct {
	Topic, Subscription string
	Rule                wireSpec
}

// toWire returns the value to marshal for a command (or to unmarshal into).
func toWire(c Command) any {
	switch c := c.(type) {
	case *CreateSubscription:
		return &wireCreateSubscription{Topic: c.Topic, Name: c.Name, Properties: c.Properties, Rules: specsToWire(c.Rules)}
	case *CreateRule:
		return &wireRuleCmd{Topic: c.Topic, Subscription: c.Subscription, Rule: specToWire(c.Rule)}
	case *UpdateRule:
		return &wireRuleCmd{Topic: c.Topic, Subscription: c.Subscription, Rule: specToWire(c.Rule)}
	}
	return c
}

// fromWire copies a decoded wire value into the command toWire made it for.
func fromWire(w any, c Command) {
	switch c := c.(type) {
	case *CreateSubscription:
		x := w.(*wireCreateSubscription)
		*c = CreateSubscription{Topic: x.Topic, Name: x.Name, Properties: x.Properties, Rules: specsFromWire(x.Rules)}
	case *CreateRule:
		x := w.(*wireRuleCmd)
		*c = CreateRule{Topic: x.Topic, Subscription: x.Subscription, Rule: specFromWire(x.Rule)}
	case *UpdateRule:
		x := w.(*wireRuleCmd)
		*c = UpdateRule{Topic: x.Topic, Subscription: x.Subscription, Rule: specFromWire(x.Rule)}
	}
}

// ---- snapshots

type snapRule struct {
	Spec      wireSpec
	CreatedAt int64
}

type snapSub struct {
	Name       string
	Properties SubscriptionProperties
	CreatedAt  int64
	UpdatedAt  int64
	Rules      []snapRule
}

type snapEntity struct {
	Kind      EntityKind
	Queue     *Queue `json:",omitempty"`
	Topic     *Topic `json:",omitempty"`
	Subs      []snapSub
	Placement []Partition
}

type snapState struct {
	Namespace   Namespace
	NextGroupID uint32
	Now         int64
	Entities    []snapEntity // sorted by lower-case name
	Keys        []SASKey     // sorted by lower-case name
	Nodes       []Node       `json:",omitempty"` // sorted by ID
}

// Snapshot writes the whole state. The same state always writes the same bytes.
func (s *State) Snapshot(w io.Writer) error {
	ss := snapState{Namespace: s.ns, NextGroupID: s.nextGroupID, Now: s.now, Keys: s.SASKeys()}
	if len(s.nodes) > 0 {
		ss.Nodes = s.Nodes()
	}
	for _, k := range s.sortedKeys() {
		e := s.entities[k]
		se := snapEntity{Kind: e.kind, Queue: e.queue, Topic: e.topic, Placement: e.placement}
		for _, sub := range e.subs {
			ssub := snapSub{Name: sub.Name, Properties: sub.Properties, CreatedAt: sub.CreatedAt, UpdatedAt: sub.UpdatedAt}
			for _, r := range sub.Rules {
				ssub.Rules = append(ssub.Rules, snapRule{Spec: specToWire(r.Spec), CreatedAt: r.CreatedAt})
			}
			se.Subs = append(se.Subs, ssub)
		}
		ss.Entities = append(ss.Entities, se)
	}
	body, err := json.Marshal(&ss)
	if err != nil {
		return fmt.Errorf("meta: snapshot: %w", err)
	}
	buf := make([]byte, 0, len(snapshotMagic)+1+len(body)+sha256.Size)
	buf = append(buf, snapshotMagic...)
	buf = append(buf, snapshotVersion)
	buf = append(buf, body...)
	sum := sha256.Sum256(buf)
	buf = append(buf, sum[:]...)
	_, err = w.Write(buf)
	return err
}

// Digest returns the SHA-256 of the snapshot encoding: equal digests, equal states.
func (s *State) Digest() [32]byte {
	var b bytes.Buffer
	_ = s.Snapshot(&b)
	return sha256.Sum256(b.Bytes())
}

// Restore replaces the whole state with a snapshot written by Snapshot. On error the
// state is unchanged.
func (s *State) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	hdr := len(snapshotMagic) + 1
	if len(b) < hdr+sha256.Size || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: bad header", ErrSnapshot)
	}
	if b[len(snapshotMagic)] != snapshotVersion {
		return fmt.Errorf("%w: unknown version %d", ErrSnapshot, b[len(snapshotMagic)])
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	var ss snapState
	if err := json.Unmarshal(body[hdr:], &ss); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	n := New()
	n.ns, n.nextGroupID, n.now = ss.Namespace, ss.NextGroupID, ss.Now
	for _, k := range ss.Keys {
		k := k
		n.keys[key(k.Name)] = &k
	}
	for _, nd := range ss.Nodes {
		nd := nd
		n.nodes[nd.ID] = &nd
	}
	for i, se := range ss.Entities {
		e := &entity{kind: se.Kind, queue: se.Queue, topic: se.Topic, placement: se.Placement}
		var name string
		switch {
		case se.Kind == KindQueue && se.Queue != nil:
			name = se.Queue.Name
		case se.Kind == KindTopic && se.Topic != nil:
			name = se.Topic.Name
			for _, ssub := range se.Subs {
				sub := &Subscription{Topic: name, Name: ssub.Name, Properties: ssub.Properties,
					CreatedAt: ssub.CreatedAt, UpdatedAt: ssub.UpdatedAt}
				for _, r := range ssub.Rules {
					sub.Rules = append(sub.Rules, Rule{Spec: specFromWire(r.Spec), CreatedAt: r.CreatedAt})
				}
				e.subs = append(e.subs, sub)
			}
		default:
			return fmt.Errorf("%w: entity %d has kind %d and no body", ErrSnapshot, i, se.Kind)
		}
		if _, dup := n.entities[key(name)]; dup {
			return fmt.Errorf("%w: entity %q twice", ErrSnapshot, name)
		}
		e.placement = slices.Clip(e.placement)
		n.entities[key(name)] = e
	}
	*s = *n
	return nil
}
