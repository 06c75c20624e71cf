package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// EmulatorConfig is the official Service Bus emulator's Config.json (UserConfig ->
// Namespaces -> Queues / Topics -> Subscriptions -> Rules, and Logging), turned into
// metadata commands. See docs/config-json.md for the fields and how they map.
type EmulatorConfig struct {
	Namespace   string // the one namespace declared
	LoggingType string // UserConfig.Logging.Type: "File", "Console", "File,Console", ...; "" if absent

	items []planItem // in apply order: creations first, then the updates that set forwards
}

type planItem struct {
	cmd   Command
	path  string // where in Config.json it came from
	owner string // the entity this belongs to: "q" or "t" or "t/Subscriptions/s"; its creation decides
}

// Counts returns how many queues, topics and subscriptions the file declares.
func (c *EmulatorConfig) Counts() (queues, topics, subscriptions int) {
	for _, it := range c.items {
		switch it.cmd.(type) {
		case *CreateQueue:
			queues++
		case *CreateTopic:
			topics++
		case *CreateSubscription:
			subscriptions++
		}
	}
	return queues, topics, subscriptions
}

// Commands returns every command that creates the declared entities in an empty state,
// in order: the namespace, queues, topics with their subscriptions and rules, then the
// updates that set ForwardTo / ForwardDeadLetteredMessagesTo (so a forward may name an
// entity declared later in the file).
func (c *EmulatorConfig) Commands() []Command {
	out := make([]Command, len(c.items))
	for i, it := range c.items {
		out[i] = it.cmd
	}
	return out
}

// Plan returns the commands that bring s to what the file declares without touching what
// already exists: entities (and subscriptions) that exist are left as they are, since
// they may have been changed through the admin API since the last start; missing ones are
// created with the declared properties and rules. The namespace is named only when s has
// none yet.
func (c *EmulatorConfig) Plan(s *State) []Command {
	var out []Command
	for _, it := range c.items {
		switch it.cmd.(type) {
		case *SetNamespace:
			if s.Namespace().Name != "" {
				continue
			}
		default:
			topic, sub, isSub := strings.Cut(it.owner, "/Subscriptions/")
			if isSub {
				if _, ok := s.Subscription(topic, sub); ok {
					continue
				}
			} else if s.Kind(it.owner) != KindNone {
				continue
			}
		}
		out = append(out, it.cmd)
	}
	return out
}

// LoadEmulatorConfig parses a Config.json as the emulator accepts it: // and /* */
// comments, trailing commas and a UTF-8 byte order mark are allowed, property names match case-insensitively,
// unknown fields are ignored and reported in warnings. Invalid values fail with an error
// naming the field path, e.g.
// `UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: "PT1S" is below the minimum 5s`.
// Bounds are Service Bus's (S-ENT-2), not the emulator's narrower ones; absent
// properties take Service Bus defaults.
func LoadEmulatorConfig(data []byte) (*EmulatorConfig, []string, error) {
	clean := stripJSONComments(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))) // editors on Windows add a BOM
	dec := json.NewDecoder(bytes.NewReader(clean))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		//lint:ignore ST1005 Config.json is the file's name
		return nil, nil, fmt.Errorf("Config.json: %s", jsonErr(clean, err))
	}
	if dec.More() {
		//lint:ignore ST1005 Config.json is the file's name
		return nil, nil, fmt.Errorf("Config.json: unexpected data after the top-level object")
	}
	w := &walker{}
	cfg, err := w.load(root)
	if err != nil {
		return nil, w.warns, err
	}
	// Validate the whole plan against an empty state: duplicate names, forward targets.
	s := New()
	for _, it := range cfg.items {
		if err := ValidateCommand(it.cmd); err != nil {
			return nil, w.warns, WithPrefix(it.path, err)
		}
		if err := s.Apply(&Entry{Cmd: it.cmd}); err != nil {
			if errors.Is(err, ErrExists) {
				return nil, w.warns, fmt.Errorf("%s.Name: %v (declared twice, names are case-insensitive)", it.path, err)
			}
			return nil, w.warns, WithPrefix(it.path, err)
		}
	}
	return cfg, w.warns, nil
}

func jsonErr(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := 1, 1
		for _, b := range data[:min(int(se.Offset), len(data))] {
			if b == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
		return fmt.Sprintf("line %d, column %d: %v", line, col, err)
	}
	return err.Error()
}

