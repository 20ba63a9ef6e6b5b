package normalize

// The normalized levels. A level that matches none of the known spellings is
// LevelUnknown (rather than kept as written, so the level column stays a
// small closed set; the original is still in the raw log line).
const (
	LevelTrace   = "trace"
	LevelDebug   = "debug"
	LevelInfo    = "info"
	LevelWarn    = "warn"
	LevelError   = "error"
	LevelFatal   = "fatal"
	LevelUnknown = "unknown"
)

// NormalizeLevel maps a level as loggers write it to one of the Level
// constants, ignoring case and surrounding white space:
//
//	trace: trace, trc, t, verbose
//	debug: debug, dbg, d
//	info:  info, inf, i, information, informational, notice, and the empty string
//	warn:  warn, warning, wrn, w
//	error: error, err, e
//	fatal: fatal, ftl, f, crit, critical, panic, emerg, emergency, alert
//
// Anything else is LevelUnknown.
func NormalizeLevel(s []byte) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	var buf [16]byte
	if len(s) > len(buf) {
		return LevelUnknown
	}
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(s)]) {
	case "trace", "trc", "t", "verbose":
		return LevelTrace
	case "debug", "dbg", "d":
		return LevelDebug
	case "info", "inf", "i", "information", "informational", "notice", "":
		return LevelInfo
	case "warn", "warning", "wrn", "w":
		return LevelWarn
	case "error", "err", "e":
		return LevelError
	case "fatal", "ftl", "f", "crit", "critical", "panic", "emerg", "emergency", "alert":
		return LevelFatal
	}
	return LevelUnknown
}

// numericLevel maps the numeric levels of pino and bunyan (10 trace, 20
// debug, 30 info, 40 warn, 50 error, 60 fatal); other numbers are unknown.
func numericLevel(raw []byte) string {
	switch string(raw) {
	case "10":
		return LevelTrace
	case "20":
		return LevelDebug
	case "30":
		return LevelInfo
	case "40":
		return LevelWarn
	case "50":
		return LevelError
	case "60":
		return LevelFatal
	}
	return LevelUnknown
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
