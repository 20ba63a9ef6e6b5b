// Command module is the quotes example's sluice module: each Kafka record
// is one quote (JSON, package quote), written as one row of the raw table
// and one row of the end-of-day table, whose SummingMergeTree folds the
// rows of a symbol and day into their count and the sums of their mid
// prices and spreads (../schema.sql). It is a WASI reactor: build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o quotes.wasm .
//
// The tables are "quotes" and "quotes_eod" unless the module parameters
// "raw_table" and "eod_table" name others. A record that is not a valid
// quote is dead-lettered with the reason, and neither of its rows written.
package main

import (
	"fmt"

	"github.com/sluicehq/sluice/examples/quotes/module/quote"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

// main is never run in a reactor module; init registers the handler.
func main() {}

// The columns of the two tables, as system.columns spells their types.
var (
	rawColumns = []sluice.Column{
		sluice.Col("symbol", "LowCardinality(String)"),
		sluice.Col("ts", "DateTime64(3, 'UTC')"),
		sluice.Col("bid", "Decimal(18, 4)"),
		sluice.Col("ask", "Decimal(18, 4)"),
		sluice.Col("say", "String"),
		sluice.Col("kafka_partition", "Int32"),
		sluice.Col("kafka_offset", "Int64"),
	}
	eodColumns = []sluice.Column{
		sluice.Col("symbol", "LowCardinality(String)"),
		sluice.Col("day", "Date"),
		sluice.Col("quotes", "UInt64"),
		sluice.Col("mid_sum", "Decimal(38, 5)"),
		sluice.Col("spread_sum", "Decimal(38, 4)"),
	}
)

type module struct {
	raw, eod *sluice.Table
	q        quote.Quote // reused for every record
}

// Init finds both tables and refuses a schema other than schema.sql's.
func (m *module) Init(cfg *sluice.Config) (err error) {
	find := func(param, def string, cols []sluice.Column) (*sluice.Table, error) {
		name, ok := cfg.Param(param)
		if !ok {
			name = def
		}
		t, err := cfg.Table(name)
		if err != nil {
			return nil, err
		}
		if err := t.Expect(cols...); err != nil {
			return nil, fmt.Errorf("the quotes module needs the tables of examples/quotes/schema.sql: %w", err)
		}
		return t, nil
	}
	if m.raw, err = find("raw_table", "quotes", rawColumns); err != nil {
		return err
	}
	m.eod, err = find("eod_table", "quotes_eod", eodColumns)
	return err
}

// Transform writes the quote as it came and its contribution to its
// symbol's day: one quote, its mid and its spread.
func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	q := &m.q
	if err := quote.Parse(rec.Value, q); err != nil {
		return err
	}
	if err := out.Row(m.raw).Bytes(q.Symbol).DateTime64(q.TS).Decimal(q.Bid).Decimal(q.Ask).
		Bytes(q.Say).Int32(rec.Partition).Int64(rec.Offset).End(); err != nil {
		return err
	}
	return out.Row(m.eod).Bytes(q.Symbol).Date(q.Day()).UInt64(1).Decimal(q.MidE5()).Decimal(q.Spread()).End()
}
