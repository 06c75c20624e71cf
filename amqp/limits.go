package amqp

import (
	"fmt"
)

// ---- limits on what a client may send ----

// checkMessageLimits refuses a client's message whose application-properties
// section breaks Service Bus's limits or the SDKs' ability to decode it: a
// message the SDK cannot decode would poison its queue (receivers never see it,
// the messages behind it are dead-lettered). The limits come from Config:
// the encoded section's size (Service Bus allows 64 KB of properties), the
// number of entries and the nesting of list and map values.
func checkMessageLimits(cfg *Config, m *Message, s sections) error {
	if n := len(s.appProps); n > cfg.MaxAppPropertiesSize {
		return fmt.Errorf("%w: the application properties of the message take %d bytes, more than the %d bytes allowed",
			ErrMessageTooLarge, n, cfg.MaxAppPropertiesSize)
	}
	if n := len(m.ApplicationProperties); n > cfg.MaxAppProperties {
		return fmt.Errorf("%w: the message has %d application properties, more than the %d allowed",
			errInvalidField, n, cfg.MaxAppProperties)
	}
	for _, p := range m.ApplicationProperties {
		if d := valueDepth(p.Value, 0, cfg.MaxAppPropertyDepth); d > cfg.MaxAppPropertyDepth {
			return fmt.Errorf("%w: the application property '%s' nests lists or maps deeper than %d levels",
				errInvalidField, p.Key, cfg.MaxAppPropertyDepth)
		}
	}
	return nil
}

// valueDepth returns how deeply v nests lists, maps, arrays and described
// values (0 for a primitive), stopping once it passes limit.
func valueDepth(v any, depth, limit int) int {
	if depth > limit {
		return depth
	}
	deepest := depth
	walk := func(x any) {
		if d := valueDepth(x, depth+1, limit); d > deepest {
			deepest = d
		}
	}
	switch x := v.(type) {
	case List:
		deepest = max(deepest, depth+1)
		for _, it := range x {
			walk(it)
		}
	case Map:
		deepest = max(deepest, depth+1)
		for _, e := range x {
			walk(e.Key)
			walk(e.Value)
		}
	case *Array:
		deepest = max(deepest, depth+1)
		for _, it := range x.Items {
			walk(it)
		}
	case *Described:
		deepest = max(deepest, depth+1)
		walk(x.Value)
	}
	return deepest
}
