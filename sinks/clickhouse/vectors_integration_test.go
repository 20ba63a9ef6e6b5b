package clickhouse_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

var update = flag.Bool("update", false, "rewrite guest-sdk/testdata/rowbinary.tsv from ClickHouse 26.9")

const vectorsFile = "../../guest-sdk/testdata/rowbinary.tsv"

// vector is one line of guest-sdk/testdata/rowbinary.tsv.
type vector struct {
	typ, literal string
	rowBinary    []byte
}

func readVectors(t *testing.T) (header []string, vs []vector) {
	t.Helper()
	f, err := os.Open(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			header = append(header, line)
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("%s: %q: want type, literal and hex", vectorsFile, line)
		}
		b, err := hex.DecodeString(f[2])
		if err != nil {
			t.Fatalf("%s: %q: %v", vectorsFile, line, err)
		}
		vs = append(vs, vector{typ: f[0], literal: f[1], rowBinary: b})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return header, vs
}

// typeFamilies finds the names in a type that testinfra probes servers for.
var typeFamilies = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)

// missingOn reports the families in typ that the server lacks.
func missingOn(ch *testinfra.ClickHouse, typ string) []string {
	var missing []string
	for _, name := range typeFamilies.FindAllString(typ, -1) {
		if slices.Contains([]string{"DateTime64", "Date32", "Bool", "IPv4", "IPv6", "Map", "JSON", "Int128",
			"UInt128", "Int256", "UInt256", "Decimal256"}, name) && !ch.HasType(name) && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
	}
	return missing
}

// TestRowBinaryVectors is the type table: for each type and value of
// guest-sdk/testdata/rowbinary.tsv, on each server of the matrix, it checks
// that the server's RowBinary of the value is the vector's bytes (which the
// Go and C SDKs are tested to write), then decodes the bytes into a block,
// inserts it over each transport and reads back the value the server
// itself makes of the literal. A type the server lacks must be one the
// server reports it lacks.
func TestRowBinaryVectors(t *testing.T) {
	header, vs := readVectors(t)
	if *update {
		ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: testinfra.Modern})
		var b strings.Builder
		for _, h := range header {
			b.WriteString(h + "\n")
		}
		for _, v := range vs {
			rb, err := serverRowBinary(ch, v)
			if err != nil {
				t.Fatalf("%s %s: %v", v.typ, v.literal, err)
			}
			fmt.Fprintf(&b, "%s\t%s\t%x\n", v.typ, v.literal, rb)
		}
		if err := os.WriteFile(vectorsFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		testRowBinaryVectors(t, ch, vs)
	})
}

func serverRowBinary(ch *testinfra.ClickHouse, v vector) ([]byte, error) {
	q := fmt.Sprintf("SELECT CAST(%s AS %s) FORMAT RowBinary", v.literal, v.typ)
	if ch.HasType("JSON") {
		q = fmt.Sprintf("SELECT CAST(%s AS %s) SETTINGS output_format_binary_write_json_as_string = 1 FORMAT RowBinary", v.literal, v.typ)
	}
	out, err := ch.Query(context.Background(), q)
	return []byte(out), err
}

