package normalize

// AppendTemplate appends the template of msg to dst: msg with its variable
// parts replaced by placeholders, so that lines that differ only in values
// share a template. Scanning left to right, at the start of a token (a
// position not preceded by a letter, digit, '_' or non-ASCII byte):
//
//   - a quoted string, '…' or "…" (backslash escapes allowed, the closing
//     quote not followed by a word character), becomes <str>;
//     an apostrophe inside a word (don't) starts no string;
//   - a UUID (8-4-4-4-12 hex digits) becomes <uuid>;
//   - an IPv4 address, with an optional :port, becomes <ip>;
//   - an IPv6 address (with :: compression, an IPv4 tail, and at least one
//     decimal digit, so that words like "add::bee" stay) becomes <ip>;
//   - a hex id becomes <hex>: 0x followed by hex digits, or a whole word of
//     hex digits that is at least 8 long and has both a digit and a letter
//     a–f, or at least 16 long and has a letter;
//   - a number, with an optional sign, fraction and exponent, becomes <num>;
//     a unit may follow (12ms becomes <num>ms);
//   - any other word is copied whole, with the words it is joined to by
//     dots, so digits inside words stay (user42, sha256, v1.2.3, Foo.java).
//
// The order matters: a UUID is tried before a hex id, and both before a
// number. It allocates only to grow dst.
func AppendTemplate(dst, msg []byte) []byte {
	i := 0
	for i < len(msg) {
		c := msg[i]
		if i > 0 && isWord(msg[i-1]) {
			dst = append(dst, c)
			i++
			continue
		}
		// At the start of a token.
		if c == '"' || c == '\'' {
			if j := matchQuoted(msg, i); j > 0 {
				dst = append(dst, "<str>"...)
				i = j
				continue
			}
		}
		if isHex(c) || c == ':' {
			// The run of hex digits at i tells which matchers can apply.
			j, digits := i, 0
			for j < len(msg) && isHex(msg[j]) {
				if isDigit(msg[j]) {
					digits++
				}
				j++
			}
			n := j - i
			var next byte
			if j < len(msg) {
				next = msg[j]
			}
			k := 0
			switch {
			case n == 8 && next == '-':
				if k = matchUUID(msg, i); k > 0 {
					dst = append(dst, "<uuid>"...)
				}
			case n > 0 && n <= 3 && next == '.' && digits == n:
				if k = matchIPv4(msg, i); k > 0 {
					dst = append(dst, "<ip>"...)
				}
			}
			if k == 0 && n <= 4 && next == ':' {
				if k = matchIPv6(msg, i); k > 0 {
					dst = append(dst, "<ip>"...)
				}
			}
			if k == 0 {
				if k = matchHex(msg, i, j, digits); k > 0 {
					dst = append(dst, "<hex>"...)
				}
			}
			if k > 0 {
				i = k
				continue
			}
		}
		if j := matchNumber(msg, i); j > 0 {
			dst = append(dst, "<num>"...)
			i = j
			continue
		}
		if isWord(c) { // copy the rest of the word, and words joined by dots
			j := i + 1
			for j < len(msg) && (isWord(msg[j]) || msg[j] == '.' && j+1 < len(msg) && isWord(msg[j+1])) {
				j++
			}
			dst = append(dst, msg[i:j]...)
			i = j
			continue
		}
		dst = append(dst, c)
		i++
	}
	return dst
}

// Fingerprint is the 64-bit FNV-1a hash of a template.
func Fingerprint(template []byte) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range template {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}

// charClass bits.
const (
	clWord  = 1 << iota // letter, digit, '_', or a byte of a non-ASCII character
	clHex               // 0-9 a-f A-F
	clDigit             // 0-9
)

var class = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= '0' && c <= '9':
			t[c] = clWord | clHex | clDigit
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			t[c] = clWord | clHex
		case c >= 'g' && c <= 'z' || c >= 'G' && c <= 'Z' || c == '_' || c >= 0x80:
			t[c] = clWord
		}
	}
	return t
}()

func isWord(c byte) bool  { return class[c]&clWord != 0 }
func isHex(c byte) bool   { return class[c]&clHex != 0 }
func isDigit(c byte) bool { return class[c]&clDigit != 0 }

// endsToken reports whether position j of s ends a token.
func endsToken(s []byte, j int) bool { return j >= len(s) || !isWord(s[j]) }

