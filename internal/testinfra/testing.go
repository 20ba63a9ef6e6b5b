package testinfra

import (
	"context"
	"testing"
	"time"
)

// SkipShort skips t under go test -short, which runs the hermetic tests
// alone: no server, no broker. Without -short it does nothing, and a test
// whose server is missing fails. ClickHouseT, KafkaT and EachServer call
// it; a test that starts a server any other way calls it first.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("testinfra: starts a real ClickHouse server or Kafka broker; -short runs only the hermetic tests")
	}
}

// ClickHouseT starts a ClickHouse server for t and closes it when t ends. It
// fails t (never skips) when the server is missing or does not come up. At
// most one opts is used; opts.Server picks the server (default
// DefaultServer()). Under -short it skips t (see SkipShort).
func ClickHouseT(t testing.TB, opts ...ClickHouseOptions) *ClickHouse {
	t.Helper()
	SkipShort(t)
	var o ClickHouseOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := StartClickHouse(ctx, o)
	if err != nil {
		t.Fatalf("testinfra: start ClickHouse %s: %v", o.Server, err)
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

// EachServer runs f as a subtest per server of Servers, named after it
// ("18.16", "26.9"), one after the other. Use it when a test starts its
// own servers (several, or with options that depend on the server).
// Under -short it skips t (see SkipShort).
func EachServer(t *testing.T, f func(t *testing.T, server Server)) {
	t.Helper()
	SkipShort(t)
	for _, s := range Servers {
		t.Run(string(s), func(t *testing.T) { f(t, s) })
	}
}

// EachClickHouse runs f as a subtest per server of Servers with a server
// of that kind started from opts (its Server field is set per subtest)
// for the subtest alone. A server that cannot start fails its subtest.
func EachClickHouse(t *testing.T, opts ClickHouseOptions, f func(t *testing.T, ch *ClickHouse)) {
	t.Helper()
	EachServer(t, func(t *testing.T, s Server) {
		o := opts
		o.Server = s
		f(t, ClickHouseT(t, o))
	})
}

// KafkaT starts a Kafka broker for t and closes it when t ends. It fails t
// (never skips) when Java or the Kafka jars are missing or the broker does
// not come up. At most one opts is used. Under -short it skips t (see
// SkipShort).
func KafkaT(t testing.TB, opts ...KafkaOptions) *Kafka {
	t.Helper()
	SkipShort(t)
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
