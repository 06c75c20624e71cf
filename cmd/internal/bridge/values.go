package bridge

import (
	"math"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// toValue converts an AMQP application-property value to a rule value. Compound
// values (list, map, array, described), which Service Bus does not allow in
// application properties, become null for filters; the message's own bytes keep them.
func toValue(v any) rule.Value {
	switch x := v.(type) {
	case nil:
		return rule.Value{Kind: rule.KindNull}
	case bool:
		if x {
			return rule.Value{Kind: rule.KindBool, N: 1}
		}
		return rule.Value{Kind: rule.KindBool}
	case uint8:
		return rule.Value{Kind: rule.KindUbyte, N: uint64(x)}
	case uint16:
		return rule.Value{Kind: rule.KindUshort, N: uint64(x)}
	case uint32:
		return rule.Value{Kind: rule.KindUint, N: uint64(x)}
	case uint64:
		return rule.Value{Kind: rule.KindUlong, N: x}
	case int8:
		return rule.Value{Kind: rule.KindByte, N: uint64(int64(x))}
	case int16:
		return rule.Value{Kind: rule.KindShort, N: uint64(int64(x))}
	case int32:
		return rule.Value{Kind: rule.KindInt, N: uint64(int64(x))}
	case int64:
		return rule.Value{Kind: rule.KindLong, N: uint64(x)}
	case int:
		return rule.Value{Kind: rule.KindLong, N: uint64(int64(x))}
	case float32:
		return rule.Value{Kind: rule.KindFloat, N: math.Float64bits(float64(x))}
	case float64:
		return rule.Value{Kind: rule.KindDouble, N: math.Float64bits(x)}
	case amqp.Char:
		return rule.Value{Kind: rule.KindChar, N: uint64(x)}
	case amqp.Timestamp:
		return rule.Value{Kind: rule.KindTimestamp, N: uint64(int64(x))}
	case time.Time:
		return rule.Value{Kind: rule.KindTimestamp, N: uint64(x.UnixMilli())}
	case amqp.UUID:
		return rule.Value{Kind: rule.KindUUID, S: string(x[:])}
	case []byte:
		return rule.Value{Kind: rule.KindBinary, S: string(x)}
	case string:
		return rule.Value{Kind: rule.KindString, S: x}
	case amqp.Symbol:
		return rule.Value{Kind: rule.KindSymbol, S: string(x)}
	case amqp.Decimal32:
		return rule.Value{Kind: rule.KindDecimal32, S: string(x[:])}
	case amqp.Decimal64:
		return rule.Value{Kind: rule.KindDecimal64, S: string(x[:])}
	case amqp.Decimal128:
		return rule.Value{Kind: rule.KindDecimal128, S: string(x[:])}
	}
	return rule.Value{Kind: rule.KindNull}
}

// fromValue converts a rule value back to the AMQP type it came as.
func fromValue(v rule.Value) any {
	switch v.Kind {
	case rule.KindBool:
		return v.N != 0
	case rule.KindUbyte:
		return uint8(v.N)
	case rule.KindUshort:
		return uint16(v.N)
	case rule.KindUint:
		return uint32(v.N)
	case rule.KindUlong:
		return v.N
	case rule.KindByte:
		return int8(int64(v.N))
	case rule.KindShort:
		return int16(int64(v.N))
	case rule.KindInt:
		return int32(int64(v.N))
	case rule.KindLong:
		return int64(v.N)
	case rule.KindFloat:
		return float32(math.Float64frombits(v.N))
	case rule.KindDouble:
		return math.Float64frombits(v.N)
	case rule.KindChar:
		return amqp.Char(v.N)
	case rule.KindTimestamp:
		return amqp.Timestamp(int64(v.N))
	case rule.KindUUID:
		var u amqp.UUID
		copy(u[:], v.S)
		return u
	case rule.KindBinary:
		return []byte(v.S)
	case rule.KindString:
		return v.S
	case rule.KindSymbol:
		return amqp.Symbol(v.S)
	case rule.KindDecimal32:
		var d amqp.Decimal32
		copy(d[:], v.S)
		return d
	case rule.KindDecimal64:
		var d amqp.Decimal64
		copy(d[:], v.S)
		return d
	case rule.KindDecimal128:
		var d amqp.Decimal128
		copy(d[:], v.S)
		return d
	}
	return nil
}

// toProps and fromProps leave out cluster.ForwardHopsProperty: the broker's count of a
// message's forwards is its own, neither set by a client nor shown to one.
func toProps(ps []amqp.Property) []rule.Property {
	if len(ps) == 0 {
		return nil
	}
	out := make([]rule.Property, 0, len(ps))
	for _, p := range ps {
		if p.Key != cluster.ForwardHopsProperty {
			out = append(out, rule.Property{Key: p.Key, Value: toValue(p.Value)})
		}
	}
	return out
}

func fromProps(ps []rule.Property) []amqp.Property {
	out := make([]amqp.Property, 0, len(ps))
	for _, p := range ps {
		if p.Key != cluster.ForwardHopsProperty {
			out = append(out, amqp.Property{Key: p.Key, Value: fromValue(p.Value)})
		}
	}
	return out
}
