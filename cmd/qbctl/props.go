package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// propKind is how a property's value is written on the command line and in JSON.
type propKind int

const (
	propDuration propKind = iota // ISO 8601 in the SDK (*string); flags take 30s or PT30S
	propInt32
	propInt64
	propBool
	propString
	propStatus
)

func (k propKind) typeName() string {
	return [...]string{"duration", "int", "int", "true|false", "string", "status"}[k]
}

// propSpec is one entity property as qbctl offers it: the field of the SDK's
// QueueProperties / TopicProperties / SubscriptionProperties it sets (also its JSON key),
// its flag, and the entity kinds that have it. The specs come from cluster/meta's table
// of properties (meta.Properties), which drives every surface that reads them.
type propSpec struct {
	name  string // SDK field name and JSON key
	flag  string
	kind  propKind
	kinds []entityKind
	usage string
}

func (s *propSpec) has(k entityKind) bool { return slices.Contains(s.kinds, k) }

// sdkTypes are the SDK's properties structs, by entity kind.
var sdkTypes = map[entityKind]reflect.Type{
	kindQueue:        reflect.TypeOf(admin.QueueProperties{}),
	kindTopic:        reflect.TypeOf(admin.TopicProperties{}),
	kindSubscription: reflect.TypeOf(admin.SubscriptionProperties{}),
}

var metaKinds = map[entityKind]meta.EntitySet{kindQueue: meta.OnQueue, kindTopic: meta.OnTopic, kindSubscription: meta.OnSubscription}

// propSpecs is in table order, which show prints.
var propSpecs = specsFrom(meta.Properties)

func specsFrom(props []meta.Property) []propSpec {
	var out []propSpec
	for i := range props {
		p := &props[i]
		if p.CLI == 0 {
			continue
		}
		s := propSpec{name: p.SDK(), flag: p.Flag, usage: p.Doc}
		if p.Check != nil && p.Type != meta.TypeDuration {
			s.usage += "; " + p.Check.Doc
		}
		if p.FixedAtCreation {
			s.usage += " (fixed at creation)"
		}
		for _, k := range []entityKind{kindQueue, kindTopic, kindSubscription} {
			if p.CLI.Has(metaKinds[k]) {
				s.kinds = append(s.kinds, k)
			}
		}
		switch p.Type {
		case meta.TypeDuration:
			s.kind = propDuration
		case meta.TypeBool:
			s.kind = propBool
		case meta.TypeString:
			s.kind = propString
		case meta.TypeStatus:
			s.kind = propStatus
		case meta.TypeInt32, meta.TypeInt64:
			// The SDK's width, which may differ from meta's (MaxSizeInMegabytes is int32 there).
			s.kind = propInt32
			if f, ok := sdkTypes[s.kinds[0]].FieldByName(s.name); ok && f.Type == reflect.TypeOf((*int64)(nil)) {
				s.kind = propInt64
			}
		}
		out = append(out, s)
	}
	return out
}

// readOnlyKeys are keys of `show -o json` that --from-file skips: names and counts.
var readOnlyKeys = []string{"Name", "Topic", "ActiveMessageCount", "DeadLetterMessageCount", "ScheduledMessageCount",
	"TotalMessageCount", "SizeInBytes", "SubscriptionCount", "CreatedAt", "UpdatedAt", "AccessedAt"}

var statuses = []string{"Active", "Disabled", "SendDisabled", "ReceiveDisabled"}

// parse reads a value as a flag gives it; the result is a pointer of the SDK field's type.
func (s *propSpec) parse(v string) (reflect.Value, error) {
	switch s.kind {
	case propDuration:
		if strings.HasPrefix(v, "P") {
			return reflect.ValueOf(&v), nil // ISO 8601, as show prints it; the node checks it
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return reflect.Value{}, fmt.Errorf("%q is not a duration such as 30s, 10m, 336h or PT30S", v)
		}
		iso := isoDuration(d)
		return reflect.ValueOf(&iso), nil
	case propInt32:
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return reflect.Value{}, fmt.Errorf("%q is not a whole number", v)
		}
		x := int32(n)
		return reflect.ValueOf(&x), nil
	case propInt64:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return reflect.Value{}, fmt.Errorf("%q is not a whole number", v)
		}
		return reflect.ValueOf(&n), nil
	case propBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return reflect.Value{}, fmt.Errorf("%q is not true or false", v)
		}
		return reflect.ValueOf(&b), nil
	case propStatus:
		i := slices.IndexFunc(statuses, func(x string) bool { return strings.EqualFold(x, v) })
		if i < 0 {
			return reflect.Value{}, fmt.Errorf("%q is not one of %s", v, strings.Join(statuses, ", "))
		}
		st := admin.EntityStatus(statuses[i])
		return reflect.ValueOf(&st), nil
	}
	return reflect.ValueOf(&v), nil
}

