package main

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

func TestParseCreateTable(t *testing.T) {
	tests := []struct {
		ddl    string
		name   string
		insert []clickhouse.Column // the insertable columns
	}{
		{ddl: "CREATE TABLE adv (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset", name: "adv",
			insert: []clickhouse.Column{{Name: "offset", Type: "UInt64"}, {Name: "value", Type: "String"}}},
		{ddl: `create table if not exists db."t" (
			` + "`odd, name`" + ` LowCardinality( String ),
			e Enum8('a(' = 1,'b''c'=2, 'd,e' = -3) DEFAULT 'a(',
			n Nested(k String, v Nullable(Decimal(10,2))),
			m String MATERIALIZED concat(e, ','),
			al UInt8 ALIAS 1,
			dt DateTime64(3,'Europe/Paris') CODEC(Delta, ZSTD(1)) COMMENT 'x, y',
			tup Tuple(a String,b UInt8),
			INDEX i e TYPE minmax GRANULARITY 1,
			CONSTRAINT c CHECK n.k != []
		) ENGINE = Memory`, name: "t",
			insert: []clickhouse.Column{
				{Name: "odd, name", Type: "LowCardinality(String)"},
				{Name: "e", Type: "Enum8('a(' = 1, 'b''c' = 2, 'd,e' = -3)", DefaultKind: "DEFAULT"},
				{Name: "n.k", Type: "Array(String)"},
				{Name: "n.v", Type: "Array(Nullable(Decimal(10, 2)))"},
				{Name: "dt", Type: "DateTime64(3, 'Europe/Paris')"},
				{Name: "tup", Type: "Tuple(a String, b UInt8)"},
			}},
	}
	for _, tt := range tests {
		name, cols, err := parseCreateTable(tt.ddl)
		if err != nil {
			t.Fatalf("%s: %v", tt.ddl, err)
		}
		var insert []clickhouse.Column
		for _, c := range cols {
			if c.DefaultKind != "MATERIALIZED" && c.DefaultKind != "ALIAS" {
				insert = append(insert, c)
			}
		}
		if name != tt.name || !reflect.DeepEqual(insert, tt.insert) {
			t.Errorf("%s:\n\tgot %s %+v\n\twant %s %+v", tt.ddl, name, insert, tt.name, tt.insert)
		}
	}
	for _, bad := range []string{"", "CREATE VIEW v AS SELECT 1", "CREATE TABLE t", "CREATE TABLE t (x String", "CREATE TABLE t (x)"} {
		if _, _, err := parseCreateTable(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
