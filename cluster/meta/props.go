package meta

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// EntitySet is a set of entity kinds: which kinds have a property, or read it on one
// surface.
type EntitySet uint8

// Entity kinds in an EntitySet.
const (
	OnQueue EntitySet = 1 << iota
	OnTopic
	OnSubscription

	OnAll = OnQueue | OnTopic | OnSubscription
)

// Has reports whether s includes every kind in k.
func (s EntitySet) Has(k EntitySet) bool { return s&k == k && k != 0 }

// PropType is the Go type of a property's field in QueueProperties, TopicProperties and
// SubscriptionProperties, and so how each surface spells its value.
type PropType uint8

// Property types.
const (
	TypeDuration PropType = iota // time.Duration; ISO 8601 in ATOM and Config.json
	TypeInt32                    // int32
	TypeInt64                    // int64
	TypeBool                     // bool
	TypeString                   // string
	TypeStatus                   // Status; its name (Active, ...) on every surface
)

// Property is one entity property: its name on every surface, its type, default and
// bounds, which entity kinds have it and which surfaces read it. Properties is the one
// table of them: the Config.json loader, validation, the defaults, the admin API's ATOM
// reader and writer (cluster/admin) and qbctl's flags and JSON iterate it, and a test
// checks docs/admin-api.md and docs/config-json.md against it. A new property is a row
// here, a field in the properties structs, and whatever it does.
type Property struct {
	// Name is the ATOM element, the Config.json key (matched case-insensitively) and the
	// field of QueueProperties, TopicProperties and SubscriptionProperties.
	Name string
	// SDKName is the field of the Go SDK's admin QueueProperties etc. (the key of qbctl's
	// JSON) where it differs from Name.
	SDKName string
	Type    PropType
	// Entities are the kinds whose properties struct has the field (or, for a Virtual
	// property, whose stored properties it is computed from).
	Entities EntitySet
	// Surfaces: the kinds for which the admin API reads and writes the property, the
	// Config.json loader accepts it, and qbctl has a flag and a JSON key for it.
	ATOM, ConfigJSON, CLI EntitySet
	// Default is the value of a new entity that does not set it (nil: the zero value), for
	// the kinds in DefaultFor (0: every kind in Entities).
	Default    any
	DefaultFor EntitySet
	// Check bounds the value; Validate applies it. Nil: any value of the type.
	Check *Check
	// Virtual properties have no field of their own: EnablePartitioning is
	// PartitionCount > 1. The surfaces that carry them handle them in code.
	Virtual bool
	// FixedAtCreation: an update may not change it (State.Apply refuses, checkFixed).
	FixedAtCreation bool
	// OmitEmpty: the ATOM writer leaves the element out when the value is empty.
	OmitEmpty bool
	// Flag is qbctl's flag for it ("lock-duration").
	Flag string
	// Doc says what it does, in a few words, for qbctl's help and the docs.
	Doc string
}

// SDK returns the name of the property in the Go SDK's admin types.
func (p *Property) SDK() string {
	if p.SDKName != "" {
		return p.SDKName
	}
	return p.Name
}

