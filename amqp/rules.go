package amqp

import (
	"context"
	"fmt"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

// Rule management on a subscription's $management link: the request and response shapes
// of com.microsoft:add-rule, remove-rule and enumerate-rules as the official SDKs
// (ServiceBusRuleManager in .NET, Java and JavaScript) send and read them.

// Descriptor codes of the described types in an enumerate-rules answer, as Service Bus
// sends them (the filters' codes are a digit shorter than the rule description's).
const (
	descRuleDescription   uint64 = 0x0000013700000004
	descEmptyRuleAction   uint64 = 0x0000013700000005
	descSQLRuleAction     uint64 = 0x0000013700000006
	descSQLFilter         uint64 = 0x0000001370000006
	descTrueFilter        uint64 = 0x0000001370000007
	descFalseFilter       uint64 = 0x0000001370000008
	descCorrelationFilter uint64 = 0x0000001370000009
)

// sqlCompatibilityLevel is the compatibility level Service Bus reports for a SQL filter.
const sqlCompatibilityLevel = int32(20)

// correlationKeys are the correlation-filter map's system-property keys, in the order of
// the described correlation filter's fields.
var correlationKeys = [...]string{"correlation-id", "message-id", "to", "reply-to", "label",
	"session-id", "reply-to-session-id", "content-type"}

func (f *RuleFilter) correlationField(i int) *string {
	return [...]*string{&f.CorrelationID, &f.MessageID, &f.To, &f.ReplyTo, &f.Subject,
		&f.SessionID, &f.ReplyToSessionID, &f.ContentType}[i]
}

// ruleManager returns the Backend's rule capability and checks that the request's link
// is a subscription's.
func (c *conn) ruleManager(m *mgmtCall) (RuleManager, error) {
	rm, ok := c.b.(RuleManager)
	if !ok {
		return nil, fmt.Errorf("%w: rule management is not supported by this broker", errNotImplemented)
	}
	if m.info.Kind != KindSubscription {
		return nil, fmt.Errorf("%w: rule operations need a subscription's $management link, not a %s's", ErrBadRequest, m.info.Kind)
	}
	return rm, nil
}

// ruleName reads a required, non-empty string rule-name.
func ruleName(m Map) (string, error) {
	v, _ := m.GetString("rule-name")
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("%w: 'rule-name' must be a non-empty string", ErrBadRequest)
	}
	return s, nil
}

// sqlExpression reads the expression of a sql-filter or sql-rule-action: a map with a
// string 'expression' (the older JavaScript SDK sent the action as a bare string).
func sqlExpression(v any, what string) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case Map:
		e, _ := x.GetString("expression")
		if s, ok := e.(string); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: '%s' must be a map with a string 'expression'", ErrBadRequest, what)
}

// parseRuleDescription reads an add-rule body's rule-description map: exactly one of
// sql-filter and correlation-filter, and an optional sql-rule-action.
func parseRuleDescription(name string, d Map) (RuleDescription, error) {
	r := RuleDescription{Name: name}
	if n, found := d.GetString("rule-name"); found && n != nil {
		if s, ok := n.(string); !ok || s != name {
			return r, fmt.Errorf("%w: the rule-description names another rule than 'rule-name'", ErrBadRequest)
		}
	}
	sqlV, hasSQL := d.GetString("sql-filter")
	corrV, hasCorr := d.GetString("correlation-filter")
	hasSQL, hasCorr = hasSQL && sqlV != nil, hasCorr && corrV != nil
	switch {
	case hasSQL && hasCorr:
		return r, fmt.Errorf("%w: a rule-description has either a 'sql-filter' or a 'correlation-filter', not both", ErrBadRequest)
	case hasSQL:
		expr, err := sqlExpression(sqlV, "sql-filter")
		if err != nil {
			return r, err
		}
		// The SDKs send TrueRuleFilter and FalseRuleFilter as these SQL filters.
		switch expr {
		case "1=1":
			r.Filter.Kind = RuleFilterTrue
		case "1=0":
			r.Filter.Kind = RuleFilterFalse
		default:
			r.Filter = RuleFilter{Kind: RuleFilterSQL, SQL: expr}
		}
	case hasCorr:
		cm, ok := corrV.(Map)
		if !ok {
			return r, fmt.Errorf("%w: 'correlation-filter' must be a map", ErrBadRequest)
		}
		r.Filter.Kind = RuleFilterCorrelation
		for i, k := range correlationKeys {
			v, _ := cm.GetString(k)
			switch x := v.(type) {
			case nil:
			case string:
				*r.Filter.correlationField(i) = x
			default:
				return r, fmt.Errorf("%w: correlation-filter '%s' must be a string", ErrBadRequest, k)
			}
		}
		if v, _ := cm.GetString("properties"); v != nil {
			pm, ok := v.(Map)
			if !ok {
				return r, fmt.Errorf("%w: correlation-filter 'properties' must be a map", ErrBadRequest)
			}
			for _, e := range pm {
				k, ok := e.Key.(string)
				if !ok {
					if s, isSym := e.Key.(Symbol); isSym {
						k, ok = string(s), true
					}
				}
				if !ok {
					return r, fmt.Errorf("%w: correlation-filter property names must be strings", ErrBadRequest)
				}
				switch e.Value.(type) {
				case List, Map, *Array, *Described, Described:
					return r, fmt.Errorf("%w: correlation-filter property '%s' must be a simple value", ErrBadRequest, k)
				}
				r.Filter.Properties = append(r.Filter.Properties, Property{Key: k, Value: e.Value})
			}
		}
	default:
		return r, fmt.Errorf("%w: a rule-description needs a 'sql-filter' or a 'correlation-filter'", ErrBadRequest)
	}
	if v, found := d.GetString("sql-rule-action"); found && v != nil {
		expr, err := sqlExpression(v, "sql-rule-action")
		if err != nil {
			return r, err
		}
		r.Action = expr
	}
	return r, nil
}

