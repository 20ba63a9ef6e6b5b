package sluice

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// wantOf is want for a family of kinds (the Decimals, the wide integers,
// the date and time types): it checks that the next value is one of them,
// writing the not-null marker of a Nullable on the way, and returns its
// type, or nil after recording a mismatch.
func (r *Row) wantOf(ok func(chtype.Kind) bool, what string) *chtype.Type {
	if r.o.err != nil {
		return nil
	}
	t := r.cur
	switch {
	case t != nil && ok(t.Kind):
		return t
	case t != nil && t.Kind == chtype.Nullable && ok(t.Elem.Kind):
		r.o.buf = append(r.o.buf, 0)
		r.cur = t.Elem
		return r.cur
	}
	r.mismatch(what)
	return nil
}

func (r *Row) failValue(format string, args ...any) {
	c := &r.t.Columns[r.col]
	r.o.fail(fmt.Errorf("sluice: table %q, column %q (%s): %s", r.t.Name, c.Name, c.Type, fmt.Sprintf(format, args...)))
}

// Int128 writes an Int128 from its low and high 64 bits (two's complement).
func (r *Row) Int128(lo uint64, hi int64) *Row {
	if r.want(chtype.Int128) {
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, lo)
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, uint64(hi))
		r.advance()
	}
	return r
}

// UInt128 writes a UInt128 from its low and high 64 bits.
func (r *Row) UInt128(lo, hi uint64) *Row {
	if r.want(chtype.UInt128) {
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, lo)
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, hi)
		r.advance()
	}
	return r
}

func isBigInt(k chtype.Kind) bool {
	return k == chtype.Int128 || k == chtype.UInt128 || k == chtype.Int256 || k == chtype.UInt256
}

func isDecimal(k chtype.Kind) bool {
	return k == chtype.Decimal32 || k == chtype.Decimal64 || k == chtype.Decimal128 || k == chtype.Decimal256
}

var decimalWidth = map[chtype.Kind]int{chtype.Decimal32: 4, chtype.Decimal64: 8, chtype.Decimal128: 16, chtype.Decimal256: 32}

// BigInt writes an Int128, UInt128, Int256 or UInt256. A value outside the
// type's range fails the record.
func (r *Row) BigInt(v *big.Int) *Row {
	t := r.wantOf(isBigInt, "BigInt")
	if t == nil {
		return r
	}
	signed := t.Kind == chtype.Int128 || t.Kind == chtype.Int256
	if !r.putBig(v, t.Size, signed) {
		r.failValue("%v is out of range", v)
		return r
	}
	r.advance()
	return r
}

// putBig appends v as a width-byte little-endian integer (two's complement
// when signed), reporting false when it does not fit.
func (r *Row) putBig(v *big.Int, width int, signed bool) bool {
	bits := 8 * width
	if v == nil || !signed && v.Sign() < 0 || v.BitLen() > bits || signed && v.BitLen() == bits &&
		(v.Sign() > 0 || new(big.Int).Neg(v).BitLen() != bits || new(big.Int).Neg(v).TrailingZeroBits() != uint(bits-1)) {
		return false
	}
	x := v
	if v.Sign() < 0 {
		x = new(big.Int).Lsh(big.NewInt(1), uint(bits))
		x.Add(x, v)
	}
	var be [32]byte
	x.FillBytes(be[:width])
	for i := width - 1; i >= 0; i-- {
		r.o.buf = append(r.o.buf, be[i])
	}
	return true
}

var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// Decimal writes a Decimal(P, S) (Decimal32 … Decimal256) from its
// unscaled value: 1234 is 12.34 in a Decimal(9, 2). A Decimal(P, S) holds
// P digits, as ClickHouse reads them from text: a value of more than P
// digits fails the record (1000000000 in a Decimal(9, 2); 999999999,
// 9999999.99, lands). ParseDecimal reads the value from text.
func (r *Row) Decimal(unscaled int64) *Row {
	t := r.wantOf(isDecimal, "Decimal")
	if t == nil {
		return r
	}
	if t.Size < 19 && (unscaled >= pow10[t.Size] || unscaled <= -pow10[t.Size]) {
		r.failValue("unscaled value %d has more than %d digits", unscaled, t.Size)
		return r
	}
	width := decimalWidth[t.Kind]
	if width == 4 {
		r.o.buf = binary.LittleEndian.AppendUint32(r.o.buf, uint32(int32(unscaled)))
	} else {
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, uint64(unscaled))
		for i := 8; i < width; i++ { // sign extension
			r.o.buf = append(r.o.buf, byte(unscaled>>63))
		}
	}
	r.advance()
	return r
}

