package admin

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// ---- request parsing: a description element overlaid on base properties. Only the
// elements present change a property (create starts from the S-ENT-2 defaults, update
// from the current properties); read-only elements (counts, times) are ignored.

func bad(field, format string, args ...any) error {
	return &meta.ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

type fields struct {
	n   *node
	err error
}

func (f *fields) get(name string) (string, bool) {
	c := f.n.child(name)
	if c == nil || f.err != nil {
		return "", false
	}
	return strings.TrimSpace(c.text), true
}

func (f *fields) dur(name string, dst *time.Duration) {
	if s, ok := f.get(name); ok {
		d, err := meta.ParseISODuration(s)
		if err != nil {
			f.err = bad(name, "%v", err)
			return
		}
		*dst = d
	}
}

func (f *fields) boolean(name string, dst *bool) {
	if s, ok := f.get(name); ok {
		switch strings.ToLower(s) {
		case "true", "1":
			*dst = true
		case "false", "0":
			*dst = false
		default:
			f.err = bad(name, "%q is not true or false", s)
		}
	}
}

func (f *fields) integer(name string, bits int) (int64, bool) {
	s, ok := f.get(name)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		f.err = bad(name, "%q is not an integer", s)
		return 0, false
	}
	return i, true
}

func (f *fields) int32v(name string, dst *int32) {
	if i, ok := f.integer(name, 32); ok {
		*dst = int32(i)
	}
}

func (f *fields) int64v(name string, dst *int64) {
	if i, ok := f.integer(name, 64); ok {
		*dst = i
	}
}

func (f *fields) str(name string, dst *string) {
	if c := f.n.child(name); c != nil && f.err == nil {
		*dst = c.text
	}
}

func (f *fields) status(dst *meta.Status) {
	if f.err != nil {
		return
	}
	if s, ok := f.get("Status"); ok {
		st, err := meta.ParseStatus(s)
		if err != nil {
			f.err = bad("Status", "%v", err)
			return
		}
		*dst = st
	}
}

// partitioning maps EnablePartitioning onto a partition count: true keeps a partitioned
// entity's count or gives a new one `partitioned` partitions; false means one.
func (f *fields) partitioning(dst *int32, partitioned int32) {
	var on bool
	if _, ok := f.get("EnablePartitioning"); !ok {
		return
	}
	f.boolean("EnablePartitioning", &on)
	switch {
	case !on:
		*dst = 1
	case *dst <= 1:
		*dst = partitioned
	}
}

func (f *fields) authRules(dst *[]meta.SASKey) {
	c := f.n.child("AuthorizationRules")
	if c == nil || f.err != nil {
		return
	}
	var keys []meta.SASKey
	for i, r := range c.children {
		rf := &fields{n: r}
		var k meta.SASKey
		rf.str("KeyName", &k.Name)
		rf.str("PrimaryKey", &k.PrimaryKey)
		rf.str("SecondaryKey", &k.SecondaryKey)
		for _, ar := range r.child("Rights").childrenNamed("AccessRights") {
			right, err := meta.ParseRight(ar.text)
			if err != nil {
				f.err = bad(fmt.Sprintf("AuthorizationRules[%d].Rights", i), "%v", err)
				return
			}
			k.Rights |= right
		}
		for _, t := range []struct {
			name string
			dst  *int64
		}{{"CreatedTime", &k.CreatedAt}, {"ModifiedTime", &k.ModifiedAt}} {
			if s, ok := rf.get(t.name); ok && s != "" {
				tm, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					f.err = bad(fmt.Sprintf("AuthorizationRules[%d].%s", i, t.name), "%q is not an RFC 3339 time", s)
					return
				}
				*t.dst = tm.UnixMilli()
			}
		}
		keys = append(keys, k)
	}
	*dst = keys
}

func (n *node) childrenNamed(local string) []*node {
	if n == nil {
		return nil
	}
	var out []*node
	for _, c := range n.children {
		if c.name.Local == local {
			out = append(out, c)
		}
	}
	return out
}

