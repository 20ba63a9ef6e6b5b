package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// Config configures the sink. The zero value of every field means its
// documented default.
type Config struct {
	// Addr is the server's native protocol address, host:port. Required.
	Addr string `yaml:"addr"`
	// Database holds the target tables. Default "default".
	Database string `yaml:"database"`
	// User and Password authenticate. Default user "default", no password.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Compression of insert data: "lz4" (default), "zstd" or "none".
	Compression string `yaml:"compression"`
	// TLS enables TLS on the native connection.
	TLS                   bool `yaml:"tls"`
	TLSInsecureSkipVerify bool `yaml:"tls_insecure_skip_verify"`

	// DialTimeout bounds one connection attempt. Default 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds one read from the server. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// ConnectTimeout bounds the first connection at startup, retries
	// included: an unreachable server fails startup after it. Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`

	// ChunkBytes seals a chunk when its encoded size reaches it.
	// Default 1 MiB.
	ChunkBytes int `yaml:"chunk_bytes"`
	// ChunkLinger seals a non-empty chunk this long after its first row.
	// Default 200ms.
	ChunkLinger time.Duration `yaml:"chunk_linger"`
	// QueueCapacity is the number of sealed chunks a shard queue holds. A full
	// queue makes senders wait: it is the backpressure signal. Default 8.
	QueueCapacity int `yaml:"queue_capacity"`
	// MaxInsertRows and MaxInsertBytes end an insert's merge of chunks.
	// Defaults 1,000,000 rows and 128 MiB.
	MaxInsertRows  int `yaml:"max_insert_rows"`
	MaxInsertBytes int `yaml:"max_insert_bytes"`
	// InsertLinger is how long a shard worker waits for more chunks after
	// the first one before it inserts. Default 500ms.
	InsertLinger time.Duration `yaml:"insert_linger"`
	// InsertsPerShard is the number of concurrent inserts per shard.
	// Default 2.
	InsertsPerShard int `yaml:"inserts_per_shard"`
	// RetryMin and RetryMax bound the backoff between insert attempts.
	// Defaults 100ms and 10s.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
}

// Validate applies defaults and checks values, naming the field at fault.
func (c *Config) Validate() error {
	if c.Addr == "" {
		return fmt.Errorf("clickhouse.addr is required")
	}
	if c.Database == "" {
		c.Database = "default"
	}
	if c.User == "" {
		c.User = "default"
	}
	switch c.Compression {
	case "":
		c.Compression = "lz4"
	case "lz4", "zstd", "none":
	default:
		return fmt.Errorf("clickhouse.compression: %q is not one of lz4, zstd, none", c.Compression)
	}
	setDur(&c.DialTimeout, 5*time.Second)
	setDur(&c.ReadTimeout, 60*time.Second)
	setDur(&c.ConnectTimeout, 5*time.Second)
	setDur(&c.ChunkLinger, 200*time.Millisecond)
	setDur(&c.InsertLinger, 500*time.Millisecond)
	setDur(&c.RetryMin, 100*time.Millisecond)
	setDur(&c.RetryMax, 10*time.Second)
	setInt(&c.ChunkBytes, 1<<20)
	setInt(&c.QueueCapacity, 8)
	setInt(&c.MaxInsertRows, 1_000_000)
	setInt(&c.MaxInsertBytes, 128<<20)
	setInt(&c.InsertsPerShard, 2)
	for name, v := range map[string]int{
		"clickhouse.chunk_bytes": c.ChunkBytes, "clickhouse.queue_capacity": c.QueueCapacity,
		"clickhouse.max_insert_rows": c.MaxInsertRows, "clickhouse.max_insert_bytes": c.MaxInsertBytes,
		"clickhouse.inserts_per_shard": c.InsertsPerShard,
	} {
		if v < 0 {
			return fmt.Errorf("%s: must be positive, got %d", name, v)
		}
	}
	if c.RetryMax < c.RetryMin {
		return fmt.Errorf("clickhouse.retry_max (%s) is below clickhouse.retry_min (%s)", c.RetryMax, c.RetryMin)
	}
	return nil
}

