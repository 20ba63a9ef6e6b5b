package sluice

import (
	"testing"

	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// funcs is a Handler made of functions.
type funcs struct {
	init      func(*Config) error
	transform func(*Record, *Output) error
}

func (f funcs) Init(cfg *Config) error {
	if f.init == nil {
		return nil
	}
	return f.init(cfg)
}

func (f funcs) Transform(rec *Record, out *Output) error { return f.transform(rec, out) }

// oneColumn runs write on a one-record batch against a table t with a single
// column c of type typ, and returns the row's bytes or the record's error.
func oneColumn(t *testing.T, typ string, write func(*Row)) ([]byte, string) {
	t.Helper()
	return runRow(t, []sluicetest.Column{{Name: "c", Type: typ}}, func(tb *Table, out *Output) error {
		w := out.Row(tb)
		write(w)
		return w.End()
	})
}

func runRow(t *testing.T, cols []sluicetest.Column, transform func(*Table, *Output) error) ([]byte, string) {
	t.Helper()
	res := runTable(t, cols, transform)
	if res.Failed {
		return nil, res.Err
	}
	if len(res.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(res.Rows))
	}
	return res.Rows[0].Data, ""
}

// runTable runs transform on a one-record batch against a table "t" of
// cols and returns the record's result.
func runTable(t *testing.T, cols []sluicetest.Column, transform func(*Table, *Output) error) sluicetest.Result {
	t.Helper()
	var tb *Table
	in := NewInstance(funcs{
		init: func(cfg *Config) (err error) {
			tb, err = cfg.Table("t")
			return err
		},
		transform: func(_ *Record, out *Output) error { return transform(tb, out) },
	})
	if msg := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{{Name: "t", Columns: cols}})); msg != "" {
		t.Fatalf("init refused: %s", msg)
	}
	return run(t, in, sluicetest.Record{Value: []byte("v")})[0]
}

// run transforms a batch of recs and decodes the output.
func run(t *testing.T, in *Instance, recs ...sluicetest.Record) []sluicetest.Result {
	t.Helper()
	out := in.Transform(sluicetest.BatchPayload("topic", 3, recs))
	res, err := sluicetest.DecodeOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(recs) {
		t.Fatalf("%d results for %d records", len(res), len(recs))
	}
	return res
}
