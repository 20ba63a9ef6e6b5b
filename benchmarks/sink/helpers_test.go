package sink_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// columns10 is the synthetic 10-column access-log row every benchmark uses.
const columns10 = "ts DateTime, id UInt64, user_id UInt64, host LowCardinality(String), path String, " +
	"status UInt16, latency Float64, bytes UInt64, tags Array(String), msg String"

// dataset is rows in RowBinary and the same rows as ch-go columns.
type dataset struct {
	rows  [][]byte
	bytes int // total RowBinary bytes

	ts      proto.ColDateTime
	id      proto.ColUInt64
	user    proto.ColUInt64
	host    proto.ColStr
	path    proto.ColStr
	status  proto.ColUInt16
	latency proto.ColFloat64
	size    proto.ColUInt64
	tags    *proto.ColArr[string]
	msg     proto.ColStr
}

var (
	datasetOnce sync.Once
	shared      *dataset
)

// rowsData returns 100,000 distinct rows (generated once).
func rowsData() *dataset {
	datasetOnce.Do(func() { shared = genRows(100_000) })
	return shared
}

func genRows(n int) *dataset {
	rng := rand.New(rand.NewPCG(7, 11))
	d := &dataset{tags: proto.NewArray[string](new(proto.ColStr))}
	words := strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")
	tagSet := []string{"edge", "cache-hit", "retry", "canary", "mobile", "bot"}
	for i := range n {
		ts := uint32(1_780_000_000 + i/10)
		id := uint64(i)
		user := rng.Uint64N(100_000)
		host := fmt.Sprintf("web-%02d.eu-west-1", rng.IntN(50))
		path := fmt.Sprintf("/api/v1/items/%d", rng.IntN(100_000))
		status := []uint16{200, 200, 200, 200, 301, 404, 500}[rng.IntN(7)]
		latency := rng.ExpFloat64() * 20
		size := rng.Uint64N(1 << 20)
		var tags []string
		for range rng.IntN(4) {
			tags = append(tags, tagSet[rng.IntN(len(tagSet))])
		}
		var msg strings.Builder
		for msg.Len() < 40+rng.IntN(80) {
			msg.WriteString(words[rng.IntN(len(words))])
			msg.WriteByte(' ')
		}

		b := binary.LittleEndian.AppendUint32(nil, ts)
		b = binary.LittleEndian.AppendUint64(b, id)
		b = binary.LittleEndian.AppendUint64(b, user)
		b = appendStr(b, host)
		b = appendStr(b, path)
		b = binary.LittleEndian.AppendUint16(b, status)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(latency))
		b = binary.LittleEndian.AppendUint64(b, size)
		b = binary.AppendUvarint(b, uint64(len(tags)))
		for _, t := range tags {
			b = appendStr(b, t)
		}
		b = appendStr(b, msg.String())
		d.rows = append(d.rows, b)
		d.bytes += len(b)

		d.ts.Append(time.Unix(int64(ts), 0))
		d.id.Append(id)
		d.user.Append(user)
		d.host.Append(host)
		d.path.Append(path)
		d.status.Append(status)
		d.latency.Append(latency)
		d.size.Append(size)
		d.tags.Append(tags)
		d.msg.Append(msg.String())
	}
	return d
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// rowBytes is the mean RowBinary size of a row.
func (d *dataset) rowBytes() int64 { return int64(d.bytes / len(d.rows)) }

// input is the dataset as ch-go input columns (LowCardinality sent as
// String, as the sink does).
func (d *dataset) input() proto.Input {
	return proto.Input{
		{Name: "ts", Data: &d.ts}, {Name: "id", Data: &d.id}, {Name: "user_id", Data: &d.user},
		{Name: "host", Data: &d.host}, {Name: "path", Data: &d.path}, {Name: "status", Data: &d.status},
		{Name: "latency", Data: &d.latency}, {Name: "bytes", Data: &d.size}, {Name: "tags", Data: d.tags},
		{Name: "msg", Data: &d.msg},
	}
}