// props reads every property meta.Properties carries in ATOM for the kind of dst (a
// pointer to its properties struct) from the description; base is the properties before
// (create: the defaults; update: the current ones). The first bad element wins.
// MaxSizeInMegabytes and EnablePartitioning have behaviour of their own (partitioned
// sizes, partition counts); every other property is read by its type.
func (f *fields) props(kind meta.EntitySet, dst any, partitioned int32) {
	var oldSize int64
	var oldParts int32
	switch b := dst.(type) {
	case *meta.QueueProperties:
		oldSize, oldParts = b.MaxSizeInMegabytes, b.PartitionCount
	case *meta.TopicProperties:
		oldSize, oldParts = b.MaxSizeInMegabytes, b.PartitionCount
	}
	for i := range meta.Properties {
		p := &meta.Properties[i]
		if !p.ATOM.Has(kind) {
			continue
		}
		switch p.Name {
		case "EnablePartitioning":
			if parts, ok := partitionCount(dst); ok {
				f.partitioning(parts, partitioned)
			}
			continue
		}
		switch ptr := p.Ptr(dst).(type) {
		case *time.Duration:
			f.dur(p.Name, ptr)
		case *int32:
			f.int32v(p.Name, ptr)
		case *int64:
			f.int64v(p.Name, ptr)
			if p.Name == "MaxSizeInMegabytes" {
				*ptr = storedMaxSize(*ptr, oldSize, oldParts)
			}
		case *bool:
			f.boolean(p.Name, ptr)
		case *string:
			f.str(p.Name, ptr)
		case *meta.Status:
			f.status(ptr)
		default:
			panic("admin: ATOM property " + p.Name + " has no field")
		}
	}
}

func partitionCount(props any) (*int32, bool) {
	switch p := props.(type) {
	case *meta.QueueProperties:
		return &p.PartitionCount, true
	case *meta.TopicProperties:
		return &p.PartitionCount, true
	}
	return nil, false
}

func parseQueue(d *node, p meta.QueueProperties, partitioned int32) (meta.QueueProperties, error) {
	f := &fields{n: d}
	f.props(meta.OnQueue, &p, partitioned)
	f.authRules(&p.AuthorizationRules)
	return p, f.err
}

func parseTopic(d *node, p meta.TopicProperties, partitioned int32) (meta.TopicProperties, error) {
	f := &fields{n: d}
	f.props(meta.OnTopic, &p, partitioned)
	f.authRules(&p.AuthorizationRules)
	return p, f.err
}

func parseSubscription(d *node, p meta.SubscriptionProperties) (meta.SubscriptionProperties, error) {
	f := &fields{n: d}
	f.props(meta.OnSubscription, &p, 0)
	return p, f.err
}

// parseRule reads a RuleDescription or DefaultRuleDescription: Filter (xsi:type
// TrueFilter, FalseFilter, SqlFilter, CorrelationFilter; absent = TrueFilter), Action
// (SqlRuleAction, EmptyRuleAction or absent) and Name.
func parseRule(d *node) (rule.Spec, error) {
	var sp rule.Spec
	if n := d.child("Name"); n != nil {
		sp.Name = strings.TrimSpace(n.text)
	}
	if fl := d.child("Filter"); fl != nil {
		switch t := fl.xsiType(); t {
		case "TrueFilter":
			sp.Filter.Kind = rule.FilterTrue
		case "FalseFilter":
			sp.Filter.Kind = rule.FilterFalse
		case "SqlFilter":
			sp.Filter.Kind = rule.FilterSQL
			if e := fl.child("SqlExpression"); e != nil {
				sp.Filter.SQL = e.text
			}
			ps, err := parseParams("Filter.Parameters", fl.child("Parameters"))
			if err != nil {
				return sp, err
			}
			sp.Filter.Parameters = ps
		case "CorrelationFilter":
			sp.Filter.Kind = rule.FilterCorrelation
			c := &sp.Filter.Correlation
			f := &fields{n: fl}
			f.str("CorrelationId", &c.CorrelationID)
			f.str("MessageId", &c.MessageID)
			f.str("To", &c.To)
			f.str("ReplyTo", &c.ReplyTo)
			f.str("Label", &c.Subject)
			f.str("SessionId", &c.SessionID)
			f.str("ReplyToSessionId", &c.ReplyToSessionID)
			f.str("ContentType", &c.ContentType)
			ps, err := parseParams("Filter.Properties", fl.child("Properties"))
			if err != nil {
				return sp, err
			}
			c.Properties = ps
		case "":
			return sp, bad("Filter", "the Filter element has no xsi:type")
		default:
			return sp, bad("Filter", "filter type %q is not supported (TrueFilter, FalseFilter, SqlFilter, CorrelationFilter)", t)
		}
	}
	if ac := d.child("Action"); ac != nil {
		switch t := ac.xsiType(); t {
		case "EmptyRuleAction", "":
		case "SqlRuleAction":
			if e := ac.child("SqlExpression"); e != nil {
				sp.Action.SQL = e.text
			}
			ps, err := parseParams("Action.Parameters", ac.child("Parameters"))
			if err != nil {
				return sp, err
			}
			sp.Action.Parameters = ps
		default:
			return sp, bad("Action", "action type %q is not supported (SqlRuleAction, EmptyRuleAction)", t)
		}
	}
	return sp, nil
}