func setDur(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func setInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// Ack is told when the rows it stands for are durably inserted.
type Ack interface {
	// Done is called once per chunk that carried the ack's rows, after the
	// insert holding that chunk succeeded.
	Done()
}

// Chunk is a sealed block on its way to the server, with the acks of the
// records whose rows it holds.
type Chunk struct {
	Block *Block
	Acks  []Ack
}

// Sink writes chunks to ClickHouse. Create it with New, start its workers
// with Run, send chunks with Send, and end it with Close.
type Sink struct {
	cfg    Config
	log    *slog.Logger
	dialer *dialer

	queue    chan *Chunk
	closing  chan struct{}
	closeOne sync.Once

	tablesMu sync.Mutex
	tables   map[string]*Table
	pools    map[*Table]*sync.Pool

	// Stats, read with Stats.
	insertedRows   atomic.Int64
	insertedChunks atomic.Int64
	inserts        atomic.Int64
	insertErrors   atomic.Int64
}

// New validates cfg and connects to the server, retrying with backoff until
// cfg.ConnectTimeout; an unreachable server is an error that says so.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		cfg:     cfg,
		log:     log,
		dialer:  &dialer{cfg: &cfg, addr: cfg.Addr},
		queue:   make(chan *Chunk, cfg.QueueCapacity),
		closing: make(chan struct{}),
		tables:  map[string]*Table{},
		pools:   map[*Table]*sync.Pool{},
	}
	s.dialer.cfg = &s.cfg
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	hello, rev := s.dialer.Server()
	log.Info("connected to ClickHouse", "addr", cfg.Addr, "server", hello.Name,
		"version", fmt.Sprintf("%d.%d.%d", hello.Major, hello.Minor, hello.Patch),
		"revision", hello.Revision, "protocol", rev)
	return s, nil
}

// connect dials with retries until ConnectTimeout.
func (s *Sink) connect(ctx context.Context) (*ch.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	b := backoff{min: s.cfg.RetryMin, max: 2 * time.Second}
	for {
		c, err := s.dialer.dial(ctx)
		if err == nil {
			return c, nil
		}
		if err := classify(err); errors.As(err, new(*PermanentError)) {
			return nil, fmt.Errorf("clickhouse %s: %w", s.cfg.Addr, err)
		}
		wait := b.next(rand.Int64N)
		s.log.Warn("ClickHouse not reachable, retrying", "addr", s.cfg.Addr, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("clickhouse %s unreachable after %s: %w", s.cfg.Addr, s.cfg.ConnectTimeout, err)
		case <-time.After(wait):
		}
	}
}

// Config returns the sink's configuration with defaults applied.
func (s *Sink) Config() Config { return s.cfg }

// Table discovers a table's schema from the server (once per name). A
// missing table or a column sluice cannot encode is a *PermanentError naming
// the table, column and type.
func (s *Sink) Table(ctx context.Context, name string) (*Table, error) {
	s.tablesMu.Lock()
	defer s.tablesMu.Unlock()
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cols, err := describe(ctx, c, s.cfg.Database, name)
	if err != nil {
		return nil, fmt.Errorf("table %s.%s: %w", s.cfg.Database, name, err)
	}
	t, err := NewTable(s.cfg.Database, name, cols)
	if err != nil {
		return nil, &PermanentError{Err: err}
	}
	s.tables[name] = t
	s.pools[t] = &sync.Pool{New: func() any { return t.NewBlock() }}
	return t, nil
}

// NewBlock returns an empty block for a table returned by Table, reusing
// the buffers of blocks already inserted.
func (s *Sink) NewBlock(t *Table) *Block {
	s.tablesMu.Lock()
	p := s.pools[t]
	s.tablesMu.Unlock()
	if p == nil {
		return t.NewBlock()
	}
	return p.Get().(*Block)
}

func (s *Sink) releaseBlock(b *Block) {
	b.Reset()
	s.tablesMu.Lock()
	p := s.pools[b.table]
	s.tablesMu.Unlock()
	if p != nil {
		p.Put(b)
	}
}

