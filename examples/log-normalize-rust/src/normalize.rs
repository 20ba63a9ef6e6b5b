//! One JSON log line to the fields of a row of the logs table: the Rust port
//! of examples/log-normalize/normalize (same rules, same error messages, via
//! the C port examples/log-normalize-c/normalize.c).

/// A normalized log line. One Entry is reused for many lines.
#[derive(Default)]
pub struct Entry {
    pub time: i64, // seconds since the Unix epoch, rounded down
    pub service: Vec<u8>,
    pub level: &'static str,
    pub msg: Vec<u8>,
    pub template: Vec<u8>,
    pub fingerprint: u64,
    pub attrs: Vec<(Vec<u8>, Vec<u8>)>, // sorted by key; of duplicate keys, the last wins
}

fn is_word(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric() || c >= 0x80
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn is_digit(c: u8) -> bool {
    c.is_ascii_digit()
}

fn is_space(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\n' || c == b'\r'
}

// ---- quoting as Go's strconv does ------------------------------------------

/// Go's strconv.IsPrint for the code points a log line may plausibly
/// carry (as normalize.c has it).
fn is_print(r: u32) -> bool {
    if r < 0x20 || (0x7f..=0xa0).contains(&r) || r == 0xad {
        return false;
    }
    if r < 0x300 {
        return true;
    }
    if matches!(r, 0x061c | 0x06dd | 0x070f | 0x1680 | 0x180e | 0x202f | 0x205f | 0x3000 | 0xfeff) {
        return false;
    }
    !((0x0600..=0x0605).contains(&r)
        || (0x2000..=0x200f).contains(&r)
        || (0x2028..=0x202e).contains(&r)
        || (0x2060..=0x206f).contains(&r)
        || (0xd800..=0xf8ff).contains(&r)
        || (0xfff9..=0xfffb).contains(&r)
        || (r & 0xfffe) == 0xfffe
        || r >= 0xf0000
        || (0xe0000..=0xe0fff).contains(&r))
}

fn utf8_encode(d: &mut Vec<u8>, mut r: u32) {
    if r < 0x80 {
        d.push(r as u8);
        return;
    }
    if r < 0x800 {
        d.push((0xc0 | r >> 6) as u8);
        d.push((0x80 | (r & 0x3f)) as u8);
        return;
    }
    if (0xd800..0xe000).contains(&r) {
        r = 0xfffd;
    }
    if r > 0x10ffff {
        r = 0xfffd;
    }
    if r < 0x10000 {
        d.push((0xe0 | r >> 12) as u8);
        d.push((0x80 | (r >> 6 & 0x3f)) as u8);
        d.push((0x80 | (r & 0x3f)) as u8);
        return;
    }
    d.push((0xf0 | r >> 18) as u8);
    d.push((0x80 | (r >> 12 & 0x3f)) as u8);
    d.push((0x80 | (r >> 6 & 0x3f)) as u8);
    d.push((0x80 | (r & 0x3f)) as u8);
}

/// Decodes the rune at the front of p as Go's utf8.DecodeRune does:
/// (rune, width), width 0 for an invalid byte.
fn utf8_decode(p: &[u8]) -> (u32, usize) {
    let c = p[0];
    if c < 0x80 {
        return (c as u32, 1);
    }
    let (w, mut v, lo, hi) = match c {
        0xc2..=0xdf => (2, (c & 0x1f) as u32, 0x80u8, 0xbfu8),
        0xe0..=0xef => (3, (c & 0x0f) as u32, if c == 0xe0 { 0xa0 } else { 0x80 }, if c == 0xed { 0x9f } else { 0xbf }),
        0xf0..=0xf4 => (4, (c & 0x07) as u32, if c == 0xf0 { 0x90 } else { 0x80 }, if c == 0xf4 { 0x8f } else { 0xbf }),
        _ => return (0, 0),
    };
    if p.len() < w || p[1] < lo || p[1] > hi {
        return (0, 0);
    }
    v = v << 6 | (p[1] & 0x3f) as u32;
    for &b in &p[2..w] {
        if b & 0xc0 != 0x80 {
            return (0, 0);
        }
        v = v << 6 | (b & 0x3f) as u32;
    }
    (v, w)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn quote_rune(b: &mut Vec<u8>, r: u32, q: u8) {
    if r == q as u32 || r == b'\\' as u32 {
        b.push(b'\\');
        b.push(r as u8);
    } else if is_print(r) {
        utf8_encode(b, r);
    } else {
        b.push(b'\\');
        match r {
            0x07 => b.push(b'a'),
            0x08 => b.push(b'b'),
            0x0c => b.push(b'f'),
            0x0a => b.push(b'n'),
            0x0d => b.push(b'r'),
            0x09 => b.push(b't'),
            0x0b => b.push(b'v'),
            _ => {
                if r < 0x20 || r == 0x7f {
                    b.push(b'x');
                    b.push(HEX[(r >> 4 & 15) as usize]);
                    b.push(HEX[(r & 15) as usize]);
                } else if r < 0x10000 {
                    b.push(b'u');
                    for s in [12, 8, 4, 0] {
                        b.push(HEX[(r >> s & 15) as usize]);
                    }
                } else {
                    b.push(b'U');
                    for s in [28, 24, 20, 16, 12, 8, 4, 0] {
                        b.push(HEX[(r >> s & 15) as usize]);
                    }
                }
            }
        }
    }
}

fn quote(b: &mut Vec<u8>, p: &[u8]) {
    b.push(b'"');
    let mut i = 0;
    while i < p.len() {
        let (r, w) = utf8_decode(&p[i..]);
        if w == 0 {
            b.extend_from_slice(&[b'\\', b'x', HEX[(p[i] >> 4) as usize], HEX[(p[i] & 15) as usize]]);
            i += 1;
            continue;
        }
        quote_rune(b, r, b'"');
        i += w;
    }
    b.push(b'"');
}

fn text_of(b: Vec<u8>) -> String {
    // The messages are built from valid UTF-8 (quoting escapes the rest);
    // the raw JSON of a non-string ts was validated by the scanner.
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

// ---- the JSON scanner -------------------------------------------------------

const MAX_DEPTH: usize = 512;

struct Scanner<'a> {
    p: &'a [u8],
    i: usize,
}

type Res<T> = Result<T, String>;

impl<'a> Scanner<'a> {
    fn fail<T>(&self, msg: &str) -> Res<T> {
        let mut b = Vec::new();
        b.extend_from_slice(b"invalid JSON at byte ");
        if self.i >= self.p.len() {
            b.extend_from_slice(format!("{}: unexpected end of input, {}", self.p.len(), msg).as_bytes());
        } else {
            b.extend_from_slice(format!("{}: {}, found '", self.i, msg).as_bytes());
            quote_rune(&mut b, self.p[self.i] as u32, b'\'');
            b.push(b'\'');
        }
        Err(text_of(b))
    }

    fn ws(&mut self) {
        while self.i < self.p.len() && is_space(self.p[self.i]) {
            self.i += 1;
        }
    }

    fn next(&mut self, c: u8) -> bool {
        self.ws();
        if self.i < self.p.len() && self.p[self.i] == c {
            self.i += 1;
            return true;
        }
        false
    }

    fn peek_is(&self, c: u8) -> bool {
        self.i < self.p.len() && self.p[self.i] == c
    }

    /// Decodes the string at self.i (which holds '"').
    fn str(&mut self) -> Res<Vec<u8>> {
        let p = self.p;
        let start = self.i + 1;
        let mut j = start;
        while j < p.len() {
            let c = p[j];
            if c == b'"' {
                self.i = j + 1;
                return Ok(p[start..j].to_vec());
            }
            if c == b'\\' {
                return self.str_slow(start, j);
            }
            if c < 0x20 {
                self.i = j;
                return self.fail("control character in string");
            }
            j += 1;
        }
        self.i = p.len();
        self.fail("unterminated string")
    }

    fn str_slow(&mut self, start: usize, mut j: usize) -> Res<Vec<u8>> {
        let p = self.p;
        let n = p.len();
        let mut a = p[start..j].to_vec();
        while j < n {
            let c = p[j];
            if c == b'"' {
                self.i = j + 1;
                return Ok(a);
            }
            if c < 0x20 {
                self.i = j;
                return self.fail("control character in string");
            }
            if c != b'\\' {
                a.push(c);
                j += 1;
                continue;
            }
            if j + 1 >= n {
                break;
            }
            let esc = p[j + 1];
            j += 2;
            match esc {
                b'"' | b'\\' | b'/' => a.push(esc),
                b'b' => a.push(0x08),
                b'f' => a.push(0x0c),
                b'n' => a.push(b'\n'),
                b'r' => a.push(b'\r'),
                b't' => a.push(b'\t'),
                b'u' => {
                    let mut r = match hex4(p, j) {
                        Some(r) => r,
                        None => {
                            self.i = j - 2;
                            return self.fail("bad \\u escape");
                        }
                    };
                    j += 4;
                    if (0xd800..0xdc00).contains(&r) && j + 6 <= n && p[j] == b'\\' && p[j + 1] == b'u' {
                        if let Some(r2) = hex4(p, j + 2) {
                            if (0xdc00..0xe000).contains(&r2) {
                                r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
                                j += 6;
                            }
                        }
                    }
                    utf8_encode(&mut a, r); // an unpaired surrogate is U+FFFD
                }
                _ => {
                    self.i = j - 2;
                    return self.fail("bad escape");
                }
            }
        }
        self.i = n;
        self.fail("unterminated string")
    }

    fn skip_string(&mut self) -> Res<()> {
        let p = self.p;
        let n = p.len();
        let mut j = self.i + 1;
        while j < n {
            let c = p[j];
            if c == b'"' {
                self.i = j + 1;
                return Ok(());
            }
            if c < 0x20 {
                self.i = j;
                return self.fail("control character in string");
            }
            if c == b'\\' {
                if j + 1 >= n {
                    break;
                }
                match p[j + 1] {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 1,
                    b'u' => {
                        if hex4(p, j + 2).is_none() {
                            self.i = j;
                            return self.fail("bad \\u escape");
                        }
                        j += 5;
                    }
                    _ => {
                        self.i = j;
                        return self.fail("bad escape");
                    }
                }
            }
            j += 1;
        }
        self.i = n;
        self.fail("unterminated string")
    }

    fn literal(&mut self, lit: &[u8], msg: &str) -> Res<()> {
        if self.p.len() - self.i >= lit.len() && &self.p[self.i..self.i + lit.len()] == lit {
            self.i += lit.len();
            return Ok(());
        }
        self.fail(msg)
    }

    fn digits(&mut self) -> usize {
        let k = self.i;
        while self.i < self.p.len() && is_digit(self.p[self.i]) {
            self.i += 1;
        }
        self.i - k
    }

    fn skip_number(&mut self) -> Res<()> {
        if self.p[self.i] == b'-' {
            self.i += 1;
        }
        if self.peek_is(b'0') {
            self.i += 1;
        } else if self.digits() == 0 {
            return self.fail("expected a digit");
        }
        if self.peek_is(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return self.fail("expected a digit");
            }
        }
        if self.peek_is(b'e') || self.peek_is(b'E') {
            self.i += 1;
            if self.peek_is(b'+') || self.peek_is(b'-') {
                self.i += 1;
            }
            if self.digits() == 0 {
                return self.fail("expected a digit");
            }
        }
        Ok(())
    }

    fn skip_composite(&mut self, open: u8, depth: usize) -> Res<()> {
        let closer = if open == b'[' { b']' } else { b'}' };
        self.i += 1;
        if self.next(closer) {
            return Ok(());
        }
        loop {
            if open == b'{' {
                self.ws();
                if !self.peek_is(b'"') {
                    return self.fail("expected a string key");
                }
                self.skip_string()?;
                if !self.next(b':') {
                    return self.fail("expected ':'");
                }
            }
            self.skip(depth + 1)?;
            if self.next(b',') {
                continue;
            }
            if self.next(closer) {
                return Ok(());
            }
            return self.fail(if open == b'[' { "expected ',' or ']'" } else { "expected ',' or '}'" });
        }
    }

    /// Validates the value at self.i and returns its raw text's range.
    fn skip(&mut self, depth: usize) -> Res<(usize, usize)> {
        self.ws();
        let start = self.i;
        if self.i >= self.p.len() {
            return self.fail("expected a value");
        }
        let c = self.p[self.i];
        match c {
            b'"' => self.skip_string()?,
            b'{' | b'[' => {
                if depth >= MAX_DEPTH {
                    return self.fail("nested too deep");
                }
                self.skip_composite(c, depth)?
            }
            b'-' | b'0'..=b'9' => self.skip_number()?,
            b't' => self.literal(b"true", "expected true")?,
            b'f' => self.literal(b"false", "expected false")?,
            b'n' => self.literal(b"null", "expected null")?,
            _ => return self.fail("expected a value"),
        }
        Ok((start, self.i))
    }
}

fn hex4(p: &[u8], j: usize) -> Option<u32> {
    if j + 4 > p.len() {
        return None;
    }
    let mut v = 0u32;
    for &c in &p[j..j + 4] {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = v << 4 | d as u32;
    }
    Some(v)
}

/// The raw text of a valid JSON value without the white space outside its strings.
fn compact(raw: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(raw.len());
    let mut inside = false;
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if inside && c == b'\\' {
            a.push(c);
            i += 1;
            a.push(raw[i]);
            i += 1;
            continue;
        }
        if c == b'"' {
            inside = !inside;
        } else if !inside && is_space(c) {
            i += 1;
            continue;
        }
        a.push(c);
        i += 1;
    }
    a
}

