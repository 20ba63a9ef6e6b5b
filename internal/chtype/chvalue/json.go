package chvalue

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/chtype"
)

// JSON turns a value Decode returned into one that encoding/json
// renders as the server shows it: dates and times as text in the type's
// time zone (UTC when it names none or an unknown one), Decimals and
// integers too wide for JSON as their text, a NaN or infinity as "nan",
// "inf" or "-inf", a JSON value as the JSON it is, a map as [key, value]
// pairs in the row's order.
func JSON(t *chtype.Type, v any) any {
	if v == nil {
		return nil
	}
	switch t.Kind {
	case chtype.Float32:
		return jsonFloat(float64(v.(float32)))
	case chtype.Float64:
		return jsonFloat(v.(float64))
	case chtype.String:
		if s := v.(string); t.JSON && json.Valid([]byte(s)) {
			return json.RawMessage(s)
		}
	case chtype.Date, chtype.Date32:
		return v.(time.Time).Format(time.DateOnly)
	case chtype.DateTime, chtype.DateTime64:
		tm := v.(time.Time).In(location(t))
		s := tm.Format(time.DateTime)
		if t.Kind == chtype.DateTime64 && t.Scale > 0 {
			s += fmt.Sprintf(".%09d", tm.Nanosecond())[:t.Scale+1]
		}
		return s
	case chtype.IPv4, chtype.IPv6:
		return v.(netip.Addr).String()
	case chtype.Int128, chtype.UInt128, chtype.Int256, chtype.UInt256:
		n := v.(*big.Int)
		switch {
		case n.IsInt64():
			return n.Int64()
		case n.IsUint64():
			return n.Uint64()
		}
		return n.String()
	case chtype.Nullable:
		return JSON(t.Elem, v)
	case chtype.Array, chtype.Tuple:
		in := v.([]any)
		out := make([]any, len(in))
		for i, e := range in {
			out[i] = JSON(t.Seq[i%len(t.Seq)], e)
		}
		return out
	case chtype.Map:
		in := v.([][2]any)
		out := make([][2]any, len(in))
		for i, kv := range in {
			out[i] = [2]any{JSON(t.Key, kv[0]), JSON(t.Elem, kv[1])}
		}
		return out
	}
	return v
}

// locations caches time.LoadLocation, which reads the zone's file on every
// call, by zone name.
var locations sync.Map

func location(t *chtype.Type) *time.Location {
	if t.TZ == "" {
		return time.UTC
	}
	if loc, ok := locations.Load(t.TZ); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(t.TZ)
	if err != nil {
		loc = time.UTC
	}
	locations.Store(t.TZ, loc)
	return loc
}

// jsonFloat keeps NaN and infinities, which JSON cannot carry, as strings.
func jsonFloat(f float64) any {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return f
}
