package quotes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/lagmetrics"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// Tables are the tables the module writes, in its table order, as the
// lag metrics name them without the database.
var Tables = []string{"quotes", "quotes_eod"}

// partitions of each run's topic.
const partitions = 2

// RunOptions configures one run of the pipeline.
type RunOptions struct {
	// Routing is clickhouse.routing: "distributed" or "shards".
	Routing string
	// Quotes is the number of quotes produced, at Rate per second.
	Quotes, Rate int
	// Warmup is how many of the quotes go first, to warm the pipeline up:
	// they are produced and drained before the others, and their samples
	// are left out of the lag figures. 0 keeps every sample.
	Warmup int
	// Module is the path of the built module; CacheDir its compilation
	// cache, shared by the runs.
	Module, CacheDir string
	// Log receives sluice's log; nil discards it.
	Log *slog.Logger
	// Progress, if set, is told what the run is doing.
	Progress func(format string, args ...any)
}

// Result is what one run produced, landed and measured.
type Result struct {
	Routing  string
	Produced int
	// Landed is by table: rows of quotes, and quotes counted by the rows
	// of quotes_eod (sum(quotes)), read from ClickHouse.
	Landed map[string]int64
	// Inserted is sluice_table_rows_inserted_total by table.
	Inserted map[string]int64
	// Lag is by table: the lag histograms after the warm-up.
	Lag map[string]*Lag
	// Inserts is the number of INSERT statements, RowsInserted the rows
	// they carried, over both tables and the whole run, warm-up included.
	Inserts, RowsInserted int64
	// Server is what the shards' query logs say of the run's inserts,
	// warm-up included.
	Server *ServerInserts
	// Elapsed is from the first measured quote produced to the last one
	// landed.
	Elapsed time.Duration
}