// ---- levels -------------------------------------------------------------------

fn normalize_level(s: &[u8]) -> &'static str {
    let mut a = 0;
    let mut z = s.len();
    while a < z && is_space(s[a]) {
        a += 1;
    }
    while z > a && is_space(s[z - 1]) {
        z -= 1;
    }
    let s = &s[a..z];
    if s.len() > 16 {
        return "unknown";
    }
    if s.is_empty() {
        return "info";
    }
    let b = s.to_ascii_lowercase();
    match &b[..] {
        b"trace" | b"trc" | b"t" | b"verbose" => "trace",
        b"debug" | b"dbg" | b"d" => "debug",
        b"info" | b"inf" | b"i" | b"information" | b"informational" | b"notice" => "info",
        b"warn" | b"warning" | b"wrn" | b"w" => "warn",
        b"error" | b"err" | b"e" => "error",
        b"emerg" | b"emergency" | b"fatal" | b"ftl" | b"f" | b"crit" | b"critical" | b"panic" | b"alert" => "fatal",
        _ => "unknown",
    }
}

/// The numeric levels of pino and bunyan.
fn numeric_level(raw: &[u8]) -> &'static str {
    if raw.len() == 2 && raw[1] == b'0' {
        match raw[0] {
            b'1' => return "trace",
            b'2' => return "debug",
            b'3' => return "info",
            b'4' => return "warn",
            b'5' => return "error",
            b'6' => return "fatal",
            _ => {}
        }
    }
    "unknown"
}