// DecimalBig writes a Decimal of any width from its unscaled value; a
// value of more than P digits fails the record. ParseDecimalBig reads the
// value from text.
func (r *Row) DecimalBig(unscaled *big.Int) *Row {
	t := r.wantOf(isDecimal, "Decimal")
	if t == nil {
		return r
	}
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Size)), nil)
	if unscaled == nil || new(big.Int).Abs(unscaled).Cmp(limit) >= 0 {
		r.failValue("unscaled value %v has more than %d digits", unscaled, t.Size)
		return r
	}
	r.putBig(unscaled, decimalWidth[t.Kind], true)
	r.advance()
	return r
}

// The ranges of the date and time types, as ClickHouse documents them.
var (
	dateTimeMin   = time.Unix(0, 0).UTC()
	dateTimeMax   = time.Unix(math.MaxUint32, 0).UTC() // 2106-02-07 06:28:15
	dateMax       = time.Unix(math.MaxUint16*86400, 0).UTC()
	extendedMin   = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC) // Date32, DateTime64
	extendedMax   = time.Date(2299, 12, 31, 23, 59, 59, 999999999, time.UTC)
	nanosecondMax = time.Unix(0, math.MaxInt64).UTC() // DateTime64(9): 2262-04-11 23:47:16.854775807
)

func isTime(k chtype.Kind) bool {
	return k == chtype.Date || k == chtype.Date32 || k == chtype.DateTime || k == chtype.DateTime64
}

// Time writes t to a Date, Date32, DateTime or DateTime64 column (or a
// Nullable of one), checking the type's range: a time outside it — the
// zero time.Time, a timestamp in the wrong unit — fails the record instead
// of landing as some other date. Dates are t's day in UTC. DateTime64(P)
// keeps t to P digits after the second and cuts the rest, as ClickHouse
// cuts the same time's text: that is, it rounds down to the earlier tick,
// before 1970 too (1969-12-31 23:59:59.9995 is 23:59:59.999, tick -1, in a
// DateTime64(3), not 1970-01-01, as rounding the tick count toward zero
// would give). The column's time zone only affects how ClickHouse shows
// the value.
func (r *Row) Time(t time.Time) *Row {
	typ := r.wantOf(isTime, "time")
	if typ == nil {
		return r
	}
	lo, hi := dateTimeMin, dateTimeMax
	switch typ.Kind {
	case chtype.Date:
		hi = dateMax.Add(24*time.Hour - 1)
	case chtype.Date32:
		lo, hi = extendedMin, extendedMax
	case chtype.DateTime64:
		lo, hi = extendedMin, extendedMax
		if typ.Scale == 9 && nanosecondMax.Before(hi) {
			hi = nanosecondMax
		}
	}
	if t.Before(lo) || t.After(hi) {
		r.failValue("time %s is outside the type's range %s … %s",
			t.UTC().Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
		return r
	}
	sec := t.Unix()
	days := sec / 86400
	if sec < 0 && sec%86400 != 0 {
		days--
	}
	switch typ.Kind {
	case chtype.Date:
		r.o.buf = binary.LittleEndian.AppendUint16(r.o.buf, uint16(days))
	case chtype.Date32:
		r.o.buf = binary.LittleEndian.AppendUint32(r.o.buf, uint32(int32(days)))
	case chtype.DateTime:
		r.o.buf = binary.LittleEndian.AppendUint32(r.o.buf, uint32(sec))
	case chtype.DateTime64:
		ticks := sec*pow10[typ.Scale] + int64(t.Nanosecond())/pow10[9-typ.Scale]
		r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, uint64(ticks))
	}
	r.advance()
	return r
}
