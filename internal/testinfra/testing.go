package testinfra

import (
	"context"
	"testing"
	"time"
)

// ClickHouseT starts a ClickHouse server for t and closes it when t ends. It
// fails t (never skips) when the server is missing or does not come up. At
// most one opts is used.
func ClickHouseT(t testing.TB, opts ...ClickHouseOptions) *ClickHouse {
	t.Helper()
	var o ClickHouseOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := StartClickHouse(ctx, o)
	if err != nil {
		t.Fatalf("testinfra: start ClickHouse: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testinfra: ClickHouse logs (%s):%s", c.Dir, c.LogTail(30))
		}
		if err := c.Close(); err != nil {
			t.Errorf("testinfra: close ClickHouse: %v", err)
		}
	})
	return c
}

// KafkaT starts a Kafka broker for t and closes it when t ends. It fails t
// (never skips) when Java or the Kafka jars are missing or the broker does
// not come up. At most one opts is used.
func KafkaT(t testing.TB, opts ...KafkaOptions) *Kafka {
	t.Helper()
	var o KafkaOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	k, err := StartKafka(ctx, o)
	if err != nil {
		t.Fatalf("testinfra: start Kafka: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testinfra: Kafka logs (%s):%s", k.Dir, k.LogTail(40))
		}
		if err := k.Close(); err != nil {
			t.Errorf("testinfra: close Kafka: %v", err)
		}
	})
	return k
}