func testRowBinaryVectors(t *testing.T, ch *testinfra.ClickHouse, vs []vector) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One table per type, its values in rows 0, 1, …
	var types []string
	byType := map[string][]vector{}
	for _, v := range vs {
		if _, ok := byType[v.typ]; !ok {
			types = append(types, v.typ)
		}
		byType[v.typ] = append(byType[v.typ], v)
	}
	sinks := map[string]*clickhouse.Sink{}
	runDone := make(chan error, len(transports))
	for _, tr := range transports {
		s := newSink(t, ch, tr, nil)
		sinks[tr] = s
		go func() { runDone <- s.Run(ctx) }()
	}
	var acked atomic.Int64
	sent := 0
	var missingTypes []string
	for i, typ := range types {
		if missing := missingOn(ch, typ); len(missing) > 0 {
			// The server must refuse the type, not take it some other way.
			err := ch.Exec(ctx, fmt.Sprintf("CREATE TABLE absent_%d (v %s) ENGINE = Memory", i, typ))
			if err == nil {
				t.Errorf("%s: ClickHouse %s lacks %v but created a table of it", typ, ch.Version, missing)
			}
			missingTypes = append(missingTypes, typ)
			continue
		}
		for _, v := range byType[typ] {
			got, err := serverRowBinary(ch, v)
			if err != nil {
				t.Fatalf("%s %s: %v", typ, v.literal, err)
			}
			if !slices.Equal(got, v.rowBinary) {
				t.Errorf("%s %s: ClickHouse %s writes RowBinary %x, the vector has %x", typ, v.literal, ch.Version, got, v.rowBinary)
			}
		}
		want, err := ch.Query(ctx, literalsQuery(typ, byType[typ]))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		for _, tr := range transports {
			table := fmt.Sprintf("vec_%s_%d", tr, i)
			if err := ch.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id UInt32, v %s) ENGINE = MergeTree ORDER BY id", table, typ)); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			s := sinks[tr]
			tbl, err := s.Table(ctx, table)
			if tr == clickhouse.TransportHTTP && ch.Server == testinfra.Legacy && sentAsInnerType(typ) {
				// 18.16 does not convert Native columns over HTTP, and sluice
				// sends such a LowCardinality(T) as T: refused up front.
				if err == nil || !strings.Contains(err.Error(), "use transport native") {
					t.Errorf("%s over http to 18.16: err = %v, want a refusal naming transport native", typ, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s over %s: %v", typ, tr, err)
				continue
			}
			if ch.Server == testinfra.Legacy && strings.HasPrefix(typ, "Array(Tuple(") {
				// 18.16 stores an Array(Tuple(…)) column as one Array column
				// per element (v.1, v.2, …), and so do its table's rows.
				if n := len(tbl.Insert); n != 3 || tbl.Insert[1].Name != "v.1" {
					t.Errorf("%s on 18.16: insert columns %+v, want id, v.1, v.2", typ, tbl.Insert)
				}
				continue
			}
			block := s.NewBlock(tbl)
			for j, v := range byType[typ] {
				row := binary.LittleEndian.AppendUint32(nil, uint32(j))
				if err := block.AppendRow(append(row, v.rowBinary...)); err != nil {
					t.Fatalf("%s %s: decode: %v", typ, v.literal, err)
				}
			}
			if err := s.Send(ctx, clickhouse.NewChunk(block, []clickhouse.Ack{countAck{&acked}})); err != nil {
				t.Fatal(err)
			}
			sent++
			waitFor(t, func() bool { return acked.Load() == int64(sent) }, time.Minute, "insert of "+typ+" over "+tr)
			got, err := ch.Query(ctx, fmt.Sprintf("SELECT v FROM %s ORDER BY id FORMAT TSV", table))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s over %s: read back\n%q\nwant\n%q", typ, tr, got, want)
			}
		}
	}
	for _, s := range sinks {
		s.Close()
	}
	for range transports {
		if err := <-runDone; err != nil {
			t.Errorf("sink: %v", err)
		}
	}
	t.Logf("ClickHouse %s: %d types checked over %v; lacks %d: %v",
		ch.Version, len(types)-len(missingTypes), transports, len(missingTypes), missingTypes)
}

// literalsQuery selects the type's literals, in vector order, as the
// server reads them.
func literalsQuery(typ string, vs []vector) string {
	var parts []string
	for j, v := range vs {
		parts = append(parts, fmt.Sprintf("SELECT %d AS id, CAST(%s AS %s) AS v", j, v.literal, typ))
	}
	return "SELECT v FROM (" + strings.Join(parts, " UNION ALL ") + ") ORDER BY id FORMAT TSV"
}

// sentAsInnerType reports whether typ has a LowCardinality that the sink
// sends over HTTP as its inner type: one nested in another type (but the
// element of an Array of LowCardinality(String) or
// LowCardinality(Nullable(String))), or one of an inner type other than
// String and Nullable(String).
func sentAsInnerType(typ string) bool {
	if inner, ok := strings.CutPrefix(typ, "Array("); ok && strings.HasSuffix(inner, ")") {
		if inner = inner[:len(inner)-1]; inner == "LowCardinality(String)" || inner == "LowCardinality(Nullable(String))" {
			return false
		}
	}
	i := strings.Index(typ, "LowCardinality(")
	switch {
	case i < 0:
		return false
	case i > 0 || strings.Contains(typ[1:], "LowCardinality("):
		return true
	}
	return typ != "LowCardinality(String)" && typ != "LowCardinality(Nullable(String))"
}
