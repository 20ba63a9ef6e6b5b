package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestSchemaChangesWhileRunning alters the tables of a running pipeline
// while records flow at a steady rate, on each server: ADD COLUMN, MODIFY
// COLUMN to a wider type and DROP COLUMN are taken up without a restart,
// the module writes a new column from a later batch on, and every record
// lands exactly once. A second pipeline whose module refuses its table's
// new column pauses, visibly, while the first flows, and resumes when the
// column is dropped again.
func TestSchemaChangesWhileRunning(t *testing.T) {
	module := wasmbuild.BuildT(t, "engine/testdata/evolving")
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		testSchemaChanges(t, &tenantEnv{ch: ch, kafka: testinfra.KafkaT(t)}, module)
	})
}

func testSchemaChanges(t *testing.T, e *tenantEnv, module string) {
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE evolving (id Int64, value String, amount Int32) ENGINE = MergeTree ORDER BY id",
		"CREATE TABLE strict (id Int64, value String) ENGINE = MergeTree ORDER BY id",
	} {
		if err := e.ch.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for topic, parts := range map[string]int{"evolve": 2, "strict": 1, "dlq": 1} {
		if err := e.kafka.CreateTopic(ctx, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	tenant := engine.TenantConfig{ID: "acme", Tokens: []string{tenancy.HashToken("acme-token")},
		Pipelines: []engine.TenantPipelineConfig{
			{Name: "evolve", Topics: []string{"evolve"}, Tables: []string{"evolving"},
				Module: engine.TenantModuleConfig{Path: module}},
			{Name: "strict", Topics: []string{"strict"}, Tables: []string{"strict"},
				Module: engine.TenantModuleConfig{Path: module, Params: map[string]string{"table": "strict"}}},
		}}
	cfg := e.config(t, "schema-changes", tenant)
	cfg.ClickHouse.SchemaRefreshInterval = 200 * time.Millisecond
	cfg.ClickHouse.ChunkLinger = 100 * time.Millisecond
	cfg.ClickHouse.InsertLinger = 100 * time.Millisecond
	p, stop := run(t, cfg)

	// A steady flow into both pipelines: 50 records per topic every 10 ms,
	// each value a fresh id.
	cl, err := e.kafka.NewClient(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var produced [2]atomic.Int64
	var failed atomic.Value
	stopProducing, producerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(producerDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for id := 0; ; {
			select {
			case <-stopProducing:
				return
			case <-tick.C:
			}
			var recs []*kgo.Record
			for range 50 {
				for _, topic := range []string{"evolve", "strict"} {
					recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(id))})
				}
				id++
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				failed.Store(err)
				return
			}
			produced[0].Add(50)
			produced[1].Add(50)
		}
	}()
	stopProducer := func() {
		select {
		case <-stopProducing:
		default:
			close(stopProducing)
		}
		<-producerDone
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("producing: %v", err)
		}
	}
	defer stopProducer()

	count := func(sql string) int { return queryInt(t, e.ch, sql) }
	grows := func(table string, by int) {
		t.Helper()
		waitCount(t, e, "SELECT count() FROM "+table, count("SELECT count() FROM "+table)+by)
	}
	grows("evolving", 1000)
	grows("strict", 1000)

	// ADD COLUMN: the module writes it from a later batch on.
	if err := e.ch.Exec(ctx, "ALTER TABLE evolving ADD COLUMN note String"); err != nil {
		t.Fatal(err)
	}
	waitCount(t, e, "SELECT count() FROM evolving WHERE note = 'noted'", 1000)
	// MODIFY COLUMN to a wider type: the module writes Int64 from then on;
	// rows encoded as Int32 before still land.
	if err := e.ch.Exec(ctx, "ALTER TABLE evolving MODIFY COLUMN amount Int64"); err != nil {
		t.Fatal(err)
	}
	grows("evolving", 2000)
	// DROP COLUMN: rows encoded with it land without it.
	if err := e.ch.Exec(ctx, "ALTER TABLE evolving DROP COLUMN note"); err != nil {
		t.Fatal(err)
	}
	grows("evolving", 2000)

	// A column the module refuses: its pipeline waits, named by readiness,
	// and the other pipeline flows meanwhile.
	if err := e.ch.Exec(ctx, "ALTER TABLE strict ADD COLUMN extra UInt8"); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, 50*time.Millisecond, time.Minute, func() (string, bool) {
		_, why := p.Ready()
		return why, strings.Contains(why, "extra")
	}, func(why string) string { return "readiness does not name the refused column: " + why })
	// Rows the strict pipeline sealed before it changed over may still
	// be landing: take its count once it holds still.
	var held int
	waitProgress(t, 500*time.Millisecond, time.Minute, func() (int, bool) {
		n := count("SELECT count() FROM strict")
		done := n == held
		held = n
		return n, done
	}, func(n int) string { return fmt.Sprintf("the refused pipeline still inserts: %d rows", n) })
	grows("evolving", 3000)
	if n := count("SELECT count() FROM strict"); n != held {
		t.Fatalf("the pipeline whose module refused its schema went on inserting: %d rows, was %d", n, held)
	}
	if ok, why := p.Ready(); ok || !strings.Contains(why, "strict") {
		t.Fatalf("readiness while a pipeline waits on a refused schema: %v %q", ok, why)
	}
	// The column dropped again: the pipeline resumes.
	if err := e.ch.Exec(ctx, "ALTER TABLE strict DROP COLUMN extra"); err != nil {
		t.Fatal(err)
	}
	grows("strict", 1000)

	stopProducer()
	want := [2]int{int(produced[0].Load()), int(produced[1].Load())}
	waitCount(t, e, "SELECT count() FROM evolving", want[0])
	waitCount(t, e, "SELECT count() FROM strict", want[1])
	for i, table := range []string{"evolving", "strict"} {
		if n, uniq := count("SELECT count() FROM "+table), count("SELECT uniqExact(id) FROM "+table); n != want[i] || uniq != want[i] {
			t.Errorf("%s: %d rows, %d distinct ids; produced %d", table, n, uniq, want[i])
		}
	}
	if n := count("SELECT count() FROM evolving WHERE amount != id % 1000"); n != 0 {
		t.Errorf("%d rows of evolving have the wrong amount", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