// dialRaw opens a plain ch-go connection as the sink speaks to 18.16:
// protocol revision 54031, LZ4.
func dialRaw(b testing.TB, addr string) *ch.Client {
	b.Helper()
	c, err := ch.Dial(context.Background(), ch.Options{Address: addr, ProtocolVersion: 54031, Compression: ch.CompressionLZ4})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func execT(b testing.TB, srv *testinfra.ClickHouse, sql string) {
	b.Helper()
	if err := srv.Exec(context.Background(), sql); err != nil {
		b.Fatal(err)
	}
}

// newSink starts a sink with Run; it is closed and waited for on cleanup.
func newSink(b testing.TB, cfg clickhouse.Config) *clickhouse.Sink {
	b.Helper()
	s, err := clickhouse.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	b.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			b.Errorf("sink: %v", err)
		}
	})
	return s
}

// flushAck records, for the chunk it is attached to, the time from Send to
// the ack.
type flushAck struct {
	sent time.Time
	rec  *latencies
}

func (a *flushAck) Done() { a.rec.add(time.Since(a.sent)) }

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
	n  atomic.Int64
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
	l.n.Add(1)
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// pump decodes rows of ds (cycling) into blocks of table, seals each when
// it reaches the sink's chunk_bytes, sends it, and waits until every chunk
// is acked. producers goroutines share the rows, as partition workers do.
// It returns the wall time and the per-chunk flush latencies.
func pump(b testing.TB, s *clickhouse.Sink, table *clickhouse.Table, ds *dataset, rows, producers int) (time.Duration, *latencies) {
	b.Helper()
	start := time.Now()
	lat, chunks := produce(b, s, table, ds, rows, producers)
	for lat.n.Load() < chunks {
		time.Sleep(time.Millisecond)
	}
	return time.Since(start), lat
}

// produce is pump without the wait for the acks; it returns the number of
// chunks sent.
func produce(b testing.TB, s *clickhouse.Sink, table *clickhouse.Table, ds *dataset, rows, producers int) (*latencies, int64) {
	b.Helper()
	ctx := context.Background()
	target := s.Config().ChunkBytes
	lat := &latencies{}
	var chunks atomic.Int64
	var wg sync.WaitGroup
	per := rows / producers
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := per
			if p == producers-1 {
				n = rows - per*(producers-1)
			}
			blk := s.NewBlock(table)
			send := func() {
				chunks.Add(1)
				if err := s.Send(ctx, clickhouse.NewChunk(blk, []clickhouse.Ack{&flushAck{sent: time.Now(), rec: lat}})); err != nil {
					b.Error(err)
				}
				blk = s.NewBlock(table)
			}
			for i := range n {
				if err := blk.AppendRow(ds.rows[(p*per+i)%len(ds.rows)]); err != nil {
					b.Error(err)
					return
				}
				// The engine checks the size once per polled batch.
				if i%64 == 63 && blk.Size() >= target {
					send()
				}
			}
			if blk.Rows() > 0 {
				send()
			}
		}()
	}
	wg.Wait()
	return lat, chunks.Load()
}

// drainRun starts a sink (untimed), then times sending rows through it
// and closing it: the last insert ends when the queue closes instead of
// waiting out insert_linger, so the figure is the sink's throughput, not
// its linger. It returns the time, the flush latencies and the stats.
func drainRun(b *testing.B, cfg clickhouse.Config, table string, ds *dataset, rows, producers int) (time.Duration, *latencies, clickhouse.Stats) {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	s, err := clickhouse.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := s.Table(ctx, table)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.StartTimer()
	start := time.Now()
	lat, _ := produce(b, s, tbl, ds, rows, producers)
	s.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(start), lat, s.Stats()
}

