package normalize

import (
	"strconv"
	"time"
)

// parseTime parses a ts given as a JSON string: an RFC 3339 timestamp
// (2024-01-02T03:04:05Z, with a fraction and a numeric offset if any; 't',
// 'z' and a space instead of 'T' are accepted, and an offset without its
// colon) or a number written as a string. It returns seconds since the
// epoch, rounded down.
func parseTime(s []byte) (int64, bool) {
	if len(s) > 0 && (s[0] >= '0' && s[0] <= '9' || s[0] == '-') {
		if sec, ok := parseEpoch(s); ok {
			return sec, true
		}
	}
	return parseRFC3339(s)
}

func num(s []byte, i, n int) (int, bool) {
	if i+n > len(s) {
		return 0, false
	}
	v := 0
	for _, c := range s[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func parseRFC3339(s []byte) (int64, bool) {
	// 2006-01-02T15:04:05
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' ||
		(s[10] != 'T' && s[10] != 't' && s[10] != ' ') {
		return 0, false
	}
	year, ok1 := num(s, 0, 4)
	month, ok2 := num(s, 5, 2)
	day, ok3 := num(s, 8, 2)
	hour, ok4 := num(s, 11, 2)
	min, ok5 := num(s, 14, 2)
	sec, ok6 := num(s, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(year, month) || hour > 23 || min > 59 || sec > 60 {
		return 0, false
	}
	i := 19
	if s[i] == '.' || s[i] == ',' {
		i++
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return 0, false
		}
	}
	offset := 0
	switch {
	case i == len(s):
		return 0, false // RFC 3339 requires a zone
	case s[i] == 'Z' || s[i] == 'z':
		i++
	case s[i] == '+' || s[i] == '-':
		oh, ok := num(s, i+1, 2)
		j := i + 3
		if j < len(s) && s[j] == ':' {
			j++
		}
		om, ok2 := num(s, j, 2)
		if !ok || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		offset = oh*3600 + om*60
		if s[i] == '-' {
			offset = -offset
		}
		i = j + 2
	default:
		return 0, false
	}
	if i != len(s) {
		return 0, false
	}
	t := time.Date(year, time.Month(month), day, hour, min, sec, 0, time.UTC).Unix()
	return t - int64(offset), true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parseEpoch parses a JSON number as a time since the epoch, in a unit
// guessed from its magnitude: below 1e11 it is seconds (1e11 s is the year
// 5138), below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds.
// A fraction is allowed (1700000000.25); the result is rounded down to a
// second.
func parseEpoch(s []byte) (int64, bool) {
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	var ip uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		if ip > (1<<63-1)/10 {
			return 0, false
		}
		ip = ip*10 + uint64(s[i]-'0')
		i++
	}
	if i == start {
		return 0, false
	}
	frac := false
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if s[i] != '0' {
				frac = true
			}
			i++
		}
		if i == fs {
			return 0, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		f, err := strconv.ParseFloat(string(s), 64) // rare: pay for the general parser
		if err != nil || f != f || f > 9.2e18 || f < -9.2e18 {
			return 0, false
		}
		return epochUnits(int64(f), f < 0 && float64(int64(f)) != f), true
	}
	if i != len(s) || ip > 1<<63-1 {
		return 0, false
	}
	v := int64(ip)
	if neg {
		v = -v
	}
	return epochUnits(v, neg && frac), true
}

// epochUnits converts the integer part v of an epoch number to seconds,
// rounding down; fracNeg says a negative number had a fraction cut off.
func epochUnits(v int64, fracNeg bool) int64 {
	a := v
	if a < 0 {
		a = -a
	}
	var div int64
	switch {
	case a < 1e11:
		div = 1
	case a < 1e14:
		div = 1e3
	case a < 1e17:
		div = 1e6
	default:
		div = 1e9
	}
	q := v / div // rounds toward zero: correct it toward minus infinity
	if v < 0 && v%div != 0 || fracNeg {
		q--
	}
	return q
}