// stripJSONComments blanks out // and /* */ comments that are outside strings (keeping
// newlines, so positions in errors stay right) and drops trailing commas before } or ].
func stripJSONComments(in []byte) []byte {
	out := bytes.Clone(in)
	inStr := false
	for i := 0; i < len(out); i++ {
		c := out[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			out[i], out[i+1] = ' ', ' '
			for i += 2; i < len(out); i++ {
				if out[i] == '*' && i+1 < len(out) && out[i+1] == '/' {
					out[i], out[i+1] = ' ', ' '
					i++
					break
				}
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
		}
	}
	// Trailing commas.
	inStr = false
	for i := 0; i < len(out); i++ {
		c := out[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			continue
		}
		if c == ',' {
			j := i + 1
			for j < len(out) && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
		}
	}
	return out
}

type walker struct {
	warns []string
}

type object struct {
	path string
	m    map[string]any // canonical field name -> value (nulls dropped)
}

func (w *walker) object(path string, v any, known ...string) (*object, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: expected an object, got %s", path, describe(v))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	o := &object{path: path, m: map[string]any{}}
	for _, k := range keys {
		i := slices.IndexFunc(known, func(f string) bool { return strings.EqualFold(f, k) })
		if i < 0 {
			w.warns = append(w.warns, fmt.Sprintf("%s.%s: unknown field, ignored", path, k))
			continue
		}
		if m[k] != nil {
			o.m[known[i]] = m[k]
		}
	}
	return o, nil
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("%q", x)
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func (o *object) has(name string) bool { _, ok := o.m[name]; return ok }

func (o *object) str(name string) (string, bool, error) {
	v, ok := o.m[name]
	if !ok {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", false, fmt.Errorf("%s.%s: expected a string, got %s", o.path, name, describe(v))
	}
	return s, true, nil
}

func (o *object) boolean(name string, dst *bool) error {
	v, ok := o.m[name]
	if !ok {
		return nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return fmt.Errorf("%s.%s: expected true or false, got %s", o.path, name, describe(v))
	}
	*dst = b
	return nil
}

func (o *object) integer(name string, min, max int64) (int64, bool, error) {
	v, ok := o.m[name]
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil {
		return 0, false, fmt.Errorf("%s.%s: expected an integer, got %s", o.path, name, describe(v))
	}
	if i < min || i > max {
		return 0, false, fmt.Errorf("%s.%s: %d is outside %d..%d", o.path, name, i, min, max)
	}
	return i, true, nil
}

func (o *object) int32v(name string, dst *int32) error {
	i, ok, err := o.integer(name, math.MinInt32, math.MaxInt32)
	if ok {
		*dst = int32(i)
	}
	return err
}

func (o *object) int64v(name string, dst *int64) error {
	i, ok, err := o.integer(name, math.MinInt64, math.MaxInt64)
	if ok {
		*dst = i
	}
	return err
}

func (o *object) duration(name string, dst *time.Duration) error {
	s, ok, err := o.str(name)
	if err != nil || !ok {
		return err
	}
	d, err := ParseISODuration(s)
	if err != nil {
		return fmt.Errorf("%s.%s: %v", o.path, name, err)
	}
	*dst = d
	return nil
}

func (o *object) stringv(name string, dst *string) error {
	s, ok, err := o.str(name)
	if ok {
		*dst = s
	}
	return err
}

func (o *object) status(name string, dst *Status) error {
	s, ok, err := o.str(name)
	if err != nil || !ok {
		return err
	}
	st, err := ParseStatus(s)
	if err != nil {
		return fmt.Errorf("%s.%s: %v", o.path, name, err)
	}
	*dst = st
	return nil
}

func (o *object) array(w *walker, name string) ([]any, error) {
	v, ok := o.m[name]
	if !ok {
		return nil, nil
	}
	a, isArr := v.([]any)
	if !isArr {
		return nil, fmt.Errorf("%s.%s: expected an array, got %s", o.path, name, describe(v))
	}
	return a, nil
}

func (o *object) child(w *walker, name string, known ...string) (*object, error) {
	v, ok := o.m[name]
	if !ok {
		return nil, nil
	}
	return w.object(o.path+"."+name, v, known...)
}

var loggingTypes = []string{"File", "Console", "File,Console", "Console,File"}

func (w *walker) load(root any) (*EmulatorConfig, error) {
	top, err := w.object("Config.json", root, "UserConfig", "$schema")
	if err != nil {
		return nil, err
	}
	top.path = ""
	if !top.has("UserConfig") {
		return nil, fmt.Errorf("UserConfig: required")
	}
	uc, err := w.object("UserConfig", top.m["UserConfig"], "Namespaces", "Logging")
	if err != nil {
		return nil, err
	}
	cfg := &EmulatorConfig{}
	if lg, err := uc.child(w, "Logging", "Type"); err != nil {
		return nil, err
	} else if lg != nil {
		t, _, err := lg.str("Type")
		if err != nil {
			return nil, err
		}
		if t != "" && !slices.ContainsFunc(loggingTypes, func(x string) bool { return strings.EqualFold(x, strings.ReplaceAll(t, " ", "")) }) {
			return nil, fmt.Errorf("UserConfig.Logging.Type: %q is not one of %s", t, strings.Join(loggingTypes, ", "))
		}
		cfg.LoggingType = t
	}
	nss, err := uc.array(w, "Namespaces")
	if err != nil {
		return nil, err
	}
	if len(nss) != 1 {
		return nil, fmt.Errorf("UserConfig.Namespaces: exactly one namespace is supported, got %d", len(nss))
	}
	ns, err := w.object("UserConfig.Namespaces[0]", nss[0], "Name", "Queues", "Topics")
	if err != nil {
		return nil, err
	}
	name, ok, err := ns.str("Name")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s.Name: required", ns.path)
	}
	if err := validateNamespaceName(name); err != nil {
		return nil, WithPrefix(ns.path, err)
	}
	cfg.Namespace = name
	cfg.items = append(cfg.items, planItem{cmd: &SetNamespace{Name: name}, path: ns.path})
	var forwards []planItem

	queues, err := ns.array(w, "Queues")
	if err != nil {
		return nil, err
	}
	for i, qv := range queues {
		path := fmt.Sprintf("%s.Queues[%d]", ns.path, i)
		c, fwd, err := w.queue(path, qv)
		if err != nil {
			return nil, err
		}
		cfg.items = append(cfg.items, planItem{cmd: c, path: path, owner: c.Name})
		if fwd != nil {
			forwards = append(forwards, planItem{cmd: fwd, path: path + ".Properties", owner: c.Name})
		}
	}
	topics, err := ns.array(w, "Topics")
	if err != nil {
		return nil, err
	}
	for i, tv := range topics {
		path := fmt.Sprintf("%s.Topics[%d]", ns.path, i)
		items, fwds, err := w.topic(path, tv)
		if err != nil {
			return nil, err
		}
		cfg.items = append(cfg.items, items...)
		forwards = append(forwards, fwds...)
	}
	cfg.items = append(cfg.items, forwards...)
	return cfg, nil
}

func entityName(o *object, validate func(string) error) (string, error) {
	name, ok, err := o.str("Name")
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s.Name: required", o.path)
	}
	if err := validate(name); err != nil {
		return "", WithPrefix(o.path, err)
	}
	return name, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// fields returns the names Config.json accepts in the Properties of an entity of kind k,
// in table order.
func fields(k EntitySet) []string {
	var out []string
	for i := range Properties {
		if Properties[i].ConfigJSON.Has(k) {
			out = append(out, Properties[i].Name)
		}
	}
	return out
}

// props reads every property Config.json accepts for the kind of dst (a pointer to its
// properties struct) from o, and returns the first error, in table order.
func (o *object) props(dst any) error {
	k := kindOf(dst)
	var errs []error
	for i := range Properties {
		p := &Properties[i]
		if !p.ConfigJSON.Has(k) {
			continue
		}
		switch ptr := p.Ptr(dst).(type) {
		case *time.Duration:
			errs = append(errs, o.duration(p.Name, ptr))
		case *int32:
			errs = append(errs, o.int32v(p.Name, ptr))
		case *int64:
			errs = append(errs, o.int64v(p.Name, ptr))
		case *bool:
			errs = append(errs, o.boolean(p.Name, ptr))
		case *string:
			errs = append(errs, o.stringv(p.Name, ptr))
		case *Status:
			errs = append(errs, o.status(p.Name, ptr))
		default:
			panic("meta: Config.json property " + p.Name + " has no field")
		}
	}
	return firstErr(errs...)
}

// queue returns the create command (without forwards) and, if forwards are set, the
// update that sets them.
func (w *walker) queue(path string, v any) (*CreateQueue, *UpdateQueue, error) {
	o, err := w.object(path, v, "Name", "Properties")
	if err != nil {
		return nil, nil, err
	}
	name, err := entityName(o, ValidateEntityName)
	if err != nil {
		return nil, nil, err
	}
	p := DefaultQueueProperties()
	if po, err := o.child(w, "Properties", fields(OnQueue)...); err != nil {
		return nil, nil, err
	} else if po != nil {
		if err := po.props(&p); err != nil {
			return nil, nil, err
		}
	}
	if err := p.Validate(); err != nil {
		return nil, nil, WithPrefix(path+".Properties", err)
	}
	create := &CreateQueue{Name: name, Properties: p}
	if p.ForwardTo == "" && p.ForwardDeadLetteredMessagesTo == "" {
		return create, nil, nil
	}
	create.Properties.ForwardTo, create.Properties.ForwardDeadLetteredMessagesTo = "", ""
	return create, &UpdateQueue{Name: name, Properties: cloneQueueProps(p)}, nil
}

func (w *walker) topic(path string, v any) ([]planItem, []planItem, error) {
	o, err := w.object(path, v, "Name", "Properties", "Subscriptions")
	if err != nil {
		return nil, nil, err
	}
	name, err := entityName(o, ValidateEntityName)
	if err != nil {
		return nil, nil, err
	}
	p := DefaultTopicProperties()
	if po, err := o.child(w, "Properties", fields(OnTopic)...); err != nil {
		return nil, nil, err
	} else if po != nil {
		if err := po.props(&p); err != nil {
			return nil, nil, err
		}
	}
	if err := p.Validate(); err != nil {
		return nil, nil, WithPrefix(path+".Properties", err)
	}
	items := []planItem{{cmd: &CreateTopic{Name: name, Properties: p}, path: path, owner: name}}
	var fwds []planItem
	subs, err := o.array(w, "Subscriptions")
	if err != nil {
		return nil, nil, err
	}
	for j, sv := range subs {
		spath := fmt.Sprintf("%s.Subscriptions[%d]", path, j)
		c, fwd, err := w.subscription(spath, name, sv)
		if err != nil {
			return nil, nil, err
		}
		owner := name + "/Subscriptions/" + c.Name
		items = append(items, planItem{cmd: c, path: spath, owner: owner})
		if fwd != nil {
			fwds = append(fwds, planItem{cmd: fwd, path: spath + ".Properties", owner: owner})
		}
	}
	return items, fwds, nil
}

func (w *walker) subscription(path, topic string, v any) (*CreateSubscription, *UpdateSubscription, error) {
	o, err := w.object(path, v, "Name", "Properties", "Rules")
	if err != nil {
		return nil, nil, err
	}
	name, err := entityName(o, ValidateSubscriptionName)
	if err != nil {
		return nil, nil, err
	}
	p := DefaultSubscriptionProperties()
	if po, err := o.child(w, "Properties", fields(OnSubscription)...); err != nil {
		return nil, nil, err
	} else if po != nil {
		if err := po.props(&p); err != nil {
			return nil, nil, err
		}
	}
	if err := p.Validate(); err != nil {
		return nil, nil, WithPrefix(path+".Properties", err)
	}
	rules, err := o.array(w, "Rules")
	if err != nil {
		return nil, nil, err
	}
	c := &CreateSubscription{Topic: topic, Name: name, Properties: p}
	for k, rv := range rules {
		sp, err := w.rule(fmt.Sprintf("%s.Rules[%d]", path, k), rv)
		if err != nil {
			return nil, nil, err
		}
		if ruleIndex(specRules(c.Rules), sp.Name) >= 0 {
			return nil, nil, fmt.Errorf("%s.Rules[%d].Name: %q is declared twice", path, k, sp.Name)
		}
		c.Rules = append(c.Rules, sp)
	}
	if p.ForwardTo == "" && p.ForwardDeadLetteredMessagesTo == "" {
		return c, nil, nil
	}
	c.Properties.ForwardTo, c.Properties.ForwardDeadLetteredMessagesTo = "", ""
	return c, &UpdateSubscription{Topic: topic, Name: name, Properties: p}, nil
}

func specRules(ss []rule.Spec) []Rule {
	out := make([]Rule, len(ss))
	for i, s := range ss {
		out[i].Spec = s
	}
	return out
}

var correlationFields = []string{"ContentType", "CorrelationId", "Label", "MessageId", "ReplyTo",
	"ReplyToSessionId", "SessionId", "To", "Properties"}

func (w *walker) rule(path string, v any) (rule.Spec, error) {
	var sp rule.Spec
	o, err := w.object(path, v, "Name", "Properties")
	if err != nil {
		return sp, err
	}
	name, ok, err := o.str("Name")
	if err != nil {
		return sp, err
	}
	if !ok {
		return sp, fmt.Errorf("%s.Name: required", path)
	}
	sp.Name = name
	if err := ValidateRuleName(name); err != nil {
		return sp, WithPrefix(path, err)
	}
	po, err := o.child(w, "Properties", "FilterType", "CorrelationFilter", "SqlFilter", "Action")
	if err != nil {
		return sp, err
	}
	if po == nil {
		return sp, fmt.Errorf("%s.Properties: required", path)
	}
	ft, ok, err := po.str("FilterType")
	if err != nil {
		return sp, err
	}
	if !ok {
		return sp, fmt.Errorf("%s.FilterType: required (Correlation or Sql)", po.path)
	}
	switch {
	case strings.EqualFold(ft, "Correlation"):
		if po.has("SqlFilter") {
			w.warns = append(w.warns, po.path+".SqlFilter: ignored because FilterType is Correlation")
		}
		co, err := po.child(w, "CorrelationFilter", correlationFields...)
		if err != nil {
			return sp, err
		}
		if co == nil {
			return sp, fmt.Errorf("%s.CorrelationFilter: required when FilterType is Correlation", po.path)
		}
		c := &sp.Filter.Correlation
		sp.Filter.Kind = rule.FilterCorrelation
		if err := firstErr(co.stringv("ContentType", &c.ContentType), co.stringv("CorrelationId", &c.CorrelationID),
			co.stringv("Label", &c.Subject), co.stringv("MessageId", &c.MessageID), co.stringv("ReplyTo", &c.ReplyTo),
			co.stringv("ReplyToSessionId", &c.ReplyToSessionID), co.stringv("SessionId", &c.SessionID),
			co.stringv("To", &c.To)); err != nil {
			return sp, err
		}
		if pv, ok := co.m["Properties"]; ok {
			pm, isObj := pv.(map[string]any)
			if !isObj {
				return sp, fmt.Errorf("%s.Properties: expected an object, got %s", co.path, describe(pv))
			}
			keys := make([]string, 0, len(pm))
			for k := range pm {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				val, err := jsonValue(pm[k])
				if err != nil {
					return sp, fmt.Errorf("%s.Properties.%s: %v", co.path, k, err)
				}
				c.Properties = append(c.Properties, rule.Property{Key: k, Value: val})
			}
		}
	case strings.EqualFold(ft, "Sql"):
		if po.has("CorrelationFilter") {
			w.warns = append(w.warns, po.path+".CorrelationFilter: ignored because FilterType is Sql")
		}
		so, err := po.child(w, "SqlFilter", "SqlExpression")
		if err != nil {
			return sp, err
		}
		if so == nil {
			return sp, fmt.Errorf("%s.SqlFilter: required when FilterType is Sql", po.path)
		}
		sp.Filter.Kind = rule.FilterSQL
		if err := so.stringv("SqlExpression", &sp.Filter.SQL); err != nil {
			return sp, err
		}
	default:
		return sp, fmt.Errorf("%s.FilterType: %q is not one of Correlation, Sql", po.path, ft)
	}
	if ao, err := po.child(w, "Action", "SqlExpression"); err != nil {
		return sp, err
	} else if ao != nil {
		if err := ao.stringv("SqlExpression", &sp.Action.SQL); err != nil {
			return sp, err
		}
	}
	if err := ValidateRule(sp); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			field := map[string]string{
				"Name":                 "Name",
				"Filter":               "Properties.CorrelationFilter",
				"Filter.SqlExpression": "Properties.SqlFilter.SqlExpression",
				"Action.SqlExpression": "Properties.Action.SqlExpression",
			}[ve.Field]
			if field == "" {
				field = "Properties"
			}
			return sp, fmt.Errorf("%s.%s: %s", path, field, ve.Reason)
		}
		return sp, WithPrefix(path, err)
	}
	return sp, nil
}

// jsonValue converts a JSON scalar to a typed property value: strings, booleans,
// integers (long) and other numbers (double).
func jsonValue(v any) (rule.Value, error) {
	switch x := v.(type) {
	case string:
		return rule.Value{Kind: rule.KindString, S: x}, nil
	case bool:
		if x {
			return rule.Value{Kind: rule.KindBool, N: 1}, nil
		}
		return rule.Value{Kind: rule.KindBool}, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return rule.Value{Kind: rule.KindLong, N: uint64(i)}, nil
		}
		f, err := x.Float64()
		if err != nil {
			return rule.Value{}, fmt.Errorf("bad number %s", x)
		}
		return rule.Value{Kind: rule.KindDouble, N: math.Float64bits(f)}, nil
	}
	return rule.Value{}, fmt.Errorf("expected a string, number or boolean, got %s", describe(v))
}
