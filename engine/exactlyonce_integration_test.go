package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestExactlyOnceRefusesTablesThatCannotDeduplicate: delivery:
// exactly_once starts only when every target table drops a repeated
// insert token, and otherwise names the table and the setting to change.
// 18.16 has no insert_deduplication_token and is refused; on 26.9 a
// MergeTree without a deduplication window is refused, one with a window
// too small is refused with the statement that fixes it, and one with the
// window passes the check (New then stops at the closed Kafka port).
func TestExactlyOnceRefusesTablesThatCannotDeduplicate(t *testing.T) {
	testinfra.SkipShort(t)
	wasm := wasmbuild.BuildT(t, "examples/log-normalize")
	ports, err := testinfra.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	closedKafka := fmt.Sprintf("127.0.0.1:%d", ports[0])
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ddl := readSchema(t)
		tables := map[string]string{"plain": ""}
		if ch.Capabilities().DedupToken {
			tables["small"] = " SETTINGS non_replicated_deduplication_window = 10"
			tables["windowed"] = fmt.Sprintf(" SETTINGS non_replicated_deduplication_window = %d", clickhouse.MinDedupWindow)
		}
		for name, settings := range tables {
			if err := ch.Exec(ctx, strings.Replace(strings.TrimSpace(ddl), "CREATE TABLE logs", "CREATE TABLE logs_"+name, 1)+settings); err != nil {
				t.Fatal(err)
			}
		}
		newWith := func(table string) error {
			cfg := engine.Config{
				Kafka:    engine.KafkaConfig{Brokers: []string{closedKafka}, Group: "g", Topics: []string{"t"}, ConnectTimeout: time.Second},
				Module:   engine.ModuleConfig{Path: wasm, Tables: []string{table}, CacheDir: t.TempDir()},
				Delivery: engine.DeliveryExactlyOnce,
			}
			cfg.ClickHouse.Addr = ch.Addr
			p, err := engine.New(ctx, cfg, testLogger(t))
			if err == nil {
				t.Fatalf("New with table %s and a closed Kafka port: no error", table)
				_ = p
			}
			return err
		}
		err := newWith("logs_plain")
		if !ch.Capabilities().DedupToken {
			if !strings.Contains(err.Error(), "does not take insert_deduplication_token") {
				t.Errorf("18.16: %v; want the refusal naming insert_deduplication_token", err)
			}
			return
		}
		if !strings.Contains(err.Error(), "default.logs_plain") || !strings.Contains(err.Error(), "non_replicated_deduplication_window is 0") {
			t.Errorf("table without a window: %v; want the refusal naming the table and the setting", err)
		}
		err = newWith("logs_small")
		if !strings.Contains(err.Error(), "non_replicated_deduplication_window is 10") ||
			!strings.Contains(err.Error(), "ALTER TABLE default.logs_small MODIFY SETTING non_replicated_deduplication_window = 1000") {
			t.Errorf("table with a small window: %v; want the refusal with the statement that fixes it", err)
		}
		err = newWith("logs_windowed")
		if strings.Contains(err.Error(), "exactly_once") || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("table with the window: %v; want only the closed Kafka port's error", err)
		}
	})
}