// Properties is the table of every entity property, in the order Validate checks them.
var Properties = []Property{
	{Name: "LockDuration", Type: TypeDuration, Entities: OnQueue | OnSubscription,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Default: DefaultLockDuration, Check: durationBetween(MinLockDuration, MaxLockDuration),
		Flag: "lock-duration", Doc: "how long a receiver holds a message's lock"},
	{Name: "MaxSizeInMegabytes", Type: TypeInt64, Entities: OnQueue | OnTopic,
		ATOM: OnQueue | OnTopic, ConfigJSON: OnQueue | OnTopic, CLI: OnQueue | OnTopic,
		Default: int64(DefaultMaxSizeInMegabytes), Check: intSpan(1, MaxMaxSizeInMegabytes),
		Flag: "max-size-mb", Doc: "capacity in megabytes (of each partition)"},
	{Name: "MaxMessageSizeInKilobytes", Type: TypeInt64, Entities: OnQueue | OnTopic,
		ATOM: OnQueue | OnTopic, ConfigJSON: OnQueue | OnTopic, CLI: OnQueue | OnTopic,
		Default: int64(DefaultMaxMessageSizeKB), Check: intBetween(1, MaxMaxMessageSizeKB),
		Flag: "max-message-size-kb", Doc: "largest message in kilobytes"},
	{Name: "DefaultMessageTimeToLive", Type: TypeDuration, Entities: OnAll,
		ATOM: OnAll, ConfigJSON: OnAll, CLI: OnAll,
		Default: Never, Check: positiveDuration(),
		Flag: "default-ttl", Doc: "time to live of messages that set none"},
	{Name: "DuplicateDetectionHistoryTimeWindow", Type: TypeDuration, Entities: OnQueue | OnTopic,
		ATOM: OnQueue | OnTopic, ConfigJSON: OnQueue | OnTopic, CLI: OnQueue | OnTopic,
		Default: DefaultDuplicateWindow, Check: durationBetween(MinDuplicateWindow, MaxDuplicateWindow),
		Flag: "duplicate-window", Doc: "how long MessageIds are remembered"},
	{Name: "MaxDeliveryCount", Type: TypeInt32, Entities: OnQueue | OnSubscription,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Default: int32(DefaultMaxDeliveryCount), Check: intBetween(1, 0),
		Flag: "max-delivery-count", Doc: "deliveries before a message is dead-lettered"},
	{Name: "Status", Type: TypeStatus, Entities: OnAll,
		ATOM: OnAll, ConfigJSON: OnAll, CLI: OnAll,
		Check: &Check{Doc: "Active, Disabled, SendDisabled, ReceiveDisabled", fn: checkStatusValue},
		Flag:  "status", Doc: "whether the entity takes sends and receives"},
	{Name: "AutoDeleteOnIdle", Type: TypeDuration, Entities: OnAll,
		ATOM: OnAll, ConfigJSON: OnAll, CLI: OnAll,
		Default: Never, Check: durationBetween(MinAutoDeleteOnIdle, 0),
		Flag: "auto-delete-on-idle", Doc: "delete the entity after this long unused"},
	{Name: "RequiresSession", Type: TypeBool, Entities: OnQueue | OnSubscription, FixedAtCreation: true,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Flag: "requires-session", Doc: "receivers take sessions"},
	{Name: "RequiresDuplicateDetection", Type: TypeBool, Entities: OnQueue | OnTopic, FixedAtCreation: true,
		ATOM: OnQueue | OnTopic, ConfigJSON: OnQueue | OnTopic, CLI: OnQueue | OnTopic,
		Flag: "requires-duplicate-detection", Doc: "drop messages whose MessageId was seen in the window"},
	{Name: "PartitionCount", Type: TypeInt32, Entities: OnQueue | OnTopic,
		ConfigJSON: OnQueue | OnTopic,
		Default:    int32(1), Check: intSpan(1, MaxPartitionCount), FixedAtCreation: true,
		Doc: "number of partitions (1: not partitioned)"},
	{Name: "EnablePartitioning", Type: TypeBool, Entities: OnQueue | OnTopic, Virtual: true,
		ATOM: OnQueue | OnTopic, CLI: OnQueue | OnTopic, FixedAtCreation: true,
		Flag: "partitioned", Doc: "spread over several partitions"},
	{Name: "ForwardTo", Type: TypeString, Entities: OnQueue | OnSubscription, OmitEmpty: true,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Check: forwardTarget(), Flag: "forward-to", Doc: "forward every message to this queue or topic"},
	{Name: "ForwardDeadLetteredMessagesTo", Type: TypeString, Entities: OnQueue | OnSubscription, OmitEmpty: true,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Check: forwardTarget(), Flag: "forward-dlq-to", Doc: "forward dead-lettered messages to this queue or topic"},
	{Name: "UserMetadata", Type: TypeString, Entities: OnAll, OmitEmpty: true,
		ATOM: OnAll, ConfigJSON: OnAll, CLI: OnAll,
		Check: maxLength(MaxUserMetadataLength), Flag: "user-metadata", Doc: "free text"},
	{Name: "DeadLetteringOnMessageExpiration", Type: TypeBool, Entities: OnQueue | OnSubscription,
		ATOM: OnQueue | OnSubscription, ConfigJSON: OnQueue | OnSubscription, CLI: OnQueue | OnSubscription,
		Flag: "dead-letter-on-expiration", Doc: "dead-letter expired messages instead of dropping them"},
	{Name: "DeadLetteringOnFilterEvaluationExceptions", SDKName: "EnableDeadLetteringOnFilterEvaluationExceptions",
		Type: TypeBool, Entities: OnSubscription, ATOM: OnSubscription, ConfigJSON: OnSubscription, CLI: OnSubscription,
		Flag: "dead-letter-on-filter-errors", Doc: "dead-letter messages whose rule evaluation fails"},
	{Name: "EnableBatchedOperations", Type: TypeBool, Entities: OnAll,
		ATOM: OnAll, ConfigJSON: OnAll, CLI: OnAll, Default: true,
		Flag: "enable-batched-operations", Doc: "server-side batching (stored, no effect)"},
	{Name: "SupportOrdering", Type: TypeBool, Entities: OnQueue | OnTopic,
		ATOM: OnQueue | OnTopic, ConfigJSON: OnTopic, CLI: OnTopic, Default: true, DefaultFor: OnTopic,
		Flag: "support-ordering", Doc: "keep the send order (stored, no effect)"},
	{Name: "EnableExpress", Type: TypeBool, Entities: OnQueue | OnTopic, ATOM: OnQueue | OnTopic,
		Doc: "express entities (stored, no effect)"},
	{Name: "FilteringMessagesBeforePublishing", Type: TypeBool, Entities: OnTopic, ATOM: OnTopic,
		Doc: "stored, no effect"},
	{Name: "EnableSubscriptionPartitioning", Type: TypeBool, Entities: OnTopic, ATOM: OnTopic,
		Doc: "stored, no effect"},
}