// ---- timestamps -----------------------------------------------------------------

fn num(s: &[u8], i: usize, w: usize) -> Option<i64> {
    if i + w > s.len() {
        return None;
    }
    let mut x = 0i64;
    for &c in &s[i..i + w] {
        if !c.is_ascii_digit() {
            return None;
        }
        x = x * 10 + (c - b'0') as i64;
    }
    Some(x)
}

fn days_in(year: i64, month: i64) -> i64 {
    match month {
        2 => {
            if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) {
                29
            } else {
                28
            }
        }
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to year-month-day, proleptic Gregorian.
fn days_since_epoch(mut year: i64, month: i64, day: i64) -> i64 {
    if month <= 2 {
        year -= 1;
    }
    let era = (if year >= 0 { year } else { year - 399 }) / 400;
    let yoe = year - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn parse_rfc3339(s: &[u8]) -> Option<i64> {
    let n = s.len();
    if n < 20 || s[4] != b'-' || s[7] != b'-' || s[13] != b':' || s[16] != b':' || !matches!(s[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (num(s, 0, 4)?, num(s, 5, 2)?, num(s, 8, 2)?);
    let (hour, min, sec) = (num(s, 11, 2)?, num(s, 14, 2)?, num(s, 17, 2)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in(year, month) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if s[i] == b'.' || s[i] == b',' {
        i += 1;
        let start = i;
        while i < n && s[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let mut offset = 0;
    if i == n {
        return None; // RFC 3339 requires a zone
    } else if s[i] == b'Z' || s[i] == b'z' {
        i += 1;
    } else if s[i] == b'+' || s[i] == b'-' {
        let mut j = i + 3;
        let oh = num(s, i + 1, 2);
        if j < n && s[j] == b':' {
            j += 1;
        }
        let om = num(s, j, 2);
        let (oh, om) = match (oh, om) {
            (Some(h), Some(m)) if h <= 23 && m <= 59 => (h, m),
            _ => return None,
        };
        offset = oh * 3600 + om * 60;
        if s[i] == b'-' {
            offset = -offset;
        }
        i = j + 2;
    } else {
        return None;
    }
    if i != n {
        return None;
    }
    Some(days_since_epoch(year, month, day) * 86400 + hour * 3600 + min * 60 + sec - offset)
}

/// The integer part v of an epoch number in seconds, rounded down;
/// frac_neg: a negative number had a fraction cut off.
fn epoch_units(v: i64, frac_neg: bool) -> i64 {
    let a = v.unsigned_abs();
    let div: i64 = if a < 100_000_000_000 {
        1
    } else if a < 100_000_000_000_000 {
        1000
    } else if a < 100_000_000_000_000_000 {
        1_000_000
    } else {
        1_000_000_000
    };
    let mut q = v / div;
    if (v < 0 && v % div != 0) || frac_neg {
        q -= 1;
    }
    q
}

fn parse_exponent(s: &[u8], e: usize) -> Option<i64> {
    let mut k = e + 1;
    if k < s.len() && (s[k] == b'+' || s[k] == b'-') {
        k += 1;
    }
    if k == s.len() || !s[k..].iter().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let f: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    if !(-9.2e18..=9.2e18).contains(&f) {
        return None;
    }
    let t = f as i64;
    Some(epoch_units(t, f < 0.0 && t as f64 != f))
}

/// A JSON number as a time since the epoch, in a unit guessed from its
/// magnitude: below 1e11 seconds, below 1e14 milliseconds, below 1e17
/// microseconds, else nanoseconds.
fn parse_epoch(s: &[u8]) -> Option<i64> {
    let n = s.len();
    let mut i = 0;
    let neg = n > 0 && s[0] == b'-';
    if neg {
        i += 1;
    }
    let start = i;
    let mut ip: u64 = 0;
    while i < n && s[i].is_ascii_digit() {
        if ip > i64::MAX as u64 / 10 {
            return None;
        }
        ip = ip * 10 + (s[i] - b'0') as u64;
        i += 1;
    }
    if i == start {
        return None;
    }
    let mut frac = false;
    if i < n && s[i] == b'.' {
        i += 1;
        let fs = i;
        while i < n && s[i].is_ascii_digit() {
            if s[i] != b'0' {
                frac = true;
            }
            i += 1;
        }
        if i == fs {
            return None;
        }
    }
    if i < n && (s[i] == b'e' || s[i] == b'E') {
        return parse_exponent(s, i);
    }
    if i != n || ip > i64::MAX as u64 {
        return None;
    }
    let mut v = ip as i64;
    if neg {
        v = -v;
    }
    Some(epoch_units(v, neg && frac))
}

/// A ts given as a JSON string: RFC 3339, or a number written as a string.
fn parse_time(s: &[u8]) -> Option<i64> {
    if !s.is_empty() && (s[0].is_ascii_digit() || s[0] == b'-') {
        if let Some(t) = parse_epoch(s) {
            return Some(t);
        }
    }
    parse_rfc3339(s)
}

// ---- templates -----------------------------------------------------------------

fn ends_token(s: &[u8], j: usize) -> bool {
    j >= s.len() || !is_word(s[j])
}

fn match_quoted(s: &[u8], i: usize) -> usize {
    let q = s[i];
    let mut j = i + 1;
    while j < s.len() {
        if s[j] == b'\\' {
            j += 1;
        } else if s[j] == q {
            return if ends_token(s, j + 1) { j + 1 } else { 0 };
        }
        j += 1;
    }
    0
}

fn match_uuid(s: &[u8], i: usize) -> usize {
    if s.len() - i < 36 {
        return 0;
    }
    for k in 0..36 {
        let c = s[i + k];
        if k == 8 || k == 13 || k == 18 || k == 23 {
            if c != b'-' {
                return 0;
            }
        } else if !is_hex(c) {
            return 0;
        }
    }
    if ends_token(s, i + 36) {
        i + 36
    } else {
        0
    }
}

/// A decimal number 0-255 of 1-3 digits at j: its end, or 0.
fn octet(s: &[u8], j: usize) -> usize {
    let mut v = 0;
    let mut k = j;
    while k < s.len() && k - j < 3 && is_digit(s[k]) {
        v = v * 10 + (s[k] - b'0') as u32;
        k += 1;
    }
    if k == j || v > 255 {
        0
    } else {
        k
    }
}

fn match_ipv4(s: &[u8], i: usize) -> usize {
    let n = s.len();
    let mut j = i;
    for part in 0..4 {
        if part > 0 {
            if j >= n || s[j] != b'.' {
                return 0;
            }
            j += 1;
        }
        j = octet(s, j);
        if j == 0 {
            return 0;
        }
    }
    if !ends_token(s, j) || (j + 1 < n && s[j] == b'.' && is_digit(s[j + 1])) {
        return 0;
    }
    if j + 1 < n && s[j] == b':' && is_digit(s[j + 1]) {
        let mut k = j + 1;
        while k < n && k - j <= 5 && is_digit(s[k]) {
            k += 1;
        }
        if k - j <= 6 && ends_token(s, k) {
            j = k;
        }
    }
    j
}

/// The text form of an IPv6 address (RFC 4291 2.2) with a decimal digit.
fn valid_ipv6(a: &[u8]) -> bool {
    let n = a.len();
    let (mut groups, mut compressed, mut digit) = (0, false, false);
    let mut k = 0;
    if n >= 2 && a[0] == b':' && a[1] == b':' {
        compressed = true;
        k = 2;
        if k == n {
            return false;
        }
    } else if a[0] == b':' {
        return false;
    }
    while k < n {
        let start = k;
        while k < n && is_hex(a[k]) {
            digit = digit || is_digit(a[k]);
            k += 1;
        }
        if k < n && a[k] == b'.' {
            if match_ipv4(a, start) != n || groups > 6 {
                return false;
            }
            groups += 2;
            break;
        }
        if k - start < 1 || k - start > 4 {
            return false;
        }
        groups += 1;
        if k == n {
            break;
        }
        k += 1; // a[k] == ':'
        if k < n && a[k] == b':' {
            if compressed {
                return false;
            }
            compressed = true;
            k += 1;
            if k == n {
                break;
            }
        } else if k == n {
            return false;
        }
    }
    if !digit {
        return false;
    }
    if compressed {
        groups < 8
    } else {
        groups == 8
    }
}

fn match_ipv6(s: &[u8], i: usize) -> usize {
    let n = s.len();
    let mut j = i;
    while j < n && (is_hex(s[j]) || s[j] == b':' || s[j] == b'.') {
        j += 1;
    }
    if !ends_token(s, j) {
        return 0;
    }
    while j > i && (s[j - 1] == b'.' || (s[j - 1] == b':' && (j < i + 2 || s[j - 2] != b':'))) {
        j -= 1;
    }
    if j - i < 2 || !valid_ipv6(&s[i..j]) {
        return 0;
    }
    j
}

fn match_hex(s: &[u8], i: usize, mut j: usize, ndigits: usize) -> usize {
    let n = s.len();
    if j == i + 1 && s[i] == b'0' && j + 1 < n && (s[j] == b'x' || s[j] == b'X') && is_hex(s[j + 1]) {
        j += 2;
        while j < n && is_hex(s[j]) {
            j += 1;
        }
        return if ends_token(s, j) { j } else { 0 };
    }
    let len = j - i;
    let letters = len - ndigits;
    if !ends_token(s, j) || letters == 0 || len < 8 || (len < 16 && ndigits == 0) {
        return 0;
    }
    j
}

fn match_number(s: &[u8], i: usize) -> usize {
    let n = s.len();
    let mut j = i;
    if s[j] == b'-' || s[j] == b'+' {
        j += 1;
    }
    let start = j;
    while j < n && is_digit(s[j]) {
        j += 1;
    }
    if j == start {
        return 0;
    }
    if j + 1 < n && s[j] == b'.' && is_digit(s[j + 1]) {
        j += 2;
        while j < n && is_digit(s[j]) {
            j += 1;
        }
    }
    if j + 1 < n && (s[j] == b'e' || s[j] == b'E') {
        let mut k = j + 1;
        if k + 1 < n && (s[k] == b'+' || s[k] == b'-') {
            k += 1;
        }
        if k < n && is_digit(s[k]) {
            while k < n && is_digit(s[k]) {
                k += 1;
            }
            if ends_token(s, k) {
                j = k;
            }
        }
    }
    j
}

/// Appends the template of msg to dst.
pub fn append_template(dst: &mut Vec<u8>, msg: &[u8]) {
    let n = msg.len();
    let mut i = 0;
    while i < n {
        let c = msg[i];
        if i > 0 && is_word(msg[i - 1]) {
            dst.push(c);
            i += 1;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let j = match_quoted(msg, i);
            if j > 0 {
                dst.extend_from_slice(b"<str>");
                i = j;
                continue;
            }
        }
        if is_hex(c) || c == b':' {
            let mut j = i;
            let mut nd = 0;
            while j < n && is_hex(msg[j]) {
                nd += is_digit(msg[j]) as usize;
                j += 1;
            }
            let len = j - i;
            let nx = if j < n { msg[j] } else { 0 };
            let mut k = 0;
            if len == 8 && nx == b'-' {
                k = match_uuid(msg, i);
                if k > 0 {
                    dst.extend_from_slice(b"<uuid>");
                }
            } else if len > 0 && len <= 3 && nx == b'.' && nd == len {
                k = match_ipv4(msg, i);
                if k > 0 {
                    dst.extend_from_slice(b"<ip>");
                }
            }
            if k == 0 && len <= 4 && nx == b':' {
                k = match_ipv6(msg, i);
                if k > 0 {
                    dst.extend_from_slice(b"<ip>");
                }
            }
            if k == 0 {
                k = match_hex(msg, i, j, nd);
                if k > 0 {
                    dst.extend_from_slice(b"<hex>");
                }
            }
            if k > 0 {
                i = k;
                continue;
            }
        }
        let j = match_number(msg, i);
        if j > 0 {
            dst.extend_from_slice(b"<num>");
            i = j;
            continue;
        }
        if is_word(c) {
            let mut j = i + 1;
            while j < n && (is_word(msg[j]) || (msg[j] == b'.' && j + 1 < n && is_word(msg[j + 1]))) {
                j += 1;
            }
            dst.extend_from_slice(&msg[i..j]);
            i = j;
            continue;
        }
        dst.push(c);
        i += 1;
    }
}

/// The 64-bit FNV-1a hash of p.
pub fn fingerprint(p: &[u8]) -> u64 {
    let mut h: u64 = 14695981039346656037;
    for &b in p {
        h ^= b as u64;
        h = h.wrapping_mul(1099511628211);
    }
    h
}

// ---- the line --------------------------------------------------------------------

#[derive(Default)]
struct Field {
    val: Vec<u8>,
    is_str: bool, // a decoded string; otherwise raw JSON
    set: bool,    // present and not null
}

/// A field as text: a string as decoded, anything else compacted.
fn text(f: &Field) -> Vec<u8> {
    if f.is_str || f.val.is_empty() || (f.val[0] != b'{' && f.val[0] != b'[') {
        return f.val.clone();
    }
    compact(&f.val)
}

/// Parses value, a JSON object, into e, or returns why it cannot.
pub fn normalize(value: &[u8], kafka_ts_millis: i64, e: &mut Entry) -> Result<(), String> {
    let mut s = Scanner { p: value, i: 0 };
    let n = value.len();
    e.attrs.clear();
    let (mut ts, mut level, mut service, mut msg) = (Field::default(), Field::default(), Field::default(), Field::default());
    s.ws();
    if !s.peek_is(b'{') {
        return Err("value is not a JSON object".to_string());
    }
    s.i += 1;
    if !s.next(b'}') {
        loop {
            s.ws();
            if !s.peek_is(b'"') {
                return s.fail("expected a string key");
            }
            let key = s.str()?;
            if !s.next(b':') {
                return s.fail("expected ':'");
            }
            let mut f = Field::default();
            s.ws();
            if s.peek_is(b'"') {
                f.is_str = true;
                f.val = s.str()?;
            } else {
                let (a, z) = s.skip(0)?;
                f.val = value[a..z].to_vec();
            }
            f.set = f.is_str || f.val != b"null";
            match &key[..] {
                b"ts" => ts = f,
                b"level" => level = f,
                b"service" => service = f,
                b"msg" => msg = f,
                _ => {
                    let v = if !f.is_str && !f.val.is_empty() && (f.val[0] == b'{' || f.val[0] == b'[') { compact(&f.val) } else { f.val };
                    e.attrs.push((key, v));
                }
            }
            if s.next(b',') {
                continue;
            }
            if s.next(b'}') {
                break;
            }
            return s.fail("expected ',' or '}'");
        }
    }
    s.ws();
    if s.i != n {
        return s.fail("unexpected data after the object");
    }
    if !msg.set {
        return Err("log line has no \"msg\" field (or it is null)".to_string());
    }
    e.msg = text(&msg);

    if !ts.set {
        e.time = kafka_ts_millis.div_euclid(1000);
    } else {
        let t = if ts.is_str { parse_time(&ts.val) } else { parse_epoch(&ts.val) };
        match t {
            Some(t) => e.time = t,
            None => {
                let mut b = b"ts ".to_vec();
                if ts.is_str {
                    quote(&mut b, &ts.val);
                } else {
                    b.extend_from_slice(&ts.val);
                }
                b.extend_from_slice(b" is neither RFC 3339 nor a number of (milli)seconds since the epoch");
                return Err(text_of(b));
            }
        }
    }

    e.level = if !level.set {
        "info"
    } else if level.is_str {
        normalize_level(&level.val)
    } else if !level.val.is_empty() && (level.val[0] == b'-' || level.val[0].is_ascii_digit()) {
        numeric_level(&level.val)
    } else {
        "unknown"
    };

    e.service.clear();
    if service.set && !service.val.is_empty() {
        e.service = text(&service);
    } else {
        e.service.extend_from_slice(b"unknown");
    }

    e.template.clear();
    append_template(&mut e.template, &e.msg);
    e.fingerprint = fingerprint(&e.template);

    if e.attrs.len() > 1 {
        e.attrs.sort_by(|a, b| a.0.cmp(&b.0)); // stable: equal keys keep input order
        // Of equal keys, keep the last.
        let mut kept: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(e.attrs.len());
        for a in std::mem::take(&mut e.attrs) {
            if kept.last().map_or(false, |last| last.0 == a.0) {
                kept.pop();
            }
            kept.push(a);
        }
        e.attrs = kept;
    }
    Ok(())
}