// serverCPU is the CPU time (user + system, all threads) the server process
// has used.
func serverCPU(b testing.TB, srv *testinfra.ClickHouse) time.Duration {
	b.Helper()
	d, err := testinfra.CPUTime(srv.PID())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func median[T cmp.Ordered](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		var zero T
		return zero
	}
	return s[len(s)/2]
}

func chunkBytesEnv() int {
	v, _ := strconv.Atoi(os.Getenv("CHUNK_BYTES"))
	return v
}

// windowAck records a chunk's rows, send time and ack time.
type windowAck struct {
	rows int
	sent time.Time
	rec  *window
}

func (a *windowAck) Done() { a.rec.add(a.rows, a.sent, time.Now()) }

type windowSample struct {
	rows        int
	sent, acked time.Time
}

type window struct {
	mu      sync.Mutex
	samples []windowSample
	n       atomic.Int64
}

func (w *window) add(rows int, sent, acked time.Time) {
	w.mu.Lock()
	w.samples = append(w.samples, windowSample{rows, sent, acked})
	w.mu.Unlock()
	w.n.Add(1)
}

// pumpFor runs producers that decode and send rows without pause for warm
// + measure, then drains the sink. Throughput counts the rows acked inside
// the measured window only, so neither the start nor the last insert's
// linger at the end skews it; the flush quantiles are those of the chunks
// sent inside the window.
func pumpFor(b testing.TB, s *clickhouse.Sink, table *clickhouse.Table, ds *dataset, producers int, warm, measure time.Duration) (rowsPerSec float64, p50, p99 time.Duration) {
	b.Helper()
	ctx := context.Background()
	target := s.Config().ChunkBytes
	rec := &window{}
	var chunks atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			blk := s.NewBlock(table)
			for i := p * 7919; ; i++ {
				if i%64 == 0 {
					select {
					case <-stop:
						if blk.Rows() > 0 {
							chunks.Add(1)
							_ = s.Send(ctx, clickhouse.NewChunk(blk, []clickhouse.Ack{&windowAck{rows: blk.Rows(), sent: time.Now(), rec: rec}}))
						}
						return
					default:
					}
				}
				if err := blk.AppendRow(ds.rows[i%len(ds.rows)]); err != nil {
					b.Error(err)
					return
				}
				if i%64 == 63 && blk.Size() >= target {
					chunks.Add(1)
					if err := s.Send(ctx, clickhouse.NewChunk(blk, []clickhouse.Ack{&windowAck{rows: blk.Rows(), sent: time.Now(), rec: rec}})); err != nil {
						b.Error(err)
						return
					}
					blk = s.NewBlock(table)
				}
			}
		}()
	}
	start := time.Now()
	from, to := start.Add(warm), start.Add(warm+measure)
	time.Sleep(warm + measure)
	close(stop)
	wg.Wait()
	for rec.n.Load() < chunks.Load() {
		time.Sleep(time.Millisecond)
	}
	// Acks come an insert at a time, so counting the rows acked in a fixed
	// window would be quantized by inserts: count the rows acked after the
	// first ack in the window up to the last one, over the time between.
	slices.SortFunc(rec.samples, func(a, b windowSample) int { return a.acked.Compare(b.acked) })
	var first, last time.Time
	rows := 0
	lat := &latencies{}
	for _, sm := range rec.samples {
		if !sm.sent.Before(from) && sm.sent.Before(to) {
			lat.d = append(lat.d, sm.acked.Sub(sm.sent))
		}
		if sm.acked.Before(from) || !sm.acked.Before(to) {
			continue
		}
		switch {
		case first.IsZero():
			first = sm.acked
		case sm.acked.After(first):
			rows += sm.rows
			last = sm.acked
		}
	}
	if last.IsZero() {
		return 0, lat.quantile(0.5), lat.quantile(0.99)
	}
	return float64(rows) / last.Sub(first).Seconds(), lat.quantile(0.5), lat.quantile(0.99)
}