// Send queues a sealed chunk. It waits while the queue is full, which is how
// a slow server pushes back on the pipeline, and returns ctx's error if ctx
// ends first. Send must not be called after Close.
func (s *Sink) Send(ctx context.Context, c *Chunk) error {
	if c.Block.Rows() == 0 {
		for _, a := range c.Acks {
			a.Done()
		}
		s.releaseBlock(c.Block)
		return nil
	}
	select {
	case s.queue <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueueDepth is the number of sealed chunks waiting in the queue.
func (s *Sink) QueueDepth() int { return len(s.queue) }

// QueueFull reports whether the next Send would wait.
func (s *Sink) QueueFull() bool { return len(s.queue) == cap(s.queue) }

// Close tells the workers that no more chunks come: they insert what is
// queued and Run returns.
func (s *Sink) Close() {
	s.closeOne.Do(func() { close(s.closing); close(s.queue) })
}

// Stats are the sink's counters.
type Stats struct {
	InsertedRows, InsertedChunks, Inserts, InsertErrors int64
	QueueDepth                                          int
}

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	return Stats{
		InsertedRows: s.insertedRows.Load(), InsertedChunks: s.insertedChunks.Load(),
		Inserts: s.inserts.Load(), InsertErrors: s.insertErrors.Load(), QueueDepth: len(s.queue),
	}
}

// Run runs the shard workers until Close has been called and the queue is
// drained, or ctx ends, or an insert fails permanently (returned as a
// *PermanentError). Cancelling ctx abandons queued chunks without acking them.
func (s *Sink) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for i := 0; i < s.cfg.InsertsPerShard; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.shardWorker(ctx); err != nil {
				errOnce.Do(func() { firstErr = err; cancel(err) })
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if s.isClosed() && len(s.queue) == 0 {
		return nil
	}
	return ctx.Err()
}

func (s *Sink) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// shardWorker merges queued chunks into inserts.
func (s *Sink) shardWorker(ctx context.Context) error {
	var (
		conn    *ch.Client
		pending []*Chunk
	)
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		pending = pending[:0]
		select {
		case c, ok := <-s.queue:
			if !ok {
				return nil
			}
			pending = append(pending, c)
		case <-ctx.Done():
			return nil
		}
		rows, bytes := pending[0].Block.Rows(), pending[0].Block.Size()
		timer.Reset(s.cfg.InsertLinger)
	merge:
		for rows < s.cfg.MaxInsertRows && bytes < s.cfg.MaxInsertBytes {
			select {
			case c, ok := <-s.queue:
				if !ok {
					break merge
				}
				pending = append(pending, c)
				rows += c.Block.Rows()
				bytes += c.Block.Size()
			case <-timer.C:
				break merge
			case <-ctx.Done():
				return nil
			}
		}
		timer.Stop()
		var err error
		conn, err = s.insertWithRetry(ctx, conn, pending, rows)
		if err != nil {
			return err
		}
		for _, c := range pending {
			for _, a := range c.Acks {
				a.Done()
			}
			s.releaseBlock(c.Block)
		}
		s.insertedRows.Add(int64(rows))
		s.insertedChunks.Add(int64(len(pending)))
		s.inserts.Add(1)
	}
}

// insertWithRetry inserts the chunks of one table group by group, retrying
// each failed insert unchanged with backoff until it succeeds, fails
// permanently, or ctx ends.
func (s *Sink) insertWithRetry(ctx context.Context, conn *ch.Client, chunks []*Chunk, rows int) (*ch.Client, error) {
	// Chunks for different tables go in separate inserts.
	for len(chunks) > 0 {
		t := chunks[0].Block.table
		group := chunks[:0:0]
		rest := chunks[:0:0]
		for _, c := range chunks {
			if c.Block.table == t {
				group = append(group, c)
			} else {
				rest = append(rest, c)
			}
		}
		b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
		for attempt := 1; ; attempt++ {
			var err error
			if conn == nil || conn.IsClosed() {
				conn, err = s.dialer.dial(ctx)
			}
			if err == nil {
				err = insertNative(ctx, conn, t, group)
			}
			if err == nil {
				break
			}
			s.insertErrors.Add(1)
			if conn != nil {
				_ = conn.Close()
				conn = nil
			}
			err = classify(err)
			if errors.As(err, new(*PermanentError)) {
				return nil, fmt.Errorf("insert into %s: %w", t.FullName(), err)
			}
			wait := b.next(rand.Int64N)
			s.log.Warn("insert failed, retrying", "table", t.FullName(), "rows", rows,
				"attempt", attempt, "err", err, "in", wait)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		chunks = rest
	}
	return conn, nil
}

// emptyColumn has no rows; it ends a streamed insert.
type emptyColumn struct{}

func (emptyColumn) Type() proto.ColumnType     { return proto.ColumnTypeString }
func (emptyColumn) Rows() int                  { return 0 }
func (emptyColumn) EncodeColumn(*proto.Buffer) {}
func (emptyColumn) WriteColumn(*proto.Writer)  {}
func (emptyColumn) Reset()                     {}

// insertNative sends the chunks as the blocks of one INSERT.
func insertNative(ctx context.Context, conn *ch.Client, t *Table, chunks []*Chunk) error {
	input := chunks[0].Block.input()
	next := 1
	return conn.Do(ctx, ch.Query{
		Body:  t.insertSQL,
		Input: input,
		OnInput: func(ctx context.Context) error {
			if next == len(chunks) {
				input[0].Data = emptyColumn{}
				return io.EOF
			}
			for i, c := range chunks[next].Block.cols {
				input[i].Data = c
			}
			next++
			return nil
		},
	})
}
