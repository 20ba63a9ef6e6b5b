package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// env is what a suite runs sluice against: a ClickHouse server, a Kafka
// broker (both private to the test, on loopback) and the binary.
type env struct {
	ch    *testinfra.ClickHouse
	kafka *testinfra.Kafka
	bin   string
}

// newEnv builds the binary and starts a ClickHouse server (opts.Server,
// default testinfra.DefaultServer) and a broker for t. Under -short it
// skips t.
func newEnv(t *testing.T, opts testinfra.ClickHouseOptions) *env {
	t.Helper()
	testinfra.SkipShort(t)
	return &env{
		bin:   sluiceBinary(t),
		ch:    testinfra.ClickHouseT(t, opts),
		kafka: testinfra.KafkaT(t),
	}
}

// exec runs each statement on ClickHouse.
func (e *env) exec(t *testing.T, sql ...string) {
	t.Helper()
	for _, q := range sql {
		if err := e.ch.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) createTopic(t *testing.T, topic string, partitions int) {
	t.Helper()
	if err := e.kafka.CreateTopic(context.Background(), topic, partitions); err != nil {
		t.Fatal(err)
	}
}

// allowRecordBytes raises topic's max.message.bytes to n.
func (e *env) allowRecordBytes(t *testing.T, adm *kadm.Client, topic string, n int) {
	t.Helper()
	v := strconv.Itoa(n)
	resp, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topic)
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatalf("set max.message.bytes on %s: %v", topic, err)
	}
}

// admin is an admin client of the broker, closed when t ends.
func (e *env) admin(t *testing.T, opts ...kgo.Opt) *kadm.Client {
	t.Helper()
	cl, err := e.kafka.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produce writes values to topic, round robin over its partitions.
func (e *env) produce(t *testing.T, topic string, values [][]byte, opts ...kgo.Opt) {
	t.Helper()
	opts = append(opts, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	cl, err := e.kafka.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var failed atomic.Value
	for _, v := range values {
		cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func (e *env) queryString(t *testing.T, sql string) string {
	t.Helper()
	out, err := e.ch.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func (e *env) queryInt(t *testing.T, sql string) int {
	t.Helper()
	out := e.queryString(t, sql)
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("%s: %q is not a number", sql, out)
	}
	return n
}

// seqExpr is the log line's sequence number in a row of log-normalize's
// table: distinct per record of a loggen seed.
const seqExpr = "toUInt64(attrs.value[indexOf(attrs.key, 'seq')])"

// logRows counts the rows of a log-normalize table and the distinct
// records among them.
func (e *env) logRows(t *testing.T, table string) (rows, distinct int) {
	t.Helper()
	f := strings.Fields(e.queryString(t, fmt.Sprintf("SELECT count(), uniqExact(%s) FROM %s FORMAT TSV", seqExpr, table)))
	rows, _ = strconv.Atoi(f[0])
	distinct, _ = strconv.Atoi(f[1])
	return rows, distinct
}

// waitCount polls a count query until it reaches want, failing only when
// it stops moving for a minute.
func (e *env) waitCount(t *testing.T, sql string, want int) {
	t.Helper()
	waitProgress(t, 100*time.Millisecond, time.Minute, func() (int, bool) {
		n := e.queryInt(t, sql)
		return n, n >= want
	}, func(n int) string { return fmt.Sprintf("%s: %d of %d, no progress for a minute", sql, n, want) })
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// committedOffsets sums group's committed offsets of topic's partitions
// and their end offsets; a partition with no commit counts as 0.
func committedOffsets(t *testing.T, adm *kadm.Client, group, topic string) (committed, end int64) {
	t.Helper()
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		end += o.Offset
		if c, ok := offs.Lookup(topic, o.Partition); ok {
			committed += min(c.At, o.Offset)
		}
	})
	return committed, end
}

// groupState is what waitGroup reads of a consumer group.
type groupState struct {
	state   string
	members int
	owning  int // members assigned at least one partition
}

func (g groupState) String() string {
	return fmt.Sprintf("state %s, %d members, %d owning partitions", g.state, g.members, g.owning)
}

// waitGroup describes group every 200 ms until ok holds, d passes or gone
// (if not nil) reports that the member waited for has exited. It returns
// whether ok held and the last state read (or why none was).
func waitGroup(adm *kadm.Client, group string, d time.Duration, gone func() bool, ok func(groupState) bool) (bool, string) {
	last := "not described yet"
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if gone != nil && gone() {
			return false, "the member exited"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		groups, err := adm.DescribeGroups(ctx, group)
		cancel()
		if err != nil {
			last = err.Error()
			continue
		}
		g := groups[group]
		s := groupState{state: g.State, members: len(g.Members)}
		for _, m := range g.Members {
			if c, ok := m.Assigned.AsConsumer(); ok && len(c.Topics) > 0 {
				s.owning++
			}
		}
		if ok(s) {
			return true, s.String()
		}
		last = s.String()
	}
	return false, last
}

// waitProgress calls read every interval until it reports done, failing
// t with stuck's message only when read's value stays the same for stall:
// a loaded machine is slow, not stuck.
func waitProgress[V comparable](t *testing.T, interval, stall time.Duration, read func() (v V, done bool), stuck func(v V) string) {
	t.Helper()
	v, done := read()
	for lastMove := time.Now(); !done; {
		time.Sleep(interval)
		var now V
		if now, done = read(); now != v {
			v, lastMove = now, time.Now()
		}
		if !done && time.Since(lastMove) > stall {
			t.Fatal(stuck(v))
		}
	}
}

// logsDDL is log-normalize's table (examples/log-normalize/schema.sql)
// under the name table.
func logsDDL(t *testing.T, table string) string {
	t.Helper()
	ddl, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(ddl), "CREATE TABLE logs", "CREATE TABLE "+table, 1)
}

// logLines are n JSON log lines of loggen's seed.
func logLines(seed uint64, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = loggen.Generate(seed, i).JSON
	}
	return out
}

// eventsDDL is the table of engine/testdata/versioned and
// examples/adversarial/init-fails-later: a row per record, with the
// module's version.
const eventsDDL = "CREATE TABLE %s (topic String, partition Int32, offset Int64, version String, value String) ENGINE = MergeTree ORDER BY (topic, partition, offset)"

// dedupWindow is the smallest non_replicated_deduplication_window that
// delivery: exactly_once accepts (docs/operations.md).
const dedupWindow = 1000

// withDedupWindow is ddl with the deduplication window exactly-once
// delivery needs.
func withDedupWindow(ddl string) string {
	return strings.TrimSpace(ddl) + fmt.Sprintf(" SETTINGS non_replicated_deduplication_window = %d", dedupWindow)
}

// The dead-letter headers that name a record's source (docs/architecture.md).
const (
	headerSourceTopic     = "sluice.source.topic"
	headerSourcePartition = "sluice.source.partition"
	headerSourceOffset    = "sluice.source.offset"
	headerTruncated       = "sluice.truncated"
)
