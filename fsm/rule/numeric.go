package rule

// numericKind reports whether k is an integer or floating-point kind. Char, timestamp
// and the decimals are not numbers for a correlation filter.
func numericKind(k Kind) bool {
	switch k {
	case KindUbyte, KindUshort, KindUint, KindUlong, KindByte, KindShort, KindInt, KindLong,
		KindFloat, KindDouble:
		return true
	}
	return false
}