// Run runs the pipeline once over a topic of its own, into emptied tables,
// and checks what landed against what was produced: every quote once in
// quotes, the end-of-day sums of every symbol and day exact, and every row
// on the shard its symbol hashes to.
func (c *Cluster) Run(ctx context.Context, o RunOptions) (*Result, error) {
	switch {
	case o.Routing != clickhouse.RoutingDistributed && o.Routing != clickhouse.RoutingShards:
		return nil, fmt.Errorf("routing %q: want %s or %s", o.Routing, clickhouse.RoutingDistributed, clickhouse.RoutingShards)
	case o.Quotes <= 0 || o.Rate <= 0 || o.Warmup < 0 || o.Warmup >= o.Quotes:
		return nil, fmt.Errorf("want quotes > 0, rate > 0 and 0 <= warmup < quotes; got %d, %d, %d", o.Quotes, o.Rate, o.Warmup)
	}
	began := time.Now()
	progress := o.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	topic, dlq := "quotes-"+o.Routing, "quotes-dlq-"+o.Routing
	for _, t := range []string{topic, dlq} {
		if err := c.Kafka.CreateTopic(ctx, t, partitions); err != nil {
			return nil, err
		}
	}
	for _, s := range c.shards() {
		for _, t := range []string{"quotes_local", "quotes_eod_local"} {
			if err := s.Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				return nil, fmt.Errorf("%s: %w", s.Addr, err)
			}
		}
	}
	ports, err := testinfra.FreePorts(1)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{
		"KAFKA_BROKERS": c.Kafka.Addr, "QUOTES_GROUP": "quotes-" + o.Routing, "QUOTES_TOPIC": topic,
		"QUOTES_MODULE": o.Module, "QUOTES_WASM_CACHE": o.CacheDir, "QUOTES_DLQ": dlq,
		"SHARD1_HTTP_ADDR": c.Shard1.HTTPAddr, "QUOTES_ROUTING": o.Routing,
		"SHARD2_CLUSTER_ADDR": c.Link.Addr, "SHARD2_HTTP_ADDR": c.Shard2.HTTPAddr,
		"QUOTES_METRICS": fmt.Sprintf("127.0.0.1:%d", ports[0]),
	}
	cfg, err := engine.ParseConfig([]byte(pipelineTemplate), func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		return nil, fmt.Errorf("pipeline.yaml: %w", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	p, err := engine.New(runCtx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("start sluice (routing %s): %w", o.Routing, err)
	}
	ln, err := net.Listen("tcp", cfg.Observability.Listen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	sl := &running{done: make(chan struct{})}
	go func() {
		defer close(sl.done)
		sl.err = p.Run(runCtx)
	}()
	defer func() { stop(); <-sl.done }()

	gen := newGenerator(o.Quotes)
	// The warm-up quotes go first and drain: once they have landed and the
	// consumer lag is 0 no sample is being observed, so the histograms read
	// then are consistent with each other, and subtracting them leaves
	// the samples of the measured quotes only.
	var baseline *Metrics
	if o.Warmup > 0 {
		progress("routing %s: %d quotes at %d/s to %s to warm up", o.Routing, o.Warmup, o.Rate, topic)
		if err := produce(runCtx, c.Kafka, topic, gen, o.Warmup, o.Rate); err != nil {
			return nil, err
		}
		if baseline, err = c.drain(ctx, o.Warmup, topic, metricsURL, sl); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	progress("routing %s: producing %d quotes at %d/s to %s", o.Routing, o.Quotes-o.Warmup, o.Rate, topic)
	start := time.Now()
	if err := produce(runCtx, c.Kafka, topic, gen, o.Quotes-o.Warmup, o.Rate); err != nil {
		return nil, err
	}
	last, err := c.drain(ctx, o.Quotes, topic, metricsURL, sl)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	stop()
	<-sl.done
	if sl.err != nil && !errors.Is(sl.err, context.Canceled) {
		return nil, fmt.Errorf("sluice: %w", sl.err)
	}
	progress("routing %s: %d quotes landed in %.1fs", o.Routing, o.Quotes, elapsed.Seconds())

	res := &Result{Routing: o.Routing, Produced: gen.count, Landed: map[string]int64{},
		Inserted: map[string]int64{}, Lag: map[string]*Lag{}, Elapsed: elapsed,
		Inserts: last.Inserts, RowsInserted: last.RowsInserted}
	if last.DeadLettered != 0 {
		return nil, fmt.Errorf("%d quotes were dead-lettered; every quote produced is valid", last.DeadLettered)
	}
	for _, t := range Tables {
		full := "default." + t
		res.Inserted[t] = last.Inserted[full]
		l := last.Lag[full]
		if l == nil {
			return nil, fmt.Errorf("/metrics has no lag histograms for pipeline quotes, table %s", full)
		}
		var before *Lag
		if baseline != nil {
			before = baseline.Lag[full]
		}
		if res.Lag[t], err = l.Since(before); err != nil {
			return nil, fmt.Errorf("lag of %s: %w", full, err)
		}
	}
	if err := c.check(ctx, gen, res); err != nil {
		return res, fmt.Errorf("routing %s: %w", o.Routing, err)
	}
	if res.Server, err = c.serverInserts(ctx, began); err != nil {
		return res, err
	}
	return res, nil
}

// running is a pipeline's Run in its goroutine: done closes when it
// returns, with err.
type running struct {
	done chan struct{}
	err  error
}

// drain waits until n quotes have landed in both tables and every sample
// of them is in the lag histograms, and returns /metrics then.
func (c *Cluster) drain(ctx context.Context, n int, topic, metricsURL string, sl *running) (*Metrics, error) {
	if err := c.waitLanded(ctx, int64(n), sl); err != nil {
		return nil, err
	}
	// Every chunk's samples are observed before its offsets can be
	// committed: at consumer lag 0 on every partition, all are in.
	m, err := waitMetrics(ctx, metricsURL, sl, func(m *Metrics) bool {
		zero := 0
		for tp, lag := range m.ConsumerLag {
			if strings.HasPrefix(tp, topic+"/") && lag == 0 {
				zero++
			}
		}
		return zero == partitions
	})
	if err != nil {
		return nil, fmt.Errorf("wait for consumer lag 0: %w", err)
	}
	return m, nil
}

// waitLanded waits until the shards hold n quotes in both tables, failing
// when the counts stop moving for a minute or sluice stops.
func (c *Cluster) waitLanded(ctx context.Context, n int64, sl *running) error {
	var last [2]int64
	for moved := time.Now(); ; {
		var now [2]int64
		for _, s := range c.shards() {
			out, err := s.Query(ctx, "SELECT (SELECT count() FROM quotes_local), (SELECT sum(quotes) FROM quotes_eod_local)")
			if err != nil {
				return err
			}
			f := strings.Fields(out)
			for i := range now {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				now[i] += v
			}
		}
		if now[0] >= n && now[1] >= n {
			return nil
		}
		if now != last {
			last, moved = now, time.Now()
		}
		if time.Since(moved) > time.Minute {
			return fmt.Errorf("%d quotes and %d end-of-day quotes of %d landed, no progress for a minute", now[0], now[1], n)
		}
		select {
		case <-sl.done:
			return fmt.Errorf("sluice stopped with %d of %d quotes landed: %v", now[0], n, sl.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func scrape(ctx context.Context, url string) (*Metrics, error) {
	fams, err := lagmetrics.Scrape(ctx, url)
	if err != nil {
		return nil, err
	}
	return metricsOf(fams, "quotes")
}

// waitMetrics scrapes until ok, failing when nothing in /metrics moves
// for a minute or sluice stops.
func waitMetrics(ctx context.Context, url string, sl *running, ok func(*Metrics) bool) (*Metrics, error) {
	var last string
	for moved := time.Now(); ; {
		m, err := scrape(ctx, url)
		if err != nil {
			return nil, err
		}
		if ok(m) {
			return m, nil
		}
		if now := fmt.Sprint(m.ConsumerLag, m.Inserted); now != last {
			last, moved = now, time.Now()
		}
		if time.Since(moved) > time.Minute {
			return nil, fmt.Errorf("no progress for a minute: consumer lag %v", m.ConsumerLag)
		}
		select {
		case <-sl.done:
			return nil, fmt.Errorf("sluice stopped: %v", sl.err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// symbols are the instruments quoted, each with its opening mid price in
// units of 10^-4.
var symbols = []struct {
	name string
	open int64
}{
	{"ACME", 1012500}, {"GLOBX", 423100}, {"INITECH", 88800}, {"UMBRL", 2150000},
	{"WAYNE", 1534400}, {"STARK", 3077500}, {"CYBDN", 61200}, {"TYRLL", 945000},
}

// says are what traders add to a quote, some with characters JSON escapes.
var says = []string{"firm", "indicative", "last look", `size "10k"`, "réf. 7\nnet", "", "tight \\ wide"}

// marketOpen is the first quote's time: the quotes span tradingDays days
// of market time from it, whatever the rate, so that the end-of-day table
// has a row per symbol and day.
var marketOpen = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

const tradingDays = 5

// generator makes a fixed sequence of quotes (the same in every run) and
// keeps the end-of-day sums they must add up to. count is the quotes made.
type generator struct {
	rng   *rand.Rand
	mids  []int64
	step  int64 // market milliseconds between quotes
	days  map[dayKey]*dayTotals
	bid   int64 // sums of every bid and ask, 10^-4
	ask   int64
	count int
}

type dayKey struct {
	symbol string
	day    string // YYYY-MM-DD
}

type dayTotals struct {
	quotes          int64
	midE5, spreadE4 int64
}

// newGenerator spreads n quotes over tradingDays of market time.
func newGenerator(n int) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(16, 3)), days: map[dayKey]*dayTotals{}}
	for _, s := range symbols {
		g.mids = append(g.mids, s.open)
	}
	g.step = max(1, tradingDays*86_400_000/int64(max(n, 1)))
	return g
}

// wireQuote is a quote as it travels on the topic.
type wireQuote struct {
	Symbol string      `json:"symbol"`
	Bid    json.Number `json:"bid"`
	Ask    json.Number `json:"ask"`
	TS     int64       `json:"ts"`
	Say    string      `json:"say,omitempty"`
}

// next returns the next quote's key (its symbol) and JSON.
func (g *generator) next() (key, value []byte) {
	s := g.rng.IntN(len(symbols))
	mid := max(g.mids[s]+g.rng.Int64N(401)-200, 1000)
	g.mids[s] = mid
	spread := 1 + g.rng.Int64N(40)
	bid := mid - spread/2
	ask := bid + spread
	ts := marketOpen.UnixMilli() + int64(g.count)*g.step
	q := wireQuote{Symbol: symbols[s].name, Bid: price(bid), Ask: price(ask), TS: ts, Say: says[g.rng.IntN(len(says))]}
	value, _ = json.Marshal(q)

	k := dayKey{q.Symbol, time.UnixMilli(ts).UTC().Format(time.DateOnly)}
	d := g.days[k]
	if d == nil {
		d = &dayTotals{}
		g.days[k] = d
	}
	d.quotes++
	d.midE5 += (bid + ask) * 5
	d.spreadE4 += spread
	g.bid += bid
	g.ask += ask
	g.count++
	return []byte(q.Symbol), value
}

// price writes units of 10^-4 as a JSON number, trailing zeros dropped.
func price(v int64) json.Number {
	s := strconv.FormatInt(v/10000, 10)
	if frac := v % 10000; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%04d", frac), "0")
	}
	return json.Number(s)
}

// produce sends the generator's next n quotes at rate per second, each
// with the time it is produced as its Kafka timestamp (where the lag is
// measured from), keyed by symbol, and waits for the broker to have them.
func produce(ctx context.Context, k *testinfra.Kafka, topic string, g *generator, n, rate int) error {
	cl, err := k.NewClient(kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	failed := make(chan error, 1)
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < n; {
		due := min(n, int(time.Since(start).Seconds()*float64(rate))+1)
		for ; sent < due; sent++ {
			key, value := g.next()
			cl.Produce(ctx, &kgo.Record{Key: key, Value: value, Timestamp: time.Now()}, func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			})
		}
		select {
		case err := <-failed:
			return fmt.Errorf("produce: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-failed:
		return fmt.Errorf("produce: %w", err)
	default:
		return nil
	}
}

// check compares what landed with what the generator made, and fills
// res.Landed.
func (c *Cluster) check(ctx context.Context, g *generator, res *Result) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Through the Distributed tables: both shards at once.
	out, err := c.Shard1.Query(ctx, "SELECT count(), uniqExact(kafka_partition, kafka_offset), uniqExact(symbol, ts), "+
		"toString(sum(bid)), toString(sum(ask)) FROM quotes")
	if err != nil {
		return err
	}
	f := strings.Fields(out)
	if len(f) != 5 {
		return fmt.Errorf("quotes summary: %q", out)
	}
	rows, _ := strconv.ParseInt(f[0], 10, 64)
	res.Landed["quotes"] = rows
	if want := strconv.Itoa(g.count); f[0] != want || f[1] != want || f[2] != want {
		fail("quotes has %s rows, %s distinct Kafka offsets and %s distinct (symbol, ts); want %s of each: every quote once", f[0], f[1], f[2], want)
	}
	if !decimalIs(f[3], g.bid, 4) || !decimalIs(f[4], g.ask, 4) {
		fail("quotes: sum(bid) %s, sum(ask) %s; the quotes produced add up to %s and %s", f[3], f[4], decimalText(g.bid, 4), decimalText(g.ask, 4))
	}

	out, err = c.Shard1.Query(ctx, "SELECT symbol, toString(day), sum(quotes), toString(sum(mid_sum)), toString(sum(spread_sum)) "+
		"FROM quotes_eod GROUP BY symbol, day ORDER BY symbol, day")
	if err != nil {
		return err
	}
	seen := map[dayKey]bool{}
	var quotes int64
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 5 {
			return fmt.Errorf("quotes_eod row %q", line)
		}
		k := dayKey{f[0], f[1]}
		seen[k] = true
		n, _ := strconv.ParseInt(f[2], 10, 64)
		quotes += n
		want := g.days[k]
		switch {
		case want == nil:
			fail("quotes_eod has %s on %s, which no quote was for", k.symbol, k.day)
		case n != want.quotes || !decimalIs(f[3], want.midE5, 5) || !decimalIs(f[4], want.spreadE4, 4):
			fail("quotes_eod %s %s: %d quotes, mid sum %s, spread sum %s; want %d, %s, %s", k.symbol, k.day, n, f[3], f[4],
				want.quotes, decimalText(want.midE5, 5), decimalText(want.spreadE4, 4))
		}
	}
	res.Landed["quotes_eod"] = quotes
	for k := range g.days {
		if !seen[k] {
			fail("quotes_eod has no row for %s on %s", k.symbol, k.day)
		}
	}

	// Each shard holds exactly the symbols whose hash picks it (equal
	// weights: cityHash64(symbol) % 2 is shard 1 for 0, shard 2 for 1).
	for i, s := range c.shards() {
		out, err := s.Query(ctx, fmt.Sprintf("SELECT (SELECT count() FROM quotes_local), (SELECT countIf(cityHash64(symbol) %% 2 != %[1]d) FROM quotes_local), "+
			"(SELECT count() FROM quotes_eod_local), (SELECT countIf(cityHash64(symbol) %% 2 != %[1]d) FROM quotes_eod_local)", i))
		if err != nil {
			return err
		}
		f := strings.Fields(out)
		if len(f) != 4 || f[0] == "0" || f[1] != "0" || f[2] == "0" || f[3] != "0" {
			fail("shard %d: (quotes rows, misplaced, end-of-day rows, misplaced) = %v; want rows on each shard, none misplaced", i+1, f)
		}
	}
	for _, t := range Tables {
		if res.Inserted[t] != int64(g.count) {
			fail("sluice counted %d rows inserted into %s; want %d", res.Inserted[t], t, g.count)
		}
	}
	return errors.Join(errs...)
}

// decimalIs reports whether the decimal text s is unscaled * 10^-scale.
func decimalIs(s string, unscaled int64, scale int) bool {
	got, ok := new(big.Rat).SetString(s)
	want := new(big.Rat).SetFrac(big.NewInt(unscaled), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
	return ok && got.Cmp(want) == 0
}

func decimalText(unscaled int64, scale int) string {
	return new(big.Rat).SetFrac(big.NewInt(unscaled), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)).FloatString(scale)
}

// ServerInserts is what the shards' query logs (system.query_log) say of
// a run's inserts.
type ServerInserts struct {
	// Sent is, by shard, the INSERT statements sluice sent it, and
	// SentMedian their median time on the server.
	Sent       [2]int
	SentMedian [2]time.Duration
	// Forwarded is the inserts shard 2 received from shard 1, over the
	// link: the Distributed tables' rows for shard 2. ForwardedMin,
	// ForwardedMedian and ForwardedMax are the times of the inserts on
	// shard 1 they were part of, which waited for them.
	Forwarded                                   int
	ForwardedMin, ForwardedMedian, ForwardedMax time.Duration
}

// serverInserts reads the shards' query logs for the run's inserts since
// it began.
func (c *Cluster) serverInserts(ctx context.Context, since time.Time) (*ServerInserts, error) {
	var si ServerInserts
	where := fmt.Sprintf("type = 'QueryFinish' AND query_kind = 'Insert' AND event_time_microseconds >= fromUnixTimestamp64Micro(%d) "+
		"AND hasAny(tables, ['default.quotes', 'default.quotes_eod', 'default.quotes_local', 'default.quotes_eod_local'])", since.UnixMicro())
	var forwardedFrom []string
	for i, s := range c.shards() {
		if err := s.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
			return nil, err
		}
		out, err := s.Query(ctx, "SELECT count(), quantileExact(0.5)(query_duration_ms) FROM system.query_log WHERE is_initial_query AND "+where)
		if err != nil {
			return nil, err
		}
		if _, err := fmt.Sscan(out, &si.Sent[i], &si.SentMedian[i]); err != nil {
			return nil, fmt.Errorf("shard %d's query log: %q: %w", i+1, out, err)
		}
		si.SentMedian[i] *= time.Millisecond
		if i == 1 {
			out, err := s.Query(ctx, "SELECT initial_query_id FROM system.query_log WHERE NOT is_initial_query AND "+where)
			if err != nil {
				return nil, err
			}
			for id := range strings.Lines(out) {
				forwardedFrom = append(forwardedFrom, "'"+strings.TrimSpace(id)+"'")
			}
		}
	}
	si.Forwarded = len(forwardedFrom)
	if si.Forwarded == 0 {
		return &si, nil
	}
	out, err := c.Shard1.Query(ctx, fmt.Sprintf("SELECT count(), min(query_duration_ms), quantileExact(0.5)(query_duration_ms), max(query_duration_ms) FROM system.query_log "+
		"WHERE query_id IN (%s) AND %s", strings.Join(forwardedFrom, ","), where))
	if err != nil {
		return nil, err
	}
	var found int
	if _, err := fmt.Sscan(out, &found, &si.ForwardedMin, &si.ForwardedMedian, &si.ForwardedMax); err != nil {
		return nil, fmt.Errorf("shard 1's query log: %q: %w", out, err)
	}
	if found != si.Forwarded {
		return nil, fmt.Errorf("shard 2 received %d inserts from shard 1, whose query log has %d of them", si.Forwarded, found)
	}
	si.ForwardedMin *= time.Millisecond
	si.ForwardedMedian *= time.Millisecond
	si.ForwardedMax *= time.Millisecond
	return &si, nil
}