func (c *conn) mgmtAddRule(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	rm, err := c.ruleManager(m)
	if err != nil {
		return rpcResponse{}, err
	}
	name, err := ruleName(m.body)
	if err != nil {
		return rpcResponse{}, err
	}
	v, _ := m.body.GetString("rule-description")
	d, ok := v.(Map)
	if !ok {
		return rpcResponse{}, fmt.Errorf("%w: 'rule-description' must be a map", ErrBadRequest)
	}
	r, err := parseRuleDescription(name, d)
	if err != nil {
		return rpcResponse{}, err
	}
	if err := rm.AddRule(ctx, m.addr.Entity, r); err != nil {
		return rpcResponse{}, err
	}
	return rpcOK, nil
}

func (c *conn) mgmtRemoveRule(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	rm, err := c.ruleManager(m)
	if err != nil {
		return rpcResponse{}, err
	}
	name, err := ruleName(m.body)
	if err != nil {
		return rpcResponse{}, err
	}
	if err := rm.RemoveRule(ctx, m.addr.Entity, name); err != nil {
		return rpcResponse{}, err
	}
	return rpcOK, nil
}

func (c *conn) mgmtEnumerateRules(ctx context.Context, m *mgmtCall) (rpcResponse, error) {
	rm, err := c.ruleManager(m)
	if err != nil {
		return rpcResponse{}, err
	}
	skip, _ := mapInt(m.body, "skip")
	top, found := mapInt(m.body, "top")
	if skip < 0 || (found && top < 0) {
		return rpcResponse{}, fmt.Errorf("%w: 'skip' and 'top' must not be negative", ErrBadRequest)
	}
	if !found || top == 0 {
		top = 1<<31 - 1 // the SDKs' default: every rule
	}
	rules, err := rm.Rules(ctx, m.addr.Entity)
	if err != nil {
		return rpcResponse{}, err
	}
	if skip >= int64(len(rules)) {
		return rpcResponse{status: 204, desc: "No rules"}, nil
	}
	rules = rules[skip:min(int64(len(rules)), skip+top)]
	list := make(List, len(rules))
	for i, r := range rules {
		list[i] = Map{{Key: "rule-description", Value: encodeRule(r)}}
	}
	return rpcResponse{status: 200, body: Map{{Key: "rules", Value: list}}}, nil
}

// encodeRule builds the described rule description of an enumerate-rules answer:
// [filter, action, name, created-at].
func encodeRule(r RuleDescription) *Described {
	var filter *Described
	switch r.Filter.Kind {
	case RuleFilterTrue:
		filter = &Described{Descriptor: descTrueFilter, Value: List{}}
	case RuleFilterFalse:
		filter = &Described{Descriptor: descFalseFilter, Value: List{}}
	case RuleFilterSQL:
		filter = &Described{Descriptor: descSQLFilter, Value: List{r.Filter.SQL, sqlCompatibilityLevel}}
	default:
		f := make(List, 0, len(correlationKeys)+1)
		for i := range correlationKeys {
			var v any
			if s := *r.Filter.correlationField(i); s != "" {
				v = s
			}
			f = append(f, v)
		}
		props := make(Map, 0, len(r.Filter.Properties))
		for _, p := range r.Filter.Properties {
			props = append(props, encoding.MapEntry{Key: p.Key, Value: p.Value})
		}
		filter = &Described{Descriptor: descCorrelationFilter, Value: append(f, props)}
	}
	action := &Described{Descriptor: descEmptyRuleAction, Value: List{}}
	if r.Action != "" {
		action = &Described{Descriptor: descSQLRuleAction, Value: List{r.Action, sqlCompatibilityLevel}}
	}
	var created any
	if !r.CreatedAt.IsZero() {
		created = r.CreatedAt
	}
	return &Described{Descriptor: descRuleDescription, Value: List{filter, action, r.Name, created}}
}