// parseJSON reads a value as `show -o json` writes it.
func (s *propSpec) parseJSON(raw json.RawMessage) (reflect.Value, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return reflect.Value{}, err
	}
	switch x := v.(type) {
	case string:
		if s.kind == propBool || s.kind == propInt32 || s.kind == propInt64 {
			return reflect.Value{}, fmt.Errorf("expected a %s, got the string %q", s.kind.typeName(), x)
		}
		return s.parse(x)
	case json.Number:
		if s.kind != propInt32 && s.kind != propInt64 {
			return reflect.Value{}, fmt.Errorf("expected a %s, got the number %s", s.kind.typeName(), x)
		}
		return s.parse(x.String())
	case bool:
		if s.kind != propBool {
			return reflect.Value{}, fmt.Errorf("expected a %s, got %v", s.kind.typeName(), x)
		}
		return reflect.ValueOf(&x), nil
	}
	return reflect.Value{}, fmt.Errorf("expected a %s, got %s", s.kind.typeName(), raw)
}

// props collects the properties a user gave, by flag or --from-file; absent ones stay
// as they are (update) or take the defaults (create).
type props struct {
	flags    map[string]reflect.Value // SDK field name -> pointer value
	file     map[string]reflect.Value
	fromFile string
}

type propFlag struct {
	spec *propSpec
	p    *props
}

func (f propFlag) String() string { return "" }
func (f propFlag) Type() string   { return f.spec.kind.typeName() }
func (f propFlag) Set(v string) error {
	x, err := f.spec.parse(v)
	if err != nil {
		return err
	}
	if f.p.flags == nil {
		f.p.flags = map[string]reflect.Value{}
	}
	f.p.flags[f.spec.name] = x
	return nil
}

