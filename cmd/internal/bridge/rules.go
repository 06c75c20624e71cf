package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

var _ amqp.RuleManager = (*Backend)(nil)

// splitSubscription splits "t/Subscriptions/s" into topic and subscription.
func splitSubscription(path string) (topic, sub string, err error) {
	i := strings.LastIndex(strings.ToLower(path), "/subscriptions/")
	if i < 0 {
		return "", "", fmt.Errorf("%w: %q is not a subscription", amqp.ErrBadRequest, path)
	}
	return path[:i], path[i+len("/subscriptions/"):], nil
}

// AddRule implements amqp.RuleManager: the same metadata command as the administration
// API's PUT of a rule, so the rule is validated and replicated as one made there.
func (b *Backend) AddRule(ctx context.Context, subscription string, r amqp.RuleDescription) error {
	topic, sub, err := splitSubscription(subscription)
	if err != nil {
		return err
	}
	return metaErr(b.store.Apply(ctx, &meta.CreateRule{Topic: topic, Subscription: sub, Rule: ruleSpec(r)}), subscription)
}

// RemoveRule implements amqp.RuleManager, as the administration API's DELETE of a rule.
func (b *Backend) RemoveRule(ctx context.Context, subscription, name string) error {
	topic, sub, err := splitSubscription(subscription)
	if err != nil {
		return err
	}
	return metaErr(b.store.Apply(ctx, &meta.DeleteRule{Topic: topic, Subscription: sub, Name: name}), subscription+"/Rules/"+name)
}

// Rules implements amqp.RuleManager from this node's metadata replica.
func (b *Backend) Rules(ctx context.Context, subscription string) ([]amqp.RuleDescription, error) {
	topic, sub, err := splitSubscription(subscription)
	if err != nil {
		return nil, err
	}
	var out []amqp.RuleDescription
	found := false
	if err := b.store.Read(ctx, func(s *meta.State) {
		var sb meta.Subscription
		if sb, found = s.Subscription(topic, sub); found {
			for _, r := range sb.Rules {
				out = append(out, ruleDescription(r))
			}
		}
	}); err != nil {
		return nil, metaErr(err, subscription)
	}
	if !found {
		return nil, metaErr(meta.ErrNotFound, subscription)
	}
	return out, nil
}

func ruleSpec(r amqp.RuleDescription) rule.Spec {
	sp := rule.Spec{Name: r.Name, Action: rule.ActionSpec{SQL: r.Action}}
	f := r.Filter
	switch f.Kind {
	case amqp.RuleFilterTrue:
		sp.Filter.Kind = rule.FilterTrue
	case amqp.RuleFilterFalse:
		sp.Filter.Kind = rule.FilterFalse
	case amqp.RuleFilterSQL:
		sp.Filter = rule.FilterSpec{Kind: rule.FilterSQL, SQL: f.SQL}
	case amqp.RuleFilterCorrelation:
		c := rule.Correlation{CorrelationID: f.CorrelationID, MessageID: f.MessageID, To: f.To,
			ReplyTo: f.ReplyTo, Subject: f.Subject, SessionID: f.SessionID,
			ReplyToSessionID: f.ReplyToSessionID, ContentType: f.ContentType}
		for _, p := range f.Properties {
			c.Properties = append(c.Properties, rule.Property{Key: p.Key, Value: toValue(p.Value)})
		}
		sp.Filter = rule.FilterSpec{Kind: rule.FilterCorrelation, Correlation: c}
	default:
		sp.Filter.Kind = rule.FilterKind(255) // refused by validation as an unknown kind
	}
	return sp
}

func ruleDescription(r meta.Rule) amqp.RuleDescription {
	s := r.Spec
	out := amqp.RuleDescription{Name: s.Name, Action: s.Action.SQL, CreatedAt: time.UnixMilli(r.CreatedAt).UTC()}
	switch s.Filter.Kind {
	case rule.FilterTrue:
		out.Filter.Kind = amqp.RuleFilterTrue
	case rule.FilterFalse:
		out.Filter.Kind = amqp.RuleFilterFalse
	case rule.FilterSQL:
		out.Filter = amqp.RuleFilter{Kind: amqp.RuleFilterSQL, SQL: s.Filter.SQL}
	case rule.FilterCorrelation:
		c := s.Filter.Correlation
		out.Filter = amqp.RuleFilter{Kind: amqp.RuleFilterCorrelation, CorrelationID: c.CorrelationID,
			MessageID: c.MessageID, To: c.To, ReplyTo: c.ReplyTo, Subject: c.Subject, SessionID: c.SessionID,
			ReplyToSessionID: c.ReplyToSessionID, ContentType: c.ContentType}
		for _, p := range c.Properties {
			out.Filter.Properties = append(out.Filter.Properties, amqp.Property{Key: p.Key, Value: fromValue(p.Value)})
		}
	}
	return out
}

// metaErr maps a metadata change's outcome to amqp's sentinels, as the administration
// API maps it to HTTP statuses (409, 404, 400, 503). A missing entity is described in
// Service Bus's words, which the JavaScript SDK recognizes as MessagingEntityNotFound.
func metaErr(err error, path string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, meta.ErrExists):
		return fmt.Errorf("%w: %s", amqp.ErrEntityExists, admin.StripPrefixes(err.Error()))
	case errors.Is(err, meta.ErrNotFound):
		return fmt.Errorf("%w: the messaging entity '%s' could not be found (%s)", amqp.ErrNotFound, path, admin.StripPrefixes(err.Error()))
	case errors.Is(err, meta.ErrInvalid):
		return fmt.Errorf("%w: %s", amqp.ErrBadRequest, admin.StripPrefixes(err.Error()))
	case errors.Is(err, admin.ErrUnavailable):
		return fmt.Errorf("%w: %s", amqp.ErrServerBusy, admin.StripPrefixes(err.Error()))
	}
	return mapErr(err)
}
