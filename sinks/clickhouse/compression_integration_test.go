package clickhouse_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestCompressionOnTheWire counts the bytes a sink sends through a
// loopback proxy for the same compressible rows: with compression "auto"
// (the default; the proxy's address is 127.0.0.1) the inserts go
// uncompressed, with "lz4" they are a fraction of that, and the server
// reads every row either way, over both transports.
func TestCompressionOnTheWire(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		for _, tr := range transports {
			t.Run(tr, func(t *testing.T) { testCompressionOnTheWire(t, ch, tr) })
		}
	})
}

func testCompressionOnTheWire(t *testing.T, ch *testinfra.ClickHouse, transport string) {
	const rows = 20000
	var data [][]byte
	for id := range uint64(rows) {
		row := binary.LittleEndian.AppendUint64(nil, id)
		data = append(data, appendStr(row, strings.Repeat("sensor-reading ", 8)))
	}
	sent := map[string]int64{}
	for _, method := range []string{"", "lz4"} {
		name := method
		if name == "" {
			name = "default"
		}
		table := fmt.Sprintf("compression_%s_%s", transport, name)
		if err := ch.Exec(t.Context(), "CREATE TABLE "+table+" (id UInt64, payload String) ENGINE = MergeTree ORDER BY id"); err != nil {
			t.Fatal(err)
		}
		target := ch.Addr
		if transport == clickhouse.TransportHTTP {
			target = ch.HTTPAddr
		}
		proxy, err := testinfra.StartProxy(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() }) // after the sink's Close (cleanups run last first)
		s := newSink(t, ch, transport, func(c *clickhouse.Config) {
			c.Addr, c.HTTPAddr = proxy.Addr, proxy.Addr
			c.Compression = method
		})
		runSink(t, s)
		tbl, err := s.Table(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		before := proxy.BytesToTarget() // the handshake and the table's metadata
		sendRows(t, s, tbl, data, 5000)
		sent[name] = proxy.BytesToTarget() - before
		if got := queryT(t, ch, "SELECT count(), uniqExact(id) FROM "+table); got != fmt.Sprintf("%d\t%d", rows, rows) {
			t.Fatalf("compression %s: (count, uniqExact) = %q, want %d of each", name, got, rows)
		}
	}
	raw := int64(rows * (8 + 1 + 8*len("sensor-reading ")))
	t.Logf("ClickHouse %s over %s: %d bytes of rows sent as %d bytes by default, %d with lz4",
		ch.Version, transport, raw, sent["default"], sent["lz4"])
	if sent["default"] < raw {
		t.Errorf("the default sent %d bytes for %d bytes of rows: compressed, to a loopback address", sent["default"], raw)
	}
	if sent["lz4"]*4 > sent["default"] {
		t.Errorf("lz4 sent %d bytes against the default's %d: not compressed", sent["lz4"], sent["default"])
	}
}