// register adds the property flags of kind k, and --from-file, to c.
func (p *props) register(c *cobra.Command, k entityKind) {
	fs := c.Flags()
	for i := range propSpecs {
		s := &propSpecs[i]
		if !s.has(k) {
			continue
		}
		usage := s.name + ": " + s.usage
		if s.kind == propDuration {
			usage += " (30s, 10m, 336h or ISO 8601 PT30S"
			if p := meta.PropertyNamed(s.name); p != nil && p.Check != nil {
				usage += "; " + p.Check.Doc
			}
			usage += ")"
		}
		fs.Var(propFlag{s, p}, s.flag, usage)
		switch s.kind {
		case propBool:
			_ = c.RegisterFlagCompletionFunc(s.flag, cobra.FixedCompletions([]string{"true", "false"}, cobra.ShellCompDirectiveNoFileComp))
		case propStatus:
			_ = c.RegisterFlagCompletionFunc(s.flag, cobra.FixedCompletions(statuses, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	fs.StringVarP(&p.fromFile, "from-file", "f", "", "read properties from a JSON file as 'show -o json' writes it ('-': standard input); flags override it")
	_ = c.MarkFlagFilename("from-file", "json")
}

func fromFileHelp(k entityKind, verb string) string {
	name := "jobs"
	if k == kindSubscription {
		name = "events audit"
	} else if k == kindTopic {
		name = "events"
	}
	return fmt.Sprintf(`--from-file reads the JSON that 'qbctl %[1]s show -o json' prints (the SDK's property
names: LockDuration, MaxDeliveryCount, ...), so an entity can be copied or kept in a file:

  qbctl %[1]s show %[2]s -o json > %[1]s.json
  qbctl %[1]s %[3]s %[2]s --from-file %[1]s.json --user-metadata copied

Names and counts in the file are skipped; without NAME arguments, the file's Name (and
Topic) are used. Flags given as well win over the file.`, k, name, verb)
}

// load reads --from-file, if given, and returns the entity's names: pos, or the file's.
func (p *props) load(k entityKind, pos []string) ([]string, error) {
	if p.fromFile == "" {
		return pos, nil
	}
	var r io.Reader = os.Stdin
	if p.fromFile != "-" {
		f, err := os.Open(p.fromFile)
		if err != nil {
			return nil, withHint(err, "--from-file takes a JSON file written by 'qbctl "+k.String()+" show NAME -o json'")
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, withHint(fmt.Errorf("--from-file %s: not a JSON object: %v", p.fromFile, err),
			"write one with 'qbctl "+k.String()+" show NAME -o json'")
	}
	p.file = map[string]reflect.Value{}
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var accepted []string
	for i := range propSpecs {
		if propSpecs[i].has(k) {
			accepted = append(accepted, propSpecs[i].name)
		}
	}
	var fileNames [2]string // Topic, Name
	for _, key := range keys {
		raw := m[key]
		if string(raw) == "null" {
			continue
		}
		if strings.EqualFold(key, "Name") || strings.EqualFold(key, "Topic") {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("--from-file %s: %s: expected a string", p.fromFile, key)
			}
			fileNames[map[bool]int{true: 0, false: 1}[strings.EqualFold(key, "Topic")]] = s
			continue
		}
		if slices.ContainsFunc(readOnlyKeys, func(x string) bool { return strings.EqualFold(x, key) }) {
			continue
		}
		i := slices.IndexFunc(propSpecs, func(s propSpec) bool { return strings.EqualFold(s.name, key) })
		if i < 0 || !propSpecs[i].has(k) {
			why := "unknown property"
			if i >= 0 {
				why = "not a " + k.String() + " property"
			}
			return nil, withHint(fmt.Errorf("--from-file %s: %s: %s", p.fromFile, key, why),
				k.String()+" properties are "+strings.Join(accepted, ", "))
		}
		v, err := propSpecs[i].parseJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %s: %v", p.fromFile, key, err)
		}
		p.file[propSpecs[i].name] = v
	}
	if len(pos) > 0 {
		return pos, nil
	}
	names := fileNames[1:]
	if k == kindSubscription {
		names = fileNames[:]
	}
	for _, n := range names {
		if n == "" {
			return nil, withHint(fmt.Errorf("%s %s: no name given and %s has none", k, "create", p.fromFile),
				"give "+strings.Join(k.names(), " ")+" after the verb")
		}
	}
	return names, nil
}

// partitionedSizeFactor is how much larger a partitioned entity reports its
// MaxSizeInMegabytes than the size it was created with: its partition count, which the
// admin API does not show, so qbctl takes the nodes' default --partition-count
// (docs/admin-api.md, docs/qbctl.md).
const partitionedSizeFactor = meta.DefaultPartitionCount

// perPartitionSize turns the MaxSizeInMegabytes that show printed for a partitioned
// entity back into the size to create one with, so that a file written by show creates an
// entity that shows the same: on create, a file that says EnablePartitioning true gives
// the whole entity's size. A size given by flag is taken as it is.
func (p *props) perPartitionSize() {
	on, ok := p.file["EnablePartitioning"]
	if f, byFlag := p.flags["EnablePartitioning"]; byFlag {
		on, ok = f, true
	}
	size, sized := p.file["MaxSizeInMegabytes"]
	if !ok || !sized || !*on.Interface().(*bool) {
		return
	}
	if n := *size.Interface().(*int32); n%partitionedSizeFactor == 0 && n >= partitionedSizeFactor {
		n /= partitionedSizeFactor
		p.file["MaxSizeInMegabytes"] = reflect.ValueOf(&n)
	}
}

// apply sets the given properties on dst, a pointer to the SDK's QueueProperties,
// TopicProperties or SubscriptionProperties: the file's first, then the flags'.
func (p *props) apply(dst any) {
	rv := reflect.ValueOf(dst).Elem()
	for _, m := range []map[string]reflect.Value{p.file, p.flags} {
		for name, v := range m {
			if f := rv.FieldByName(name); f.IsValid() {
				f.Set(v)
			}
		}
	}
}

// addProps adds the properties of kind k in src (a pointer to the SDK's properties
// struct) to o, under their SDK names.
func (o *object) addProps(k entityKind, src any) {
	rv := reflect.ValueOf(src).Elem()
	for i := range propSpecs {
		if s := &propSpecs[i]; s.has(k) {
			o.add(s.name, rv.FieldByName(s.name).Interface())
		}
	}
}

// isoDuration renders d as the ISO-8601 duration the admin API carries (P1DT2H3M4.5S).
func isoDuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := "P"
	if days > 0 {
		s += strconv.FormatInt(int64(days), 10) + "D"
	}
	if h == 0 && m == 0 && d == 0 {
		if days == 0 {
			return "PT0S"
		}
		return s
	}
	s += "T"
	if h > 0 {
		s += strconv.FormatInt(int64(h), 10) + "H"
	}
	if m > 0 {
		s += strconv.FormatInt(int64(m), 10) + "M"
	}
	if d > 0 {
		s += strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
	}
	return s
}
