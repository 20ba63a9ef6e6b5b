package chvalue

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/chtype"
)

// Decode decodes the value at the front of b and returns it with its size.
// Values are Go values: the integer and float types of their width, string
// for String, JSON and FixedString, bool, time.Time (UTC) for Date, Date32,
// DateTime and DateTime64, a canonical UUID string, the name of an enum
// value, netip.Addr for IPv4 and IPv6, nil for NULL, []any for arrays and
// tuples, [][2]any (key, value) for maps, *big.Int for Int128 … UInt256 and
// the decimal text ("-12.34") for Decimals.
func Decode(t *chtype.Type, b []byte) (any, int, error) {
	if w := t.Width(); w > 0 {
		if len(b) < w {
			return nil, 0, chtype.ErrShort
		}
		if t.Checked() {
			if err := t.Check(b); err != nil {
				return nil, 0, err
			}
		}
		return fixed(t, b[:w]), w, nil
	}
	switch t.Kind {
	case chtype.String:
		n, err := chtype.StringLen(b)
		if err != nil {
			return nil, 0, err
		}
		_, k := binary.Uvarint(b)
		return string(b[k:n]), n, nil
	case chtype.Nullable:
		null, err := chtype.NullFlag(b)
		if err != nil || null {
			return nil, 1, err
		}
		v, n, err := Decode(t.Elem, b[1:])
		return v, n + 1, err
	case chtype.Array, chtype.Map, chtype.Tuple:
		n, pos, err := t.Count(b)
		if err != nil {
			return nil, 0, err
		}
		vals := make([]any, 0, n*len(t.Seq))
		for range n {
			for _, e := range t.Seq {
				v, m, err := Decode(e, b[pos:])
				if err != nil {
					return nil, 0, err
				}
				vals = append(vals, v)
				pos += m
			}
		}
		if t.Kind != chtype.Map {
			return vals, pos, nil
		}
		pairs := make([][2]any, n)
		for i := range pairs {
			pairs[i] = [2]any{vals[2*i], vals[2*i+1]}
		}
		return pairs, pos, nil
	}
	return nil, 0, fmt.Errorf("type %s cannot be decoded", t.Text)
}

// fixed decodes a checked value of a fixed-width type.
func fixed(t *chtype.Type, b []byte) any {
	le := binary.LittleEndian
	switch t.Kind {
	case chtype.UInt8:
		return b[0]
	case chtype.UInt16:
		return le.Uint16(b)
	case chtype.UInt32:
		return le.Uint32(b)
	case chtype.UInt64:
		return le.Uint64(b)
	case chtype.Int8:
		return int8(b[0])
	case chtype.Int16:
		return int16(le.Uint16(b))
	case chtype.Int32:
		return int32(le.Uint32(b))
	case chtype.Int64:
		return int64(le.Uint64(b))
	case chtype.Float32:
		return math.Float32frombits(le.Uint32(b))
	case chtype.Float64:
		return math.Float64frombits(le.Uint64(b))
	case chtype.Bool:
		return b[0] == 1
	case chtype.FixedString:
		return string(b)
	case chtype.Date:
		return time.Unix(int64(le.Uint16(b))*86400, 0).UTC()
	case chtype.Date32:
		return time.Unix(int64(int32(le.Uint32(b)))*86400, 0).UTC()
	case chtype.DateTime:
		return time.Unix(int64(le.Uint32(b)), 0).UTC()
	case chtype.DateTime64:
		unit := int64(1)
		for range 9 - t.Scale {
			unit *= 10
		}
		perSec := 1_000_000_000 / unit
		ticks := int64(le.Uint64(b))
		return time.Unix(ticks/perSec, ticks%perSec*unit).UTC()
	case chtype.UUID:
		// Two little-endian halves, high first.
		var u [16]byte
		binary.BigEndian.PutUint64(u[:8], le.Uint64(b))
		binary.BigEndian.PutUint64(u[8:], le.Uint64(b[8:]))
		h := hex.EncodeToString(u[:])
		return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	case chtype.Enum8:
		name, _ := t.EnumName(int16(int8(b[0])))
		return name
	case chtype.Enum16:
		name, _ := t.EnumName(int16(le.Uint16(b)))
		return name
	case chtype.IPv4:
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], le.Uint32(b))
		return netip.AddrFrom4(a)
	case chtype.IPv6:
		return netip.AddrFrom16([16]byte(b))
	case chtype.Int128, chtype.UInt128, chtype.Int256, chtype.UInt256:
		return littleEndianInt(b, t.Kind.Signed())
	}
	return decimalText(littleEndianInt(b, true), t.Scale) // the Decimal kinds
}

// littleEndianInt reads a two's complement (signed) or unsigned
// little-endian integer.
func littleEndianInt(b []byte, signed bool) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	n := new(big.Int).SetBytes(be)
	if signed && len(b) > 0 && b[len(b)-1]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n
}

// decimalText writes the unscaled value n with scale digits after the
// point.
func decimalText(n *big.Int, scale int) string {
	s := new(big.Int).Abs(n).String()
	if scale > 0 {
		if len(s) <= scale {
			s = strings.Repeat("0", scale-len(s)+1) + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if n.Sign() < 0 {
		s = "-" + s
	}
	return s
}
