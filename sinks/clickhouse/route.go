package clickhouse

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/go-faster/city"

	"github.com/sluicehq/sluice/internal/chsql"
	"github.com/sluicehq/sluice/internal/chtype"
)

// distributedEngine is a Distributed table's engine arguments:
// Distributed(cluster, database, table[, sharding_key[, policy]]).
type distributedEngine struct {
	Cluster, Database, Table string
	// ShardingKey is the key expression as the server prints it; "" if the
	// table has none (then the cluster must have one shard).
	ShardingKey string
}

// parseDistributed reads the arguments of a Distributed engine from
// system.tables.engine_full, e.g. "Distributed(two, default, loc,
// cityHash64(s))" or "Distributed('two', currentDatabase(), 'loc', rand())
// SETTINGS …". currentDatabase() resolves to ownDB, the Distributed
// table's database.
func parseDistributed(engineFull, ownDB string) (distributedEngine, error) {
	var d distributedEngine
	s := strings.TrimSpace(engineFull)
	if !strings.HasPrefix(s, "Distributed(") {
		return d, fmt.Errorf("engine %q is not Distributed", engineFull)
	}
	end := chsql.ClosingParen(s, len("Distributed"))
	if end < 0 {
		return d, fmt.Errorf("engine %q: unbalanced parentheses", engineFull)
	}
	args := chsql.SplitTopLevel(s[len("Distributed("):end])
	if len(args) < 3 || len(args) > 5 {
		return d, fmt.Errorf("engine %q: want Distributed(cluster, database, table[, sharding_key[, policy]])", engineFull)
	}
	names := make([]string, 3)
	for i := range names {
		v, err := engineArgName(args[i])
		if err != nil {
			return d, fmt.Errorf("engine %q argument %d: %w", engineFull, i+1, err)
		}
		names[i] = v
	}
	d.Cluster, d.Database, d.Table = names[0], names[1], names[2]
	if d.Database == "currentDatabase()" {
		d.Database = ownDB
	}
	if len(args) >= 4 {
		d.ShardingKey = strings.TrimSpace(args[3])
	}
	return d, nil
}

// engineArgName reads an identifier or string literal engine argument.
func engineArgName(a string) (string, error) {
	a = strings.TrimSpace(a)
	if a == "currentDatabase()" {
		return a, nil
	}
	if a != "" && (a[0] == '\'' || a[0] == '`' || a[0] == '"') {
		v, end := chsql.Unquote(a, 0)
		if end != len(a) {
			return "", fmt.Errorf("%q is not a name", a)
		}
		if v == "" {
			return "", fmt.Errorf("empty name")
		}
		return v, nil
	}
	for _, r := range a {
		if !(r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return "", fmt.Errorf("%q is not a name", a)
		}
	}
	if a == "" {
		return "", fmt.Errorf("empty name")
	}
	return a, nil
}

// keyKind is how a routed row's sharding key value is computed.
type keyKind int

const (
	// keyNone: the Distributed table has no key; its cluster has one shard.
	keyNone keyKind = iota
	// keyRand: rand(), a random UInt32 per row.
	keyRand
	// keyColumn: a bare integer column's value.
	keyColumn
	// keyCityHash: cityHash64 of one column.
	keyCityHash
)

// keyEncoding is how the key column's value is laid out in RowBinary.
type keyEncoding int

const (
	encInt    keyEncoding = iota // little-endian integer of width bytes
	encString                    // uvarint length + bytes
	encFixed                     // width raw bytes (FixedString)
)

// route picks the shard of each row the way a Distributed table does: the
// sharding key's value modulo the sum of the shard weights, mapped onto
// the shards' weight ranges in shard order.
type route struct {
	keyExpr string
	kind    keyKind
	keyCol  int // index in Table.Insert
	enc     keyEncoding
	width   int // encInt, encFixed: bytes
	// fixedOffset is the key's offset in every row when the columns before
	// it are fixed-width, else -1 and skip walks them.
	fixedOffset int
	skip        []*chtype.Type
	before      []Column // the columns skip walks
	// slots maps key % len(slots) to a part (shard index).
	slots  []uint16
	table  string
	column Column
}