// PropertyNamed returns the property called name (case-insensitively), or nil.
func PropertyNamed(name string) *Property {
	i := slices.IndexFunc(Properties, func(p Property) bool { return strings.EqualFold(p.Name, name) })
	if i < 0 {
		return nil
	}
	return &Properties[i]
}

// Ptr returns a pointer to the property's field in props, a *QueueProperties,
// *TopicProperties or *SubscriptionProperties: a *time.Duration, *int32, *int64, *bool,
// *string or *Status as Type says. It returns nil for a Virtual property and for one the
// struct does not have.
func (p *Property) Ptr(props any) any {
	if p.Virtual {
		return nil
	}
	v := reflect.ValueOf(props)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName(p.Name)
	if !f.IsValid() {
		return nil
	}
	return f.Addr().Interface()
}

// kindOf returns the entity kind whose properties struct props points to.
func kindOf(props any) EntitySet {
	switch props.(type) {
	case *QueueProperties:
		return OnQueue
	case *TopicProperties:
		return OnTopic
	case *SubscriptionProperties:
		return OnSubscription
	}
	return 0
}

// setDefaults sets every property of props (a pointer to a properties struct) that has
// a default for its kind.
func setDefaults(props any) {
	k := kindOf(props)
	for i := range Properties {
		p := &Properties[i]
		for_ := p.DefaultFor
		if for_ == 0 {
			for_ = p.Entities
		}
		if p.Default == nil || !for_.Has(k) {
			continue
		}
		if ptr := p.Ptr(props); ptr != nil {
			reflect.ValueOf(ptr).Elem().Set(reflect.ValueOf(p.Default))
		}
	}
}

// validateProps checks every bounded property of props in table order and returns the
// first violation.
func validateProps(props any) error {
	k := kindOf(props)
	for i := range Properties {
		p := &Properties[i]
		if p.Check == nil || !p.Entities.Has(k) {
			continue
		}
		if ptr := p.Ptr(props); ptr != nil {
			if err := p.Check.Validate(p.Name, reflect.ValueOf(ptr).Elem().Interface()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Check is a property's bound: what Validate enforces and how the docs state it.
type Check struct {
	Doc string // "PT5S .. PT5M", "≥ 1", ...
	fn  func(field string, v any) error
}

// Validate reports whether v breaks the bound, as a ValidationError of field.
func (c *Check) Validate(field string, v any) error { return c.fn(field, v) }

func durationBetween(min, max time.Duration) *Check {
	doc := "≥ " + FormatISODuration(min)
	if max > 0 {
		doc = FormatISODuration(min) + " .. " + FormatISODuration(max)
	}
	return &Check{Doc: doc, fn: func(field string, v any) error { return checkDuration(field, v.(time.Duration), min, max) }}
}

func positiveDuration() *Check {
	return &Check{Doc: "> 0", fn: func(field string, v any) error { return checkPositiveDuration(field, v.(time.Duration)) }}
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	}
	panic(fmt.Sprintf("meta: %T is not an integer property", v))
}

// intSpan: an error names the whole span ("0 is outside 1..32").
func intSpan(min, max int64) *Check {
	return &Check{Doc: fmt.Sprintf("%d .. %d", min, max), fn: func(field string, v any) error {
		if n := toInt64(v); n < min || n > max {
			return invalid(field, "%d is outside %d..%d", n, min, max)
		}
		return nil
	}}
}

// intBetween: an error names the bound crossed; max 0 means none.
func intBetween(min, max int64) *Check {
	doc := fmt.Sprintf("≥ %d", min)
	if max > 0 {
		doc = fmt.Sprintf("%d .. %d", min, max)
	}
	return &Check{Doc: doc, fn: func(field string, v any) error {
		n := toInt64(v)
		if n < min {
			return invalid(field, "%d is below the minimum %d", n, min)
		}
		if max > 0 && n > max {
			return invalid(field, "%d is above the maximum %d", n, max)
		}
		return nil
	}}
}

func maxLength(n int) *Check {
	return &Check{Doc: fmt.Sprintf("≤ %d characters", n), fn: func(field string, v any) error {
		if len(v.(string)) > n {
			return invalid(field, "is longer than %d characters", n)
		}
		return nil
	}}
}

func forwardTarget() *Check {
	return &Check{Doc: "a queue or topic name, or sb://host/name", fn: func(field string, v any) error {
		return checkForward(field, v.(string))
	}}
}

func checkStatusValue(field string, v any) error {
	if s := v.(Status); s >= statusCount {
		return invalid(field, "%d is not a valid status", uint8(s))
	}
	return nil
}

// checkFixed refuses an update from old to new (pointers to the same properties struct)
// that changes a property fixed at creation.
func checkFixed(old, new any) error {
	for i := range Properties {
		p := &Properties[i]
		if !p.FixedAtCreation {
			continue
		}
		o, n := p.Ptr(old), p.Ptr(new)
		if o == nil || n == nil {
			continue
		}
		ov, nv := reflect.ValueOf(o).Elem().Interface(), reflect.ValueOf(n).Elem().Interface()
		if ov != nv {
			return invalid(p.Name, "cannot be changed after creation (is %v, requested %v)", ov, nv)
		}
	}
	return nil
}