// parseParams reads <KeyValueOfstringanyType><Key/><Value i:type="xsd:T"/></...> pairs.
func parseParams(field string, n *node) ([]rule.Property, error) {
	if n == nil {
		return nil, nil
	}
	var out []rule.Property
	for _, kv := range n.childrenNamed("KeyValueOfstringanyType") {
		k, v := kv.child("Key"), kv.child("Value")
		if k == nil || v == nil {
			return nil, bad(field, "a KeyValueOfstringanyType needs Key and Value")
		}
		val, err := xsdValue(v.xsiType(), v.text)
		if err != nil {
			return nil, bad(field+"."+k.text, "%v", err)
		}
		out = append(out, rule.Property{Key: k.text, Value: val})
	}
	return out, nil
}

func xsdValue(typ, text string) (rule.Value, error) {
	t := strings.TrimSpace(text)
	switch typ {
	case "string", "":
		return rule.Value{Kind: rule.KindString, S: text}, nil
	case "boolean":
		b, err := strconv.ParseBool(t)
		if err != nil {
			return rule.Value{}, fmt.Errorf("%q is not a boolean", t)
		}
		v := rule.Value{Kind: rule.KindBool}
		if b {
			v.N = 1
		}
		return v, nil
	case "int", "long", "short", "byte":
		i, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return rule.Value{}, fmt.Errorf("%q is not an integer", t)
		}
		if typ != "long" && i >= math.MinInt32 && i <= math.MaxInt32 {
			return rule.Value{Kind: rule.KindInt, N: uint64(i)}, nil
		}
		return rule.Value{Kind: rule.KindLong, N: uint64(i)}, nil
	case "double", "float", "decimal":
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return rule.Value{}, fmt.Errorf("%q is not a number", t)
		}
		return rule.Value{Kind: rule.KindDouble, N: math.Float64bits(f)}, nil
	case "dateTime":
		tm, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return rule.Value{}, fmt.Errorf("%q is not an RFC 3339 time", t)
		}
		return rule.Value{Kind: rule.KindTimestamp, N: uint64(tm.UnixMilli())}, nil
	}
	return rule.Value{}, fmt.Errorf("value type %q is not supported (string, boolean, int, long, double, dateTime)", typ)
}

// ---- response writing

