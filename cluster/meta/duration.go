package meta

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Never is the "no limit" duration: Service Bus's TimeSpan.MaxValue, which the admin
// API writes as NeverISO (S-ENT-2: DefaultMessageTimeToLive and AutoDeleteOnIdle default
// to it). Any ISO duration at or beyond the range of time.Duration parses to Never.
const Never = time.Duration(math.MaxInt64)

// NeverISO is how Service Bus spells TimeSpan.MaxValue in ISO 8601.
const NeverISO = "P10675199DT2H48M5.4775807S"

// ParseISODuration parses an ISO 8601 duration as Service Bus writes them (PT30S, P14D,
// P1DT2H3M4.5S). Years count 365 days and months 30 days, as .NET's XmlConvert does.
// Negative durations are rejected.
func ParseISODuration(s string) (time.Duration, error) {
	bad := func(why string) error { return fmt.Errorf("%q is not an ISO 8601 duration (%s)", s, why) }
	if s == NeverISO {
		return Never, nil
	}
	rest, ok := strings.CutPrefix(s, "P")
	if !ok {
		return 0, bad("must start with P")
	}
	if rest == "" || rest == "T" {
		return 0, bad("no components")
	}
	var total float64 // seconds; float keeps overflow detection simple, precision to ns below ~100 days
	var nanos int64   // exact accumulation while it fits
	exact := true
	inTime := false
	seen := ""
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return 0, bad("two T separators")
			}
			inTime = true
			rest = rest[1:]
			if rest == "" {
				return 0, bad("empty time part")
			}
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, bad("expected a number followed by a unit")
		}
		num, unit := rest[:i], rest[i]
		rest = rest[i+1:]
		var unitSec float64
		switch {
		case !inTime && unit == 'Y':
			unitSec = 365 * 86400
		case !inTime && unit == 'M':
			unitSec = 30 * 86400
		case !inTime && unit == 'W':
			unitSec = 7 * 86400
		case !inTime && unit == 'D':
			unitSec = 86400
		case inTime && unit == 'H':
			unitSec = 3600
		case inTime && unit == 'M':
			unitSec = 60
		case inTime && unit == 'S':
			unitSec = 1
		default:
			return 0, bad(fmt.Sprintf("unexpected unit %q", unit))
		}
		key := string(unit)
		if inTime {
			key = "T" + key
		}
		if strings.Contains(seen, key+",") {
			return 0, bad("repeated unit " + string(unit))
		}
		seen += key + ","
		if strings.Contains(num, ".") && unit != 'S' {
			return 0, bad("only seconds may have a fraction")
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, bad("bad number " + num)
		}
		total += v * unitSec
		if unit == 'S' {
			whole, frac, _ := strings.Cut(num, ".")
			w, err := strconv.ParseInt(whole, 10, 64)
			if err != nil || w > math.MaxInt64/int64(time.Second) {
				exact = false
				continue
			}
			frac = (frac + "000000000")[:9]
			f, _ := strconv.ParseInt(frac, 10, 64)
			nanos, exact = addNanos(nanos, w*1e9+f, exact)
		} else {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil || n > math.MaxInt64/int64(unitSec*1e9) {
				exact = false
				continue
			}
			nanos, exact = addNanos(nanos, n*int64(unitSec*1e9), exact)
		}
	}
	if !exact || total >= float64(Never)/1e9 {
		return Never, nil
	}
	return time.Duration(nanos), nil
}

func addNanos(a, b int64, exact bool) (int64, bool) {
	if !exact || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}

// FormatISODuration writes d the way Service Bus does: PT1M, P14D, P1DT2H30M5.5S, PT0S,
// and NeverISO for Never.
func FormatISODuration(d time.Duration) string {
	if d >= Never {
		return NeverISO
	}
	if d < 0 {
		d = 0
	}
	var b strings.Builder
	b.WriteByte('P')
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	if days > 0 {
		b.WriteString(strconv.FormatInt(int64(days), 10))
		b.WriteByte('D')
	}
	if d == 0 {
		if days == 0 {
			return "PT0S"
		}
		return b.String()
	}
	b.WriteByte('T')
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	if h > 0 {
		b.WriteString(strconv.FormatInt(int64(h), 10))
		b.WriteByte('H')
	}
	if m > 0 {
		b.WriteString(strconv.FormatInt(int64(m), 10))
		b.WriteByte('M')
	}
	if d > 0 {
		s := d / time.Second
		ns := d - s*time.Second
		b.WriteString(strconv.FormatInt(int64(s), 10))
		if ns > 0 {
			frac := strings.TrimRight(fmt.Sprintf("%09d", int64(ns)), "0")
			b.WriteByte('.')
			b.WriteString(frac)
		}
		b.WriteByte('S')
	}
	return b.String()
}

// humanDuration writes a bound for an error message: 5s, 5m0s -> 5m, 168h -> 7d.
func humanDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}
