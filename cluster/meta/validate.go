package meta

import (
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// reservedSegments may not appear as a path segment of a queue or topic name, because
// the addressing scheme gives them meaning (S-ENT-1, protocol.md §4, §10).
var reservedSegments = []string{"Subscriptions", "$DeadLetterQueue", "$Transfer",
	"$management", "$cbs", "$Resources", "$namespaceinfo"}

// ValidateEntityName checks a queue or topic name as Service Bus does: 1..260 characters,
// letters, digits, '.', '-', '_' and '/'; starting and ending with a letter or digit; no
// empty segment ("//"); no reserved segment such as "Subscriptions".
func ValidateEntityName(name string) error {
	if name == "" {
		return invalid("Name", "must not be empty")
	}
	if len(name) > MaxNameLength {
		return invalid("Name", "%q is longer than %d characters", trunc(name), MaxNameLength)
	}
	for _, c := range name {
		if !isNameChar(c) && c != '/' {
			return invalid("Name", "%q contains %q; allowed are letters, digits, '.', '-', '_' and '/'", name, c)
		}
	}
	if err := alnumEnds("Name", name); err != nil {
		return err
	}
	if strings.Contains(name, "//") {
		return invalid("Name", "%q must not contain an empty segment (\"//\")", name)
	}
	for _, seg := range strings.Split(name, "/") {
		for _, r := range reservedSegments {
			if strings.EqualFold(seg, r) {
				return invalid("Name", "%q uses the reserved path segment %q", name, r)
			}
		}
		if strings.HasPrefix(seg, ".") || strings.HasSuffix(seg, ".") {
			return invalid("Name", "%q: a path segment must not start or end with '.'", name)
		}
	}
	return nil
}

// ValidateSubscriptionName checks a subscription name: 1..50 characters, letters, digits,
// '.', '-', '_', starting and ending with a letter or digit; not a reserved word.
func ValidateSubscriptionName(name string) error {
	return validateShortName("Name", name, MaxSubscriptionNameLength, false)
}

// ValidateRuleName checks a rule name: 1..50 characters, letters, digits, '.', '-', '_',
// starting and ending with a letter or digit, or exactly "$Default".
func ValidateRuleName(name string) error {
	return validateShortName("Name", name, MaxRuleNameLength, true)
}

func validateShortName(field, name string, max int, rule bool) error {
	if rule && name == "$Default" {
		return nil
	}
	if name == "" {
		return invalid(field, "must not be empty")
	}
	if len(name) > max {
		return invalid(field, "%q is longer than %d characters", trunc(name), max)
	}
	for _, c := range name {
		if !isNameChar(c) {
			return invalid(field, "%q contains %q; allowed are letters, digits, '.', '-' and '_'", name, c)
		}
	}
	for _, r := range reservedSegments {
		if strings.EqualFold(name, r) {
			return invalid(field, "%q is a reserved name", name)
		}
	}
	return alnumEnds(field, name)
}

// alnumEnds: Service Bus names start and end with a letter or digit (its naming rules
// for queues, topics, subscriptions and rules); name holds only name characters and
// '/' already. Names are checked when created, never when a command is applied, so an
// entity an earlier release accepted with another first character stays usable (P3).
func alnumEnds(field, name string) error {
	isAlnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if !isAlnum(name[0]) || !isAlnum(name[len(name)-1]) {
		return invalid(field, "%q must start and end with a letter or digit", name)
	}
	return nil
}

func isNameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '-' || c == '_'
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func checkDuration(field string, d, min, max time.Duration) error {
	if d < min {
		return invalid(field, "%q is below the minimum %s", FormatISODuration(d), humanDuration(min))
	}
	if max > 0 && d > max {
		return invalid(field, "%q is above the maximum %s", FormatISODuration(d), humanDuration(max))
	}
	return nil
}

func checkPositiveDuration(field string, d time.Duration) error {
	if d <= 0 {
		return invalid(field, "%q must be greater than zero", FormatISODuration(d))
	}
	return nil
}

// Validate checks a queue's properties against S-ENT-2: the bounds of Properties, then
// its authorization rules.
func (p *QueueProperties) Validate() error {
	if err := validateProps(p); err != nil {
		return err
	}
	return checkKeys("AuthorizationRules", p.AuthorizationRules)
}

// Validate checks a topic's properties against S-ENT-2: the bounds of Properties, then
// its authorization rules.
func (p *TopicProperties) Validate() error {
	if err := validateProps(p); err != nil {
		return err
	}
	return checkKeys("AuthorizationRules", p.AuthorizationRules)
}

// Validate checks a subscription's properties against the bounds of Properties (S-ENT-2).
func (p *SubscriptionProperties) Validate() error {
	return validateProps(p)
}

func checkForward(field, to string) error {
	if to == "" {
		return nil
	}
	if err := ValidateEntityName(ForwardTarget(to)); err != nil {
		return WithPrefix(field, err)
	}
	return nil
}

func checkKeys(field string, keys []SASKey) error {
	if len(keys) > MaxAuthorizationRules {
		return invalid(field, "at most %d rules are allowed, got %d", MaxAuthorizationRules, len(keys))
	}
	seen := map[string]bool{}
	for i, k := range keys {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := k.Validate(); err != nil {
			return WithPrefix(f, err)
		}
		if seen[strings.ToLower(k.Name)] {
			return invalid(f+".KeyName", "%q is used twice", k.Name)
		}
		seen[strings.ToLower(k.Name)] = true
	}
	return nil
}

// Validate checks a SAS key: a name like a subscription's (up to 256 characters), a
// non-empty primary key, keys of at most 256 characters, at least one right, and Manage
// only together with Send and Listen (as Service Bus requires).
func (k *SASKey) Validate() error {
	if k.Name == "" || len(k.Name) > 256 {
		return invalid("KeyName", "must be 1..256 characters")
	}
	for _, c := range k.Name {
		if !isNameChar(c) {
			return invalid("KeyName", "%q contains %q; allowed are letters, digits, '.', '-' and '_'", k.Name, c)
		}
	}
	if k.PrimaryKey == "" {
		return invalid("PrimaryKey", "must not be empty")
	}
	if len(k.PrimaryKey) > MaxSASKeyLength || len(k.SecondaryKey) > MaxSASKeyLength {
		return invalid("PrimaryKey", "keys must be at most %d characters", MaxSASKeyLength)
	}
	if k.Rights == 0 || k.Rights&^(RightSend|RightListen|RightManage) != 0 {
		return invalid("Rights", "must be a non-empty combination of Manage, Send and Listen")
	}
	if k.Rights.Has(RightManage) && !k.Rights.Has(RightSend|RightListen) {
		return invalid("Rights", "Manage requires Send and Listen")
	}
	return nil
}

// ForwardTarget returns the entity name a ForwardTo value points at. Service Bus accepts a
// plain name or an absolute URI (sb://ns.servicebus.windows.net/q2); the host is ignored
// (same namespace, S-ENT-2).
func ForwardTarget(to string) string {
	if i := strings.Index(to, "://"); i >= 0 {
		rest := to[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			return strings.Trim(rest[j+1:], "/")
		}
		return ""
	}
	return strings.Trim(to, "/")
}

// ValidateRule checks a rule spec: its name, its filter and action (compiled with
// rule.Compile, so SQL syntax errors surface here), and correlation filters that set at
// least one field.
func ValidateRule(s rule.Spec) error {
	if err := ValidateRuleName(s.Name); err != nil {
		return err
	}
	switch s.Filter.Kind {
	case rule.FilterTrue, rule.FilterFalse:
	case rule.FilterSQL:
		if strings.TrimSpace(s.Filter.SQL) == "" {
			return invalid("Filter.SqlExpression", "must not be empty")
		}
	case rule.FilterCorrelation:
		c := s.Filter.Correlation
		if c.CorrelationID == "" && c.MessageID == "" && c.To == "" && c.ReplyTo == "" &&
			c.Subject == "" && c.SessionID == "" && c.ReplyToSessionID == "" &&
			c.ContentType == "" && len(c.Properties) == 0 {
			return invalid("Filter", "a correlation filter must set at least one property")
		}
	default:
		return invalid("Filter", "unknown filter kind %d", s.Filter.Kind)
	}
	if _, err := rule.Compile(s); err != nil {
		field := "Filter"
		if s.Filter.Kind == rule.FilterSQL {
			field = "Filter.SqlExpression"
		}
		if s.Action.SQL != "" && (s.Filter.Kind != rule.FilterSQL || compilesWithoutAction(s)) {
			field = "Action.SqlExpression"
		}
		return invalid(field, "%v", err)
	}
	return nil
}

func compilesWithoutAction(s rule.Spec) bool {
	s.Action = rule.ActionSpec{}
	_, err := rule.Compile(s)
	return err == nil
}

// ValidateCommand checks everything about a command that does not depend on the state:
// names, S-ENT-2 bounds, SAS keys and rule syntax. Proposers (the admin API, the
// Config.json loader, the node's bootstrap) call it before proposing; State.Apply then
// checks only what depends on the state (see Apply).
func ValidateCommand(c Command) error {
	switch c := c.(type) {
	case *SetNamespace:
		return validateNamespaceName(c.Name)
	case *CreateQueue:
		return firstErr(ValidateEntityName(c.Name), c.Properties.Validate())
	case *UpdateQueue:
		return c.Properties.Validate()
	case *CreateTopic:
		return firstErr(ValidateEntityName(c.Name), c.Properties.Validate())
	case *UpdateTopic:
		return c.Properties.Validate()
	case *CreateSubscription:
		if err := firstErr(ValidateSubscriptionName(c.Name), c.Properties.Validate()); err != nil {
			return err
		}
		if len(c.Rules) > MaxRulesPerSubscription {
			return invalid("Rules", "at most %d rules are allowed", MaxRulesPerSubscription)
		}
		for i, r := range c.Rules {
			if err := ValidateRule(r); err != nil {
				return WithPrefix(fmt.Sprintf("Rules[%d]", i), err)
			}
		}
		return nil
	case *UpdateSubscription:
		return c.Properties.Validate()
	case *CreateRule:
		return ValidateRule(c.Rule)
	case *UpdateRule:
		return ValidateRule(c.Rule)
	case *PutSASKey:
		return c.Key.Validate()
	case *PutNode:
		if c.Node.ID == "" || c.Node.Addr == "" {
			return invalid("Node", "a node needs an ID and an address")
		}
		return nil
	case *DeleteQueue, *DeleteTopic, *DeleteSubscription, *DeleteRule, *DeleteSASKey, *SetPlacement, *DeleteNode:
		return nil
	case nil:
		return invalid("", "empty command")
	}
	return invalid("", "unknown command %T", c)
}
