package rule

import "math"

// numeric returns v as a float64 when v is a number.
func numeric(v Value) (float64, bool) {
	switch v.Kind {
	case KindUbyte, KindUshort, KindUint, KindUlong:
		return float64(v.N), true
	case KindByte, KindShort, KindInt, KindLong:
		return float64(int64(v.N)), true
	case KindFloat, KindDouble:
		return math.Float64frombits(v.N), true
	}
	return 0, false
}