// newRoute parses a sharding key expression against the Distributed
// table's insert columns. Supported: rand(), a bare integer column, and
// cityHash64 of one String, FixedString, integer, Date or DateTime column.
func newRoute(table string, insert []Column, keyExpr string, weights []int) (*route, error) {
	r := &route{keyExpr: keyExpr, fixedOffset: -1, table: table}
	total := 0
	for i, w := range weights {
		for range w {
			r.slots = append(r.slots, uint16(i))
		}
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("the shards' weights sum to 0")
	}
	expr := strings.Join(strings.Fields(keyExpr), "")
	unsupported := func(why string) error {
		return fmt.Errorf("sharding key %q: %s; routing shards supports rand(), an integer column and cityHash64(column) of a String, FixedString, integer, Date or DateTime column (use routing distributed for other keys)", keyExpr, why)
	}
	var colName string
	switch {
	case expr == "":
		if len(weights) > 1 {
			return nil, fmt.Errorf("the Distributed table has no sharding key and its cluster has %d shards", len(weights))
		}
		r.kind = keyNone
		return r, nil
	case expr == "rand()":
		r.kind = keyRand
		return r, nil
	case strings.HasPrefix(expr, "cityHash64(") && strings.HasSuffix(expr, ")"):
		r.kind = keyCityHash
		colName = expr[len("cityHash64(") : len(expr)-1]
	default:
		r.kind = keyColumn
		colName = expr
	}
	name, err := engineArgName(colName)
	if err != nil || name == "currentDatabase()" {
		return nil, unsupported("not a single column")
	}
	r.keyCol = -1
	for i, c := range insert {
		if c.Name == name {
			r.keyCol = i
			r.column = c
		}
	}
	if r.keyCol < 0 {
		return nil, unsupported(fmt.Sprintf("column %s is not an insertable column of the table", name))
	}
	typ := strings.TrimSpace(r.column.Type)
	t, err := chtype.Parse(typ)
	if err != nil {
		return nil, err
	}
	switch k := t.Kind; {
	case t.LowCardinality && (k != chtype.String || t.JSON):
		return nil, unsupported("column type " + typ)
	case k >= chtype.UInt8 && k <= chtype.Int64, k == chtype.Date, k == chtype.DateTime:
		r.enc = encInt
	case k == chtype.FixedString:
		r.enc = encFixed
	case k == chtype.String && !t.JSON:
		r.enc = encString
	default:
		return nil, unsupported("column type " + typ)
	}
	r.width = t.Width()
	if r.kind == keyColumn && (r.enc != encInt || t.Kind == chtype.Date || t.Kind == chtype.DateTime) {
		// A Distributed table only takes a key that evaluates to an integer.
		return nil, unsupported("a bare key column must be an integer, not " + typ)
	}
	r.before = insert[:r.keyCol]
	off := 0
	for _, c := range r.before {
		t, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, err
		}
		r.skip = append(r.skip, t)
		if w := t.Width(); w > 0 && off >= 0 {
			off += w
		} else {
			off = -1
		}
	}
	r.fixedOffset = off
	return r, nil
}

// partOf returns the part (shard index) of a RowBinary row.
func (r *route) partOf(row []byte, seed *uint64) (int, error) {
	if len(r.slots) == 1 || r.kind == keyNone {
		return int(r.slots[0]), nil
	}
	v, err := r.keyValue(row, seed)
	if err != nil {
		return 0, err
	}
	return int(r.slots[v%uint64(len(r.slots))]), nil
}

// keyValue is the sharding key's value for a row, as the Distributed
// table computes it.
func (r *route) keyValue(row []byte, seed *uint64) (uint64, error) {
	switch r.kind {
	case keyNone:
		return 0, nil
	case keyRand:
		return uint64(uint32(splitmix64(seed))), nil
	}
	key, err := r.keyBytes(row)
	if err != nil {
		return 0, err
	}
	switch {
	case r.kind == keyCityHash && r.enc == encInt:
		return cityHash64Int(littleEndian(key)), nil
	case r.kind == keyCityHash:
		return cityHash64String(key), nil
	}
	return littleEndian(key), nil
}

// keyBytes finds the key column's value in a row: the integer's bytes or
// the string's content.
func (r *route) keyBytes(row []byte) ([]byte, error) {
	pos := r.fixedOffset
	if pos < 0 {
		pos = 0
		for i, t := range r.skip {
			n, err := t.Skip(row[pos:])
			if err != nil {
				return nil, &RowError{Table: r.table, Column: r.before[i].Name, Type: r.before[i].Type, Err: err}
			}
			pos += n
		}
	}
	rest := row[min(pos, len(row)):]
	bad := func(err error) error {
		return &RowError{Table: r.table, Column: r.column.Name, Type: r.column.Type, Err: err}
	}
	switch r.enc {
	case encString:
		n, err := chtype.StringLen(rest)
		if err != nil {
			return nil, bad(err)
		}
		_, k := binary.Uvarint(rest)
		return rest[k:n], nil
	default:
		if len(rest) < r.width {
			return nil, bad(errShort)
		}
		return rest[:r.width], nil
	}
}

// littleEndian reads up to 8 bytes as an unsigned integer, zero-extended:
// ClickHouse widens a signed key to its unsigned type of the same width
// before it takes the modulo, and bit-casts it the same way before hashing.
func littleEndian(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// cityHash64Int is ClickHouse's cityHash64 of one integer (or Date,
// DateTime) argument. ClickHouse does not hash an integer's bytes: it
// applies IntHash64Impl, intHash64(x ^ 0x4CF2D2BAAE6DA887), to the value
// zero-extended to 64 bits (checked against 18.16 for every width, see
// TestCityHash64MatchesServer).
func cityHash64Int(x uint64) uint64 {
	x ^= 0x4CF2D2BAAE6DA887
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// cityHash64String is ClickHouse's cityHash64 of one String or FixedString
// value: CityHash64 v1.0.2 of its bytes.
func cityHash64String(s []byte) uint64 { return city.CH64(s) }

// splitmix64 advances a per-block generator for rand() keys.
func splitmix64(state *uint64) uint64 {
	*state += 0x9e3779b97f4a7c15
	z := *state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