// atomTime formats a Unix-ms time as the admin client expects: RFC 3339, or the .NET
// zero value "0001-01-01T00:00:00" (never empty, protocol.md §10).
func atomTime(ms int64) string {
	if ms <= 0 {
		return "0001-01-01T00:00:00"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// accessedAt is an entity's last access as Service Bus reports it: the Store's
// AccessedAt (the last send or receiver activity its partitions recorded) when it has
// one. Without one, a queue or topic that holds messages reports its last change (the
// replica that answered has not applied the send yet), one that holds none the zero
// time, as a new entity on Service Bus does; a subscription always reports a time, as
// on Service Bus (the SDK's live tests check all three; docs/compatibility.md).
func accessedAt(c RuntimeCounts, updatedMs int64, subscription bool) string {
	switch {
	case !c.AccessedAt.IsZero():
		return timeOf(c.AccessedAt)
	case subscription || total(c) > 0 || c.SizeBytes > 0:
		return atomTime(updatedMs)
	}
	return timeOf(time.Time{})
}

// reportedMaxSize is how Service Bus reports MaxSizeInMegabytes of a partitioned
// entity: the size given at creation holds for each partition, and the entity reports
// the partition count times that, which is what it accepts in all (Standard: 16
// partitions, so 16 times).
func reportedMaxSize(mb int64, partitions int32) int64 {
	if partitions > 1 {
		return mb * int64(partitions)
	}
	return mb
}

// storedMaxSize undoes reportedMaxSize for an update that sends back what a GET
// returned (the SDKs' Update* send every property).
func storedMaxSize(given, stored int64, partitions int32) int64 {
	if partitions > 1 && given == stored*int64(partitions) {
		return stored
	}
	return given
}

func timeOf(t time.Time) string {
	if t.IsZero() {
		return "0001-01-01T00:00:00"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func b2s(b bool) string { return strconv.FormatBool(b) }

func i2s[T ~int32 | ~int64](i T) string { return strconv.FormatInt(int64(i), 10) }

func (w *xmlWriter) counts(c RuntimeCounts) {
	w.raw(`<CountDetails xmlns:d2p1="` + nsSBCounts + `">`)
	w.el("d2p1:ActiveMessageCount", i2s(clamp32(c.Active)))
	w.el("d2p1:DeadLetterMessageCount", i2s(clamp32(c.DeadLetter)))
	w.el("d2p1:ScheduledMessageCount", i2s(clamp32(c.Scheduled)))
	w.el("d2p1:TransferMessageCount", i2s(clamp32(c.Transfer)))
	w.el("d2p1:TransferDeadLetterMessageCount", i2s(clamp32(c.TransferDeadLetter)))
	w.raw(`</CountDetails>`)
}

// clamp32 keeps a count inside the int32 the admin client reads it into.
func clamp32(n int64) int32 {
	return int32(max(math.MinInt32, min(n, math.MaxInt32)))
}

func total(c RuntimeCounts) int64 {
	if c.Total != 0 {
		return c.Total
	}
	return c.Active + c.DeadLetter + c.Scheduled + c.Transfer + c.TransferDeadLetter
}

func (w *xmlWriter) authRules(keys []meta.SASKey) {
	w.raw(`<AuthorizationRules>`)
	for _, k := range keys {
		w.raw(`<AuthorizationRule i:type="SharedAccessAuthorizationRule">`)
		w.el("ClaimType", "SharedAccessKey")
		w.el("ClaimValue", "None")
		w.raw(`<Rights>`)
		for _, r := range k.Rights.Names() {
			w.el("AccessRights", r)
		}
		w.raw(`</Rights>`)
		w.el("KeyName", k.Name)
		if k.CreatedAt > 0 {
			w.el("CreatedTime", atomTime(k.CreatedAt))
		}
		if k.ModifiedAt > 0 {
			w.el("ModifiedTime", atomTime(k.ModifiedAt))
		}
		w.el("PrimaryKey", k.PrimaryKey)
		if k.SecondaryKey != "" {
			w.el("SecondaryKey", k.SecondaryKey)
		}
		w.raw(`</AuthorizationRule>`)
	}
	w.raw(`</AuthorizationRules>`)
}

func (w *xmlWriter) optional(name, v string) {
	if v != "" {
		w.el(name, v)
	}
}

const descAttrs = ` xmlns="` + nsSB + `" xmlns:i="` + nsXSI + `"`

// The element order of each description, as Service Bus writes it: property names of
// meta.Properties, and the elements that are not properties (counts, times, rules), which
// the writer's caller supplies. A property of the kind missing here is written after
// them, so a new property needs no change here.
var (
	queueLayout = []string{"LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
		"DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
		"MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
		"AuthorizationRules", "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "SupportOrdering",
		"CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
		"ForwardDeadLetteredMessagesTo", "EnableExpress", "UserMetadata", "MaxMessageSizeInKilobytes"}
	topicLayout = []string{"DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
		"DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
		"FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "UserMetadata",
		"CreatedAt", "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount",
		"SqlFilterCount", "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning",
		"EntityAvailabilityStatus", "EnableSubscriptionPartitioning", "EnableExpress", "MaxMessageSizeInKilobytes"}
	subscriptionLayout = []string{"LockDuration", "RequiresSession", "DefaultMessageTimeToLive",
		"DeadLetteringOnMessageExpiration", "DeadLetteringOnFilterEvaluationExceptions", "MessageCount",
		"MaxDeliveryCount", "EnableBatchedOperations", "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt",
		"CountDetails", "UserMetadata", "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EntityAvailabilityStatus"}
)

// description writes the elements of layout: each property of props (a pointer to its
// properties struct) by its type, each other element by extra.
func (w *xmlWriter) description(kind meta.EntitySet, layout []string, props any, extra map[string]func()) {
	write := func(p *meta.Property) {
		var v string
		switch p.Name {
		case "EnablePartitioning":
			parts, _ := partitionCount(props)
			v = b2s(*parts > 1)
		default:
			switch x := p.Ptr(props).(type) {
			case *time.Duration:
				v = meta.FormatISODuration(*x)
			case *int32:
				v = i2s(*x)
			case *int64:
				v = i2s(*x)
				if parts, ok := partitionCount(props); ok && p.Name == "MaxSizeInMegabytes" {
					v = i2s(reportedMaxSize(*x, *parts))
				}
			case *bool:
				v = b2s(*x)
			case *string:
				v = *x
			case *meta.Status:
				v = x.String()
			default:
				panic("admin: ATOM property " + p.Name + " has no field")
			}
		}
		if p.OmitEmpty {
			w.optional(p.Name, v)
		} else {
			w.el(p.Name, v)
		}
	}
	for _, name := range layout {
		if fn, ok := extra[name]; ok {
			fn()
		} else if p := meta.PropertyNamed(name); p != nil && p.ATOM.Has(kind) {
			write(p)
		} else {
			panic("admin: nothing writes the element " + name)
		}
	}
	for i := range meta.Properties {
		if p := &meta.Properties[i]; p.ATOM.Has(kind) && !slices.Contains(layout, p.Name) {
			write(p)
		}
	}
}

func writeQueue(w *xmlWriter, q meta.Queue, c RuntimeCounts) {
	p := q.Properties
	w.raw(`<QueueDescription` + descAttrs + `>`)
	w.description(meta.OnQueue, queueLayout, &p, map[string]func(){
		"SizeInBytes":              func() { w.el("SizeInBytes", i2s(c.SizeBytes)) },
		"MessageCount":             func() { w.el("MessageCount", i2s(total(c))) },
		"IsAnonymousAccessible":    func() { w.el("IsAnonymousAccessible", "false") },
		"AuthorizationRules":       func() { w.authRules(p.AuthorizationRules) },
		"CreatedAt":                func() { w.el("CreatedAt", atomTime(q.CreatedAt)) },
		"UpdatedAt":                func() { w.el("UpdatedAt", atomTime(q.UpdatedAt)) },
		"AccessedAt":               func() { w.el("AccessedAt", accessedAt(c, q.UpdatedAt, false)) },
		"CountDetails":             func() { w.counts(c) },
		"EntityAvailabilityStatus": func() { w.el("EntityAvailabilityStatus", "Available") },
	})
	w.raw(`</QueueDescription>`)
}

// filterCounts counts a topic's rules by filter kind as Service Bus does: true, false
// and SQL filters are SQL filters.
func filterCounts(subs []meta.Subscription) (sql, corr int64) {
	for _, s := range subs {
		for _, r := range s.Rules {
			if r.Spec.Filter.Kind == rule.FilterCorrelation {
				corr++
			} else {
				sql++
			}
		}
	}
	return sql, corr
}

func writeTopic(w *xmlWriter, t meta.Topic, subs []meta.Subscription, c RuntimeCounts) {
	p := t.Properties
	sqlN, corrN := filterCounts(subs)
	w.raw(`<TopicDescription` + descAttrs + `>`)
	w.description(meta.OnTopic, topicLayout, &p, map[string]func(){
		"SizeInBytes":              func() { w.el("SizeInBytes", i2s(c.SizeBytes)) },
		"IsAnonymousAccessible":    func() { w.el("IsAnonymousAccessible", "false") },
		"AuthorizationRules":       func() { w.authRules(p.AuthorizationRules) },
		"CreatedAt":                func() { w.el("CreatedAt", atomTime(t.CreatedAt)) },
		"UpdatedAt":                func() { w.el("UpdatedAt", atomTime(t.UpdatedAt)) },
		"AccessedAt":               func() { w.el("AccessedAt", accessedAt(c, t.UpdatedAt, false)) },
		"CountDetails":             func() { w.counts(c) },
		"SubscriptionCount":        func() { w.el("SubscriptionCount", i2s(int64(len(subs)))) },
		"SqlFilterCount":           func() { w.el("SqlFilterCount", i2s(sqlN)) },
		"CorrelationFilterCount":   func() { w.el("CorrelationFilterCount", i2s(corrN)) },
		"EntityAvailabilityStatus": func() { w.el("EntityAvailabilityStatus", "Available") },
	})
	w.raw(`</TopicDescription>`)
}

func writeSubscription(w *xmlWriter, s meta.Subscription, c RuntimeCounts) {
	p := s.Properties
	w.raw(`<SubscriptionDescription` + descAttrs + `>`)
	w.description(meta.OnSubscription, subscriptionLayout, &p, map[string]func(){
		"MessageCount":             func() { w.el("MessageCount", i2s(total(c))) },
		"CreatedAt":                func() { w.el("CreatedAt", atomTime(s.CreatedAt)) },
		"UpdatedAt":                func() { w.el("UpdatedAt", atomTime(s.UpdatedAt)) },
		"AccessedAt":               func() { w.el("AccessedAt", accessedAt(c, s.UpdatedAt, true)) },
		"CountDetails":             func() { w.counts(c) },
		"EntityAvailabilityStatus": func() { w.el("EntityAvailabilityStatus", "Available") },
	})
	w.raw(`</SubscriptionDescription>`)
}

// writeRule always writes Filter with an xsi:type and Action (EmptyRuleAction when the
// rule has none): the admin client dereferences both (protocol.md §10).
func writeRule(w *xmlWriter, r meta.Rule) {
	sp := r.Spec
	w.raw(`<RuleDescription` + descAttrs + `>`)
	switch sp.Filter.Kind {
	case rule.FilterTrue:
		w.raw(`<Filter i:type="TrueFilter">`)
		w.el("SqlExpression", "1=1")
		w.el("CompatibilityLevel", "20")
		w.raw(`</Filter>`)
	case rule.FilterFalse:
		w.raw(`<Filter i:type="FalseFilter">`)
		w.el("SqlExpression", "1=0")
		w.el("CompatibilityLevel", "20")
		w.raw(`</Filter>`)
	case rule.FilterSQL:
		w.raw(`<Filter i:type="SqlFilter">`)
		w.el("SqlExpression", sp.Filter.SQL)
		w.el("CompatibilityLevel", "20")
		w.params("Parameters", sp.Filter.Parameters)
		w.raw(`</Filter>`)
	case rule.FilterCorrelation:
		c := sp.Filter.Correlation
		w.raw(`<Filter i:type="CorrelationFilter">`)
		w.optional("CorrelationId", c.CorrelationID)
		w.optional("MessageId", c.MessageID)
		w.optional("To", c.To)
		w.optional("ReplyTo", c.ReplyTo)
		w.optional("Label", c.Subject)
		w.optional("SessionId", c.SessionID)
		w.optional("ReplyToSessionId", c.ReplyToSessionID)
		w.optional("ContentType", c.ContentType)
		w.params("Properties", c.Properties)
		w.raw(`</Filter>`)
	}
	if sp.Action.SQL == "" {
		w.raw(`<Action i:type="EmptyRuleAction"/>`)
	} else {
		w.raw(`<Action i:type="SqlRuleAction">`)
		w.el("SqlExpression", sp.Action.SQL)
		w.el("CompatibilityLevel", "20")
		w.params("Parameters", sp.Action.Parameters)
		w.raw(`</Action>`)
	}
	w.el("CreatedAt", atomTime(r.CreatedAt))
	w.el("Name", sp.Name)
	w.raw(`</RuleDescription>`)
}

// params writes typed values with the xsd type names the admin client understands
// (string, boolean, int, double, dateTime); other kinds are written as strings.
func (w *xmlWriter) params(name string, ps []rule.Property) {
	if len(ps) == 0 {
		return
	}
	w.raw("<" + name + ">")
	for _, p := range ps {
		typ, text := "string", p.Value.S
		v := p.Value
		switch v.Kind {
		case rule.KindBool:
			typ, text = "boolean", b2s(v.N != 0)
		case rule.KindByte, rule.KindShort, rule.KindInt, rule.KindLong:
			typ, text = "int", strconv.FormatInt(int64(v.N), 10)
		case rule.KindUbyte, rule.KindUshort, rule.KindUint, rule.KindUlong:
			typ, text = "int", strconv.FormatUint(v.N, 10)
		case rule.KindFloat, rule.KindDouble:
			typ, text = "double", strconv.FormatFloat(math.Float64frombits(v.N), 'g', -1, 64)
		case rule.KindTimestamp:
			typ, text = "dateTime", time.UnixMilli(int64(v.N)).UTC().Format(time.RFC3339Nano)
		case rule.KindUUID:
			if len(v.S) == 16 {
				b := []byte(v.S)
				text = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
			}
		}
		w.raw(`<KeyValueOfstringanyType><Key>`)
		w.text(p.Key)
		w.raw(`</Key><Value i:type="d6p1:` + typ + `" xmlns:d6p1="` + nsXSD + `">`)
		w.text(text)
		w.raw(`</Value></KeyValueOfstringanyType>`)
	}
	w.raw("</" + name + ">")
}
