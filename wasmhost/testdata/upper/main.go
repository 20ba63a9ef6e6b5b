// Command upper is the byte-loop module of the deadline benchmarks: it
// writes each record as a row of the adv table (offset UInt64, value String)
// with the value's ASCII letters upper-cased, a loop over every byte.
package main

import sluice "github.com/sluicehq/sluice/guest-sdk/go"

func init() { sluice.Run(&module{}) }

func main() {}

type module struct {
	adv *sluice.Table
	buf []byte
}

func (m *module) Init(cfg *sluice.Config) (err error) {
	if m.adv, err = cfg.Table("adv"); err != nil {
		return err
	}
	return m.adv.Expect(sluice.Col("offset", "UInt64"), sluice.Col("value", "String"))
}

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	m.buf = append(m.buf[:0], rec.Value...)
	for i, c := range m.buf {
		if 'a' <= c && c <= 'z' {
			m.buf[i] = c - ('a' - 'A')
		}
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(m.buf).End()
}
