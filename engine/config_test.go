package engine

import (
	"strings"
	"testing"
	"time"
)

const minimal = `
kafka:
  brokers: ["${BROKER:-127.0.0.1:9092}"]
  group: g
  topics: [logs]
module:
  path: m.wasm
  tables: [logs]
clickhouse:
  addr: ${CH_ADDR}
`

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseConfigDefaultsAndSubstitution(t *testing.T) {
	cfg, err := ParseConfig([]byte(minimal), env(map[string]string{"CH_ADDR": "10.0.0.1:9000"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kafka.Brokers[0]; got != "127.0.0.1:9092" {
		t.Errorf("broker = %q, want the ${BROKER:-…} default", got)
	}
	if cfg.ClickHouse.Addr != "10.0.0.1:9000" {
		t.Errorf("clickhouse.addr = %q", cfg.ClickHouse.Addr)
	}
	if cfg.Module.Name != "m" {
		t.Errorf("module.name default = %q, want m", cfg.Module.Name)
	}
	if cfg.Kafka.CommitInterval != time.Second || cfg.Kafka.StartOffset != "earliest" {
		t.Errorf("kafka defaults: %+v", cfg.Kafka)
	}
	if cfg.ClickHouse.ChunkBytes != 1<<20 || cfg.ClickHouse.QueueCapacity != 8 || cfg.ClickHouse.Compression != "auto" {
		t.Errorf("clickhouse defaults: %+v", cfg.ClickHouse)
	}

	cfg, err = ParseConfig([]byte(minimal), env(map[string]string{"CH_ADDR": "x:1", "BROKER": "b:9"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Brokers[0] != "b:9" {
		t.Errorf("broker = %q, want b:9 from the environment", cfg.Kafka.Brokers[0])
	}
}

func TestParseConfigDurations(t *testing.T) {
	raw := minimal + "  chunk_linger: 150ms\nshutdown_timeout: 1m\n"
	cfg, err := ParseConfig([]byte(raw), env(map[string]string{"CH_ADDR": "x:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClickHouse.ChunkLinger != 150*time.Millisecond || cfg.ShutdownTimeout != time.Minute {
		t.Errorf("durations: chunk_linger %s, shutdown_timeout %s", cfg.ClickHouse.ChunkLinger, cfg.ShutdownTimeout)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	base := map[string]string{"CH_ADDR": "x:1"}
	for _, tc := range []struct {
		name, raw, want string
		env             map[string]string
	}{
		{"unknown top-level key", minimal + "colour: blue\n", "field colour not found", base},
		{"unknown nested key", strings.Replace(minimal, "group: g", "group: g\n  grup: h", 1), "field grup not found", base},
		{"missing brokers", strings.Replace(minimal, `brokers: ["${BROKER:-127.0.0.1:9092}"]`, "", 1), "kafka.brokers is required", base},
		{"missing group", strings.Replace(minimal, "group: g", "", 1), "kafka.group is required", base},
		{"missing module path", strings.Replace(minimal, "path: m.wasm", "", 1), "module.path is required", base},
		{"missing tables", strings.Replace(minimal, "tables: [logs]", "", 1), "module.tables is required", base},
		{"missing clickhouse addr", strings.Replace(minimal, "addr: ${CH_ADDR}", "database: d", 1), "clickhouse.addr is required", base},
		{"unset variable", minimal, "environment variable CH_ADDR is not set", map[string]string{}},
		{"bad variable", minimal + "# ${1X}\n", `"1X" is not a variable name`, base},
		{"bad compression", minimal + "  compression: brotli\n", "clickhouse.compression", base},
		{"bad start offset", strings.Replace(minimal, "group: g", "group: g\n  start_offset: middle", 1), "kafka.start_offset", base},
		{"bad duration", minimal + "  chunk_linger: soon\n", "chunk_linger", base},
		{"empty", "", "empty config", base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.raw), env(tc.env))
			if err == nil {
				t.Fatalf("no error; want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestExpandEnvDollarEscape(t *testing.T) {
	got, err := expandEnv("a: $${HOME} $5 ${X}", env(map[string]string{"X": "y"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := "a: ${HOME} $5 y"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("kafka: {brokers: [a]}\n"))
	f.Add([]byte("${"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Any input gives a config or an error, never a panic.
		_, _ = ParseConfig(raw, env(map[string]string{"CH_ADDR": "x:1"}))
	})
}
