// Command conformance is the Go SDK's conformance module: it runs the
// script each record carries (guest-sdk/conformance/README.md) with the
// SDK's row writer, so that the suite's vectors test the SDK and not a
// module's logic.
package main

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

func main() {}

type module struct{ tables []*sluice.Table }

// Init refuses when the parameter refuse says so, and checks the table
// named by expect against the columns "name Type|name Type…".
func (m *module) Init(cfg *sluice.Config) error {
	if msg, ok := cfg.Param("refuse"); ok {
		return errors.New(msg)
	}
	if name, ok := cfg.Param("expect"); ok {
		t, err := cfg.Table(name)
		if err != nil {
			return err
		}
		spec, _ := cfg.Param("columns")
		var cols []sluice.Column
		for _, c := range strings.Split(spec, "|") {
			n, typ, _ := strings.Cut(c, " ")
			cols = append(cols, sluice.Col(n, typ))
		}
		if err := t.Expect(cols...); err != nil {
			return err
		}
	}
	m.tables = cfg.Tables
	return nil
}

// script reads the operands of a record's script.
type script struct{ p []byte }

func (s *script) u16() uint16 { v := binary.LittleEndian.Uint16(s.p); s.p = s.p[2:]; return v }
func (s *script) u32() uint32 { v := binary.LittleEndian.Uint32(s.p); s.p = s.p[4:]; return v }
func (s *script) u64() uint64 { v := binary.LittleEndian.Uint64(s.p); s.p = s.p[8:]; return v }
func (s *script) bytes() []byte {
	n := s.u32()
	b := s.p[:n]
	s.p = s.p[n:]
	return b
}
func (s *script) fixed(n int) []byte { b := s.p[:n]; s.p = s.p[n:]; return b }

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	s := &script{p: rec.Value}
	var w *sluice.Row
	for len(s.p) > 0 {
		op := s.p[0]
		s.p = s.p[1:]
		switch op {
		case 'R':
			w = out.Row(m.tables[s.u16()])
		case 'E':
			w.End()
		case 'X':
			return errors.New(string(s.bytes()))
		case 'N':
			w.Null()
		case 'n':
			w.NotNull()
		case 'A':
			w.BeginArray(int(s.u32()))
		case 'a':
			w.UInt8(s.fixed(1)[0])
		case 'b':
			w.UInt16(s.u16())
		case 'c':
			w.UInt32(s.u32())
		case 'd':
			w.UInt64(s.u64())
		case 'e':
			w.Int8(int8(s.fixed(1)[0]))
		case 'f':
			w.Int16(int16(s.u16()))
		case 'g':
			w.Int32(int32(s.u32()))
		case 'h':
			w.Int64(int64(s.u64()))
		case 'i':
			w.Float32(math.Float32frombits(s.u32()))
		case 'j':
			w.Float64(math.Float64frombits(s.u64()))
		case 's':
			w.Bytes(s.bytes())
		case 'x':
			w.FixedString(s.bytes())
		case 'D':
			w.Date(s.u16())
		case 'T':
			w.DateTime(s.u32())
		case 't':
			w.DateTime64(int64(s.u64()))
		case 'B':
			w.Bool(s.fixed(1)[0] != 0)
		case 'U':
			w.UUID([16]byte(s.fixed(16)))
		case 'm':
			w.Enum8(int8(s.fixed(1)[0]))
		case 'M':
			w.Enum16(int16(s.u16()))
		case 'v':
			w.IPv4([4]byte(s.fixed(4)))
		case 'V':
			w.IPv6([16]byte(s.fixed(16)))
		case 'K':
			w.Bytes(rec.Key)
		case 'O':
			w.Int64(rec.Offset)
		case 'P':
			w.Int32(rec.Partition)
		case 'S':
			w.Int64(rec.Timestamp)
		case 'Q':
			w.String(rec.Topic)
		case 'H':
			if v, ok := rec.Header(string(s.bytes())); ok {
				w.NotNull().Bytes(v)
			} else {
				w.Null()
			}
		case 'L':
			v := make([]string, s.u32())
			for i := range v {
				v[i] = string(s.bytes())
			}
			w.ArrayString(v)
		case 'I':
			v := make([]int64, s.u32())
			for i := range v {
				v[i] = int64(s.u64())
			}
			w.ArrayInt64(v)
		case 'W':
			v := make([]uint64, s.u32())
			for i := range v {
				v[i] = s.u64()
			}
			w.ArrayUInt64(v)
		default:
			return errors.New("conformance: unknown op " + string(rune(op)))
		}
	}
	return nil
}