// matchQuoted matches a quoted string at i and returns the index after it,
// or 0.
func matchQuoted(s []byte, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			if endsToken(s, j+1) {
				return j + 1
			}
			return 0
		}
	}
	return 0
}

func matchUUID(s []byte, i int) int {
	if len(s)-i < 36 {
		return 0
	}
	for k, c := range s[i : i+36] {
		if k == 8 || k == 13 || k == 18 || k == 23 {
			if c != '-' {
				return 0
			}
		} else if !isHex(c) {
			return 0
		}
	}
	if !endsToken(s, i+36) {
		return 0
	}
	return i + 36
}

// octet matches a decimal number 0-255 of 1-3 digits at j.
func octet(s []byte, j int) int {
	v, k := 0, j
	for k < len(s) && k-j < 3 && isDigit(s[k]) {
		v = v*10 + int(s[k]-'0')
		k++
	}
	if k == j || v > 255 {
		return 0
	}
	return k
}

func matchIPv4(s []byte, i int) int {
	j := i
	for part := 0; part < 4; part++ {
		if part > 0 {
			if j >= len(s) || s[j] != '.' {
				return 0
			}
			j++
		}
		if j = octet(s, j); j == 0 {
			return 0
		}
	}
	if !endsToken(s, j) || j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		return 0
	}
	if j+1 < len(s) && s[j] == ':' && isDigit(s[j+1]) { // a port
		k := j + 1
		for k < len(s) && k-j <= 5 && isDigit(s[k]) {
			k++
		}
		if k-j <= 6 && endsToken(s, k) {
			j = k
		}
	}
	return j
}

func matchIPv6(s []byte, i int) int {
	// The candidate: a run of hex digits, ':' and '.', less a trailing '.'
	// or single ':' (punctuation after the address).
	j := i
	for j < len(s) && (isHex(s[j]) || s[j] == ':' || s[j] == '.') {
		j++
	}
	if !endsToken(s, j) {
		return 0
	}
	for j > i && (s[j-1] == '.' || s[j-1] == ':' && (j-2 < i || s[j-2] != ':')) {
		j--
	}
	if j-i < 2 || !validIPv6(s[i:j]) {
		return 0
	}
	return j
}

// validIPv6 checks the text form of an IPv6 address (RFC 4291 2.2), and
// that it has a decimal digit.
func validIPv6(a []byte) bool {
	groups, compressed, digit := 0, false, false
	k := 0
	if len(a) >= 2 && a[0] == ':' && a[1] == ':' {
		compressed, k = true, 2
		if k == len(a) {
			return false // "::" alone: too ambiguous in prose
		}
	} else if a[0] == ':' {
		return false
	}
	for k < len(a) {
		// A group, or an IPv4 tail.
		start := k
		for k < len(a) && isHex(a[k]) {
			digit = digit || isDigit(a[k])
			k++
		}
		if k < len(a) && a[k] == '.' {
			if e := matchIPv4(a, start); e != len(a) || groups > 6 {
				return false
			}
			groups += 2
			k = len(a)
			break
		}
		if k-start < 1 || k-start > 4 {
			return false
		}
		groups++
		if k == len(a) {
			break
		}
		// a[k] == ':'
		k++
		if k < len(a) && a[k] == ':' {
			if compressed {
				return false
			}
			compressed = true
			k++
			if k == len(a) {
				break
			}
		} else if k == len(a) {
			return false
		}
	}
	if !digit {
		return false
	}
	if compressed {
		return groups < 8
	}
	return groups == 8
}

// matchHex matches a hex id at i, given the run of hex digits s[i:j] and
// the number of decimal digits in it.
func matchHex(s []byte, i, j, digits int) int {
	if j == i+1 && s[i] == '0' && j+1 < len(s) && (s[j] == 'x' || s[j] == 'X') && isHex(s[j+1]) {
		j += 2
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if endsToken(s, j) {
			return j
		}
		return 0
	}
	n := j - i
	letters := n - digits
	if !endsToken(s, j) || letters == 0 || n < 8 || n < 16 && digits == 0 {
		return 0
	}
	return j
}

func matchNumber(s []byte, i int) int {
	j := i
	if s[j] == '-' || s[j] == '+' {
		j++
	}
	start := j
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j == start {
		return 0
	}
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j += 2
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	if j+1 < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k+1 < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDigit(s[k]) {
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			if endsToken(s, k) {
				j = k
			}
		}
	}
	return j
}
